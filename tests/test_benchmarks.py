"""The benchmarks' package (benchmarks/): every way the docs and CI run `benchmarks/run.py` still
parses and names sections that exist, RESULTS.md's tables keep their format, and the serving
benchmarks' client (benchmarks/serve_client.py) talks to a server over a loopback port and over
a unix socket (a stand-in server here: `hlobundle serve` itself is what the benchmark measures).
The benchmarks themselves run in CI (`.ci/run`, `run.py --quick`), not here."""

from __future__ import annotations

import http.server
import json
import re
import shlex
import socketserver
import sys
import threading

import numpy as np
import pytest
from helpers import ROOT

from hlobundle._extras import pip_line

sys.path.append(str(ROOT))
from benchmarks import run, serve_client, serve_shm  # noqa: E402
from benchmarks.harness import table  # noqa: E402

# Where the project tells a person (or CI) to run the suite: `benchmarks/run.py ARGS`, and
# `run.py ARGS` in the benchmarks' own files.
DOCUMENTED = [ROOT / "README.md", ROOT / ".ci" / "run", *sorted((ROOT / "docs").glob("*.md"))]
ARGS = r"((?: --?[a-z][\w-]*(?: [^\s`)>'\"-][^\s`)>'\"]*)?)*)"
INVOCATION = re.compile(r"benchmarks/run\.py" + ARGS)
INSIDE = re.compile(r"run\.py" + ARGS)


def _invocations() -> list[tuple[str, list[str]]]:
    found = []
    for pattern, paths in (
        (INVOCATION, DOCUMENTED),
        (INSIDE, sorted((ROOT / "benchmarks").glob("*.py"))),
    ):
        for path in paths:
            for match in pattern.finditer(path.read_text()):
                found.append((path.relative_to(ROOT).as_posix(), shlex.split(match.group(1))))
    return found


def test_every_documented_invocation_parses_and_names_sections_that_exist(tmp_path):
    invocations = _invocations()
    flags = {flag for _, argv in invocations for flag in argv if flag.startswith("--")}
    assert {"--quick", "--only", "--out"} <= flags, invocations  # the scan finds them
    sections = run.sections_of(tmp_path, quick=True)
    for where, argv in invocations:
        args = run.arguments().parse_args(argv)
        named = [name for name in args.only.split(",") if name]
        assert set(named) <= set(sections), (where, named)


def test_the_invocation_scan_sees_a_section_that_is_gone(tmp_path):
    text = "`benchmarks/run.py --only no-such`"
    (argv,) = [shlex.split(m.group(1)) for m in INVOCATION.finditer(text)]
    named = run.arguments().parse_args(argv).only.split(",")
    assert not set(named) <= set(run.sections_of(tmp_path, quick=True))


def test_the_torch_section_is_skipped_with_its_reason_where_torch_is_absent(tmp_path, monkeypatch):
    import importlib.util

    from benchmarks import pytorch

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a)
    )
    (row,) = pytorch.torch_cost(tmp_path, quick=True)
    assert row["skipped"] == f"torch is not installed: {pip_line('torch')}"


def test_a_table_keeps_results_md_s_format():
    rows = [
        {"case": "a", "s": 0.000123456, "ratio": 2.0},
        {"case": "b", "bytes": 1024, "ratio": 1.23456},
    ]
    assert table(rows) == (
        "| case | s | ratio | bytes |\n"
        "|---|---|---|---|\n"
        "| a | 0.000123 | 2 |  |\n"
        "| b |  | 1.23 | 1024 |"
    )
    assert table([]) == ""


# A stand-in for `hlobundle serve`: the routes the client asks, answering a binary inference
# request with RESULT (the binary extension: a JSON header, then the tensor's bytes).
RESULT = np.arange(4, dtype="<f4")
METRICS = (
    'hlobundle_batch_size_sum{model="lenet5"} 12.0\n'
    'hlobundle_batch_size_count{model="lenet5"} 4.0\n'
    'hlobundle_batch_size_sum{model="other"} 99.0\n'
)


class StandIn(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the benchmark's clients use it
    regions: dict[str, str] = {}  # the shared-memory regions registered: name, key
    writes = True  # whether an infer naming an output region writes RESULT into it

    def do_GET(self) -> None:
        body = METRICS.encode() if self.path == "/metrics" else b'{"live": true}'
        self._answer(200, body, {})

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.path.startswith("/v2/systemsharedmemory/"):
            return self._shared_memory(body)
        if self.path != "/v2/models/lenet5/infer":
            return self._answer(404, b"{}", {})
        if "Inference-Header-Content-Length" not in self.headers:  # JSON naming regions
            out = json.loads(body)["outputs"][0]["parameters"]["shared_memory_region"]
            if StandIn.writes:
                with open(f"/dev/shm/{StandIn.regions[out]}", "r+b") as f:
                    f.write(RESULT.tobytes())
            return self._answer(200, b"{}", {})
        header = json.dumps({"outputs": [{"name": "result", "datatype": "FP32"}]}).encode()
        length = {"Inference-Header-Content-Length": str(len(header))}
        self._answer(200, header + RESULT.tobytes(), length)

    def _shared_memory(self, body: bytes) -> None:
        parts = self.path.split("/")
        if parts[-1] == "register":
            StandIn.regions[parts[-2]] = json.loads(body)["key"]
        else:
            StandIn.regions.clear()
        self._answer(200, b"{}", {})

    def _answer(self, status: int, body: bytes, headers: dict[str, str]) -> None:
        self.send_response(status)
        for k, v in {**headers, "Content-Length": str(len(body))}.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass

    def address_string(self) -> str:  # a unix socket's peer has no host
        return "local"


class OverTcp(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True


class OverUnix(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


@pytest.fixture(params=["port", "unix socket"])
def where(request, tmp_path):
    if request.param == "port":
        server: socketserver.BaseServer = OverTcp(("127.0.0.1", 0), StandIn)
        at: serve_client.Where = server.server_address[1]
    else:
        at = str(tmp_path / "s.sock")
        server = OverUnix(at, StandIn)
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    yield at
    server.shutdown()
    server.server_close()
    thread.join()


def test_the_client_gets_an_answer_and_the_metrics(where):
    header, body = serve_client.binary_request(np.zeros((4, 1, 28, 28), np.float32))
    assert json.loads(header)["inputs"][0]["parameters"]["binary_data_size"] == 4 * 28 * 28 * 4
    assert np.array_equal(serve_client.answer(where, body, header), RESULT)
    assert serve_client.metric_mean(where, "hlobundle_batch_size") == 3.0


# The clients' connections stay open until collected, as in the benchmark.
@pytest.mark.filterwarnings("ignore::ResourceWarning")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_the_load_counts_the_answers_that_are_not_the_wanted_ones(where):
    header, body = serve_client.binary_request(np.zeros((4, 1, 28, 28), np.float32))
    rate, wrong = serve_client.load(where, body, len(header), RESULT, clients=3, each=2)
    assert rate > 0 and wrong == 0
    _, wrong = serve_client.load(where, body, len(header), RESULT + 1, clients=3, each=2)
    assert wrong == 6
    assert serve_client.ceiling(where, clients=2, each=2) > 0


def test_threads_run_each_client_and_sum_what_they_return():
    seen: list[int] = []

    def client() -> int:
        seen.append(1)
        return 2

    seconds, total = serve_client.in_threads(client, 5)
    assert seconds >= 0 and total == 10 and len(seen) == 5


# The clients' connections stay open until collected, as in the benchmark.
@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::ResourceWarning")
def test_the_shared_memory_load_reads_each_answer_out_of_its_own_cleared_region(where, monkeypatch):
    images = np.ones((4, 1, 28, 28), np.float32)
    pairs = serve_shm.registered(where, images, RESULT.nbytes, clients=3)
    try:
        assert sorted(StandIn.regions) == [f"c{k}-{s}" for k in range(3) for s in ("in", "out")]
        rate, wrong = serve_shm.shm_load(where, pairs, images, RESULT, each=2)
        assert rate > 0 and wrong == 0
        _, wrong = serve_shm.shm_load(where, pairs, images, RESULT + 1, each=2)
        assert wrong == 6
        monkeypatch.setattr(StandIn, "writes", False)  # the right answer is there from before
        _, wrong = serve_shm.shm_load(where, pairs, images, RESULT, each=2)
        assert wrong == 6
    finally:
        serve_shm.released(where, pairs)
    assert StandIn.regions == {}
