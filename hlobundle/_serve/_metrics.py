"""The server's Prometheus metrics: requests by model and status, their latency, and the sizes of
the model calls. With several front doors (`serve --frontends`), every process keeps its values
in files of one directory (prometheus_client's multiprocess mode) and /metrics adds them up."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any


class Metrics:
    """The server's Prometheus metrics, in a registry of their own."""

    def __init__(self, shared_dir: str | None = None) -> None:
        from prometheus_client import CollectorRegistry, Counter, Histogram

        if shared_dir is not None:
            _share(shared_dir)
        self.shared_dir = shared_dir
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "hlobundle_requests", "inference requests", ["model", "status"], registry=self.registry
        )
        self.latency = Histogram(
            "hlobundle_request_seconds",
            "inference time",
            ["model"],
            registry=self.registry,
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5),
        )
        self.batch_sizes = Histogram(
            "hlobundle_batch_size",
            "requests per model call",
            ["model"],
            registry=self.registry,
            buckets=(1, 2, 4, 8, 16, 32, 64),
        )
        # each label's child, looked up once
        self.counted: Callable[[str, int], Any] = functools.cache(
            lambda name, status: self.requests.labels(name, str(status))
        )
        self.timed: Callable[[str], Any] = functools.cache(self.latency.labels)
        self.batched: Callable[[str], Any] = functools.cache(self.batch_sizes.labels)

    def text(self) -> bytes:
        from prometheus_client import generate_latest

        if self.shared_dir is None:
            return bytes(generate_latest(self.registry))
        from prometheus_client import CollectorRegistry
        from prometheus_client.multiprocess import MultiProcessCollector

        every = CollectorRegistry()
        MultiProcessCollector(every, self.shared_dir)  # every process's files, added up
        return bytes(generate_latest(every))


def _share(shared_dir: str) -> None:
    """Keep this process's metric values in files under `shared_dir`: prometheus_client reads
    the directory from the environment, and chooses how it keeps values when it is imported,
    or here for the metrics made from now on."""
    from prometheus_client import values

    os.environ["PROMETHEUS_MULTIPROC_DIR"] = shared_dir
    if values.ValueClass is values.MutexValue:  # not multiprocess yet
        values.ValueClass = values.MultiProcessValue()
