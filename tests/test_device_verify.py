"""`load(verify=True, device=...)`: tensor files streamed onto a JAX device as they are hashed,
without a private copy (issue 66, section 4), or, on a CPU device, put there from the verified
copy itself. What reaches the device is what was hashed: a file changed on disk after a run
was hashed leaves the device with the hashed bytes, and one changed before a run is read fails
the load with HASH_MISMATCH, with nothing on the device used. The tests stream onto this
machine's CPU device (`STREAM_ON_CPU`) as onto a TPU, except where they say so."""

from __future__ import annotations

import os

import jax
import ml_dtypes
import numpy as np
import pytest
from helpers import copy_of, functions_over_weights, pack_identity

import hlobundle
from hlobundle._bundle_io import _tensor_streaming
from hlobundle._read import _device_values, _reader

WEIGHTS = "weights.safetensors"


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    return functions_over_weights(tmp_path_factory.mktemp("device") / "fw", 2)


@pytest.fixture
def bundle(written, tmp_path, monkeypatch):
    """Two functions over one weights file of two 1 MiB chunks, read a chunk a run, so that
    each weight is joined on the device from two pieces (each test's own copy)."""
    monkeypatch.setattr(_tensor_streaming, "RUN_BYTES", 1 << 20)
    monkeypatch.setattr(_device_values, "STREAM_ON_CPU", True)
    return copy_of(written, tmp_path)


@pytest.fixture(params=["one thread", "a pool"])
def pooled(request, monkeypatch):
    if request.param == "a pool":  # as for a large bundle on a machine of several cores
        monkeypatch.setattr(_reader, "_PARALLEL_BYTES", 0)
        monkeypatch.setattr(os, "cpu_count", lambda: 2)


def _on_device(x) -> bool:
    return isinstance(x, jax.Array)


def test_the_tensors_are_the_verified_bytes_on_the_device(bundle, pooled):
    want = hlobundle.load(bundle, verify=True)
    got = hlobundle.load(bundle, verify=True, device=True)
    for name in ("f0", "f1"):
        params = got.select(name).parameters()
        assert all(_on_device(x) for x in params.values())
        for key, x in params.items():
            np.testing.assert_array_equal(np.asarray(x), want.select(name).parameters()[key])
    f = got.function("xla", name="f1")
    x = np.ones((2, 8), np.float32)
    np.testing.assert_allclose(np.asarray(f(x=x)), np.asarray(want.function("xla", name="f1")(x=x)))


def test_the_pool_has_the_threads_the_streaming_asks_for_and_the_bytes_stay_verified(
    bundle, monkeypatch
):
    """`THREADS_PER_CORE` sizes a streaming load's pool (3 a core: 6 threads on 2 cores, where
    the copy's pool has 2), and `IN_FLIGHT` 1 keeps fewer runs waiting: the arrays unchanged."""
    monkeypatch.setattr(_reader, "_PARALLEL_BYTES", 0)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(_tensor_streaming, "THREADS_PER_CORE", 3.0)
    monkeypatch.setattr(_tensor_streaming, "IN_FLIGHT", 1)
    windows = []
    each_run = _tensor_streaming._each_run

    def counted(plan, runs, pool):
        windows.append(pool._max_workers)
        return each_run(plan, runs, pool)

    monkeypatch.setattr(_tensor_streaming, "_each_run", counted)
    want = hlobundle.load(bundle, verify=True).select("f1").parameters()
    got = hlobundle.load(bundle, verify=True, device=True).select("f1").parameters()
    assert windows and set(windows) == {6}
    for key, x in got.items():
        np.testing.assert_array_equal(np.asarray(x), want[key])


def _overwrite(path, begin: int, end: int) -> None:
    """Bytes `[begin, end)` of the file in place (the inode the bundle holds open) made 0."""
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, bytes(end - begin), begin)
    finally:
        os.close(fd)


def _after_each_hash(monkeypatch, path, which) -> None:
    """Once a run of `path` is read and hashed, zero bytes `which(begin, end)` of it on disk."""
    hash_run = _tensor_streaming._hash_run
    inode = path.stat().st_ino

    def hooked(fd, begin, buffer, chunk):
        digests = hash_run(fd, begin, buffer, chunk)
        if os.fstat(fd).st_ino == inode:
            _overwrite(path, *which(begin, begin + len(buffer)))
        return digests

    monkeypatch.setattr(_tensor_streaming, "_hash_run", hooked)


def test_a_file_changed_after_a_run_is_hashed_leaves_the_hashed_bytes_on_the_device(
    bundle, pooled, monkeypatch
):
    want = {k: np.array(v) for k, v in hlobundle.load(bundle).select("f0").parameters().items()}
    b = hlobundle.load(bundle)
    _after_each_hash(monkeypatch, bundle / WEIGHTS, lambda begin, end: (begin, end))
    b.verify(device=True)
    got = b.select("f0").parameters()
    assert (bundle / WEIGHTS).read_bytes()[-1000:] == bytes(1000)  # the file did change
    for key, x in got.items():
        assert _on_device(x)
        np.testing.assert_array_equal(np.asarray(x), want[key])


def test_a_file_changed_before_a_run_is_read_fails_the_load(bundle, monkeypatch):
    b = hlobundle.load(bundle)
    size = (bundle / WEIGHTS).stat().st_size
    _after_each_hash(monkeypatch, bundle / WEIGHTS, lambda begin, end: (end, min(size, end + 64)))
    with pytest.raises(hlobundle.HloBundleError) as e:
        b.verify(device=True)
    assert (e.value.code, e.value.path) == ("HASH_MISMATCH", WEIGHTS)
    assert not _on_device(b.select("f0").parameters()["p_w0"])


def test_a_file_changed_before_verify_fails_it_with_nothing_on_the_device(bundle):
    b = hlobundle.load(bundle)
    _overwrite(bundle / WEIGHTS, 2 << 20, (2 << 20) + 8)  # in the second weight
    with pytest.raises(hlobundle.HloBundleError) as e:
        b.verify(device=True)
    assert (e.value.code, e.value.path) == ("HASH_MISMATCH", WEIGHTS)
    assert not any(_on_device(x) for x in b.select("f1").parameters().values())


@pytest.fixture
def reused(monkeypatch):
    """Run buffers used again, as for a device with memory of its own, each piece's copy made
    only once it is waited for (a transfer reads its buffer until it is done), and each buffer
    given back overwritten at once, as by the next run: a buffer given back while a piece or
    the file's sha256 still needs it leaves other bytes there. Read by a pool, as a large
    bundle is on a machine of several cores."""
    monkeypatch.setattr(_reader, "_PARALLEL_BYTES", 0)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(_tensor_streaming, "own_memory", lambda device: True)
    monkeypatch.setattr(_tensor_streaming, "_put", lambda piece, device: (piece, device))
    monkeypatch.setattr(
        _tensor_streaming, "_wait", lambda sent: [jax.device_put(np.array(p), d) for p, d in sent]
    )
    give_back = _tensor_streaming.RunBuffers.give_back

    def overwritten(self, buffer):
        buffer[:] = 0xA5
        give_back(self, buffer)

    monkeypatch.setattr(_tensor_streaming.RunBuffers, "give_back", overwritten)


@pytest.mark.parametrize("sha256", ["computed", "recalled"])
def test_a_run_buffer_used_again_is_given_back_only_once_nothing_reads_it(
    bundle, reused, sha256, tmp_path, monkeypatch
):
    monkeypatch.setenv("HLOBUNDLE_CACHE_DIR", str(tmp_path / "cache"))
    if sha256 == "recalled":
        hlobundle.load(bundle, verify=True)  # its chunk digests and sha256 recorded together
    want = hlobundle.load(bundle).select("f1").parameters()
    got = hlobundle.load(bundle, verify=True, device=True).select("f1").parameters()
    for key, x in got.items():
        assert _on_device(x)
        np.testing.assert_array_equal(np.asarray(x), want[key])


def test_bool_and_wide_dtypes_stay_on_the_host_bf16_goes_to_the_device(tmp_path):
    """A file with a bool tensor is copied and hashed as without `device` (verify checks its
    values on the host); float64 goes only where JAX keeps it (x64), else it would be
    converted on its way and stays too."""
    flags = np.array([True, False, True])
    wide = np.arange(4, dtype=np.float64)
    half = np.arange(6, dtype=np.float32).astype(ml_dtypes.bfloat16).reshape(2, 3)
    x64 = "device" if jax.config.jax_enable_x64 else "host"
    for name, x, where in [("b", flags, "host"), ("w", wide, x64), ("h", half, "device")]:
        path = pack_identity(tmp_path, x, name=name)
        got = hlobundle.load(path, verify=True, device=jax.devices()[0]).example_args()[0]
        assert _on_device(got) == (where == "device"), name
        np.testing.assert_array_equal(np.asarray(got), x)


def test_on_a_cpu_device_the_arrays_are_the_verified_copy(tmp_path):
    """No streaming on a CPU: its arrays are the private copy verify hashed, in place, so a
    file changed after verify changes nothing on the device (the mapping would)."""
    path = functions_over_weights(tmp_path / "fw", 1)
    want = np.array(hlobundle.load(path).parameters()["p_w0"])
    b = hlobundle.load(path, verify=True, device=True)
    _overwrite(path / WEIGHTS, 0, (path / WEIGHTS).stat().st_size)
    got = b.parameters()["p_w0"]
    assert _on_device(got)
    np.testing.assert_array_equal(np.asarray(got), want)


def test_a_device_that_is_not_one_is_refused(tmp_path):
    path = functions_over_weights(tmp_path / "fw", 1)
    with pytest.raises(hlobundle.InputError, match="device must be a jax.Device") as e:
        hlobundle.load(path, verify=True, device="tpu")
    assert e.value.argument == "device"
