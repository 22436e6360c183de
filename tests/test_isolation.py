"""The isolation room (`hlobundle/_isolation/`; docs/security.md, "The isolation boundary").

A child script reads untrusted bytes in a process of its own: run once (`_child.run`) or in a
fork of its server (`_fork_servers.run`). Each test gives it a made-up child script that
misbehaves the way a compromised or crashing MLIR reader could, and checks that the call ends
with a report, on time, that the child holds nothing of the caller, and that the next call
still works. The boundary's tests run on both ways; then the fork server's own.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import threading
import time
import warnings

import pytest
from helpers import ROOT

from hlobundle._format import _limits
from hlobundle._isolation import _child, _fork_servers

pytestmark = pytest.mark.subprocess

RUNNERS = {"once": _child.run, "forked": _fork_servers.run}


def _script(tmp_path, body: str, name: str = "child.py"):
    """A child script: `body` defines main(), which a fork server calls, and which the script
    run alone calls too."""
    path = tmp_path / name
    end = "" if "__main__" in body else "\n\nif __name__ == '__main__':\n    sys.exit(main())\n"
    path.write_text("import os, sys, signal, time\n\n" + body + end)
    return path


def _run(script, data=b"", *, timeout=20.0, max_output=1 << 20, args=(), how="forked"):
    return RUNNERS[how](script, list(args), data, timeout=timeout, max_output=max_output)


def _gone(pid: int) -> bool:
    """Whether `pid` has exited (a zombie nobody reaped yet counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] == "Z"
    except FileNotFoundError:
        return True


def _kill(pids) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


# --- the boundary, both ways ----------------------------------------------------------------

both = pytest.mark.parametrize("how", list(RUNNERS))


@both
def test_a_call_runs_main_with_its_arguments_and_data_in_a_process_of_its_own(tmp_path, how):
    script = _script(
        tmp_path,
        "def main():\n"
        "    data = sys.stdin.buffer.read()\n"
        "    sys.stdout.write(f'{os.getpid()}|{sys.argv[1:]}|{len(data)}')\n"
        "    sys.stderr.write('why')\n"
        "    return 7\n",
    )
    first = _run(script, b"x" * 100_000, args=["a", "b"], how=how)
    second = _run(script, b"yz", how=how)
    assert (first.status, first.stderr) == (7, b"why")
    assert not first.timed_out and not first.overflow
    pid, args, size = first.stdout.decode().split("|")
    assert (args, size) == ("['a', 'b']", "100000") and int(pid) != os.getpid()
    other, args, size = second.stdout.decode().split("|")
    assert other != pid and (args, size) == ("[]", "2")  # a fresh process per call


@both
def test_a_child_runs_with_one_blas_thread(tmp_path, how, monkeypatch):
    # numpy, which MLIR's bindings import, would start a BLAS thread per core, each taking
    # address space out of a child's allowance: however the caller set it.
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "8")
    body = "def main():\n    sys.stdout.write(os.environ.get('OPENBLAS_NUM_THREADS', '-'))\n"
    assert _run(_script(tmp_path, body), how=how).stdout == b"1"


@both
@pytest.mark.parametrize(
    ("body", "sig"),
    [("os.kill(os.getpid(), signal.SIGSEGV)", "SIGSEGV"), ("os.abort()", "SIGABRT")],
)
def test_a_crash_ends_the_child_only(tmp_path, how, body, sig):
    script = _script(
        tmp_path, f"def main():\n    if sys.stdin.read():\n        {body}\n    return 0\n"
    )
    assert _run(script, b"crash", how=how).status == -getattr(signal, sig)
    assert _run(script, b"", how=how).status == 0


@pytest.mark.slow
@both
def test_a_child_that_hangs_is_killed_at_its_deadline(tmp_path, how):
    script = _script(tmp_path, "def main():\n    time.sleep(600)\n")
    start = time.monotonic()
    done = _run(script, timeout=0.5, how=how)
    assert done.timed_out and done.status == -signal.SIGKILL
    took = time.monotonic() - start  # at its deadline, not at some multiple of it
    assert 0.5 <= took < 0.5 + 1.5, f"killed after {took:.2f} s, its deadline 0.5 s"
    ok = _run(_script(tmp_path, "def main():\n    return 0\n", "ok.py"), how=how)
    assert (ok.status, ok.timed_out) == (0, False)


@both
def test_a_child_that_writes_without_end_is_cut_off(tmp_path, how):
    # Cut off at the bound, long before the deadline. (At 16 MiB/s: were the bound not kept,
    # the call would hold 480 MiB at its deadline, not all the memory there is.) The child
    # notes how much it wrote: the caller keeps only the bound, so the result alone cannot
    # tell a child cut off at the bound from one let run far past it.
    written = tmp_path / "written"
    script = _script(
        tmp_path,
        "def main():\n"
        f"    fd, n = os.open({str(written)!r}, os.O_WRONLY | os.O_CREAT), 0\n"
        "    while True:\n"
        "        sys.stdout.write('x' * 65536)\n"
        "        sys.stdout.flush()\n"
        "        n += 65536\n"
        "        os.pwrite(fd, b'%20d' % n, 0)  # in place, never empty while read\n"
        "        time.sleep(0.004)\n",
    )
    start = time.monotonic()
    done = _run(script, timeout=30, max_output=1 << 20, how=how)
    assert done.overflow and len(done.stdout) <= 1 << 20 and not done.timed_out
    assert time.monotonic() - start < 15
    # the bound and what a pipe holds beyond it, at most (64 KiB on Linux; 4 MiB leaves room)
    assert int(written.read_text()) <= 4 << 20, f"the child wrote {written.read_text()} bytes"


@both
def test_a_child_holds_no_descriptor_of_its_caller(tmp_path, how):
    # Only stdin, stdout, stderr: not a descriptor the caller holds (here an inheritable one),
    # nor the pipes of the fork server's replies or of other children.
    script = _script(
        tmp_path, "def main():\n    print(*sorted(int(f) for f in os.listdir('/dev/fd')))\n"
    )
    r, w = os.pipe()
    os.set_inheritable(w, True)
    try:
        fds = [int(fd) for fd in _run(script, how=how).stdout.split()]
    finally:
        os.close(r)
        os.close(w)
    assert set(fds) - {0, 1, 2} <= {max(fds)}  # the descriptor listdir itself opened


@both
def test_a_process_the_child_leaves_behind_is_killed_when_the_call_ends(tmp_path, how):
    # A child forks a process that holds its stdout open and sleeps: the call still ends when
    # the child does, and that process does not outlive the call.
    script = _script(
        tmp_path,
        "def main():\n"
        "    r, w = os.pipe()\n"
        "    if os.fork() == 0:\n"
        "        if os.fork() == 0:\n"
        "            os.write(w, str(os.getpid()).encode())\n"
        "            time.sleep(600)\n"
        "        os._exit(0)\n"
        "    os.close(w)\n"
        "    sys.stdout.write(os.read(r, 64).decode())\n"
        "    return 0\n",
    )
    start = time.monotonic()
    done = _run(script, timeout=30, how=how)
    left = int(done.stdout)
    try:
        assert (done.status, done.timed_out) == (0, False) and time.monotonic() - start < 20
        for _ in range(100):
            if _gone(left):
                break
            time.sleep(0.05)
        assert _gone(left)
    finally:
        _kill([left])


def test_a_call_interrupted_here_kills_its_child(tmp_path, monkeypatch):
    # Ctrl-C (or any exception in the caller) while a child runs: the child goes with the call.
    # (The fork server's own case: test_an_interrupted_call_leaves_no_reply_for_the_next_call.)
    started = tmp_path / "pid"
    script = _script(
        tmp_path,
        "def main():\n    open(sys.argv[1], 'w').write(str(os.getpid()))\n    time.sleep(600)\n",
    )
    collect = _child._collect

    def interrupted(child, deadline, limit):
        for _ in range(600):
            if started.exists() and started.read_text():
                raise KeyboardInterrupt
            time.sleep(0.05)
        return collect(child, deadline, limit)

    monkeypatch.setattr(_child, "_collect", interrupted)
    with pytest.raises(KeyboardInterrupt):
        _run(script, args=[str(started)], timeout=300, how="once")
    pid = int(started.read_text())
    try:
        assert _gone(pid)
    finally:
        _kill([pid])


@both
def test_the_portable_child_caps_its_address_space_before_reading_a_byte(how):
    # The address-space limit is the first thing the child does: below what MLIR's bindings
    # need to deserialize anything, a valid artifact does not load; at the real limit, it does.
    # The same holds of the allowance beyond what it holds at its start.
    artifact = (ROOT / "examples" / "lenet5.hlobundle" / "module.mlirbc").read_bytes()
    depth, chars = str(_limits.MAX_MLIR_NESTING), str(_limits.MAX_MODULE_BYTES)
    cap, allowance = str(_limits.CHILD_MEMORY_BYTES), str(_limits.child_allowance(len(artifact)))

    def run(*args: str):
        return _run(_child.PORTABLE_CHILD, artifact, args=list(args), how=how, timeout=60)

    real = run(cap, depth, chars, allowance)
    assert real.status == 0 and real.stdout.startswith(b"module")
    for starved in (run(str(1 << 20), depth, chars, allowance), run(cap, depth, chars, "0")):
        assert starved.status != 0 and not starved.stdout


_MAPS_3_GB = r"""
import resource, sys
from hlobundle import HloBundleError
from hlobundle._parse import _artifacts
from hlobundle._isolation import _fork_servers
_artifacts.FORK_SERVER = sys.argv[2] == "forked"
try:
    _artifacts.canonical_in_child(open(sys.argv[1], "rb").read(), path="a.mlirbc")
except HloBundleError as e:
    print(e.code)
_fork_servers._stop_servers()  # reaped: its forks' peak is now among this process's children's
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)
"""


@pytest.mark.slow
@both
def test_a_tiny_artifact_cannot_make_its_child_map_gigabytes(how):
    # 796 bytes, a fuzzer's mutation of a backward module's artifact (fuzz/fuzz_forms.py, case
    # 440412795), for which MLIR's bytecode reader makes and touches 3.4 GB before it finds a
    # type index out of range: 2 s of the kernel's time, and with the 16 GiB cap alone, a few
    # such files in a bundle could take a machine's memory. The child may map only an
    # allowance that grows with the artifact's size beyond what it held when it started.
    artifact = ROOT / "tests" / "hostile" / "maps_3_gb.mlirbc"
    r = subprocess.run(
        [sys.executable, "-c", _MAPS_3_GB, str(artifact), how],
        capture_output=True,
        text=True,
        timeout=120,
    )
    code, peak = r.stdout.split()
    assert code == "LIMIT_EXCEEDED", r.stderr[-2000:]  # its counts claim more than it may take
    assert int(peak) < 1 << 30, f"the child held {int(peak) >> 20} MiB"


@both
def test_an_artifact_past_its_allowance_is_a_limit_error_not_a_bad_artifact(how, monkeypatch):
    # A valid artifact whose child runs out of address space (here, with the allowance cut to
    # 512 KiB: a fork of a server that imported every dialect module read the LeNet's artifact
    # within 1 MiB on Python 3.13's jaxlib, and with 256 KiB its stack could not grow, SIGSEGV)
    # is a LimitError naming the memory, not "does not load" (MLIR_INVALID).
    from hlobundle._parse import _artifacts, _children
    from hlobundle.errors import LimitError

    artifact = (ROOT / "examples" / "lenet5.hlobundle" / "module.mlirbc").read_bytes()
    monkeypatch.setattr(_limits, "child_allowance", lambda size: 1 << 19)
    with pytest.raises(LimitError, match="needs more memory than a child process") as e:
        _children.run_child(
            _artifacts.CHILD,
            _artifacts.child_args(_limits.MAX_MODULE_BYTES, len(artifact)),
            artifact,
            path="m.mlirbc",
            what="the artifact",
            max_output=1 << 24,
            statuses=(0, 3, 4),
            forked=how == "forked",
        )
    assert e.value.code == "LIMIT_EXCEEDED"


@pytest.mark.slow
def test_an_op_dense_module_parses_and_prints_within_its_allowance_per_byte():
    # The allowance's share per byte of artifact, without its base, in a fork (MLIR's bindings
    # already mapped): 100,000 small ops, whose bytecode is far smaller per op than what the
    # reader and printer hold per op. Here it needs between 16 and 32 bytes per byte (16
    # refused it, as it did of 200,000 ops, which cost twice the time; of 50,000, 32 was
    # refused too: the fork's own start is no longer small beside them); a million such ops,
    # alone in a fresh interpreter, held 65-75 (imports included). The artifact is StableHLO's
    # serialization of the text in one call: the bytes _mlir.to_portable writes of its parse,
    # without its copy of the module.
    from jaxlib.mlir.dialects import stablehlo

    from hlobundle._parse import _mlir

    ty = "tensor<2x3x4x5xf32>"
    ops = "\n".join(f"  %v{i} = stablehlo.add %v{i - 1}, %a : {ty}" for i in range(1, OPS))
    text = f"func.func public @main(%a: {ty}) -> {ty} {{\n  %v0 = stablehlo.add %a, %a : {ty}\n"
    text += f"{ops}\n  return %v{OPS - 1} : {ty}\n}}"
    with _mlir.context():
        artifact = bytes(stablehlo.serialize_portable_artifact_str(text, _mlir.default_target()))
    allowance = _limits.CHILD_ALLOWANCE_PER_BYTE * len(artifact)
    args = [
        _limits.CHILD_MEMORY_BYTES,
        _limits.MAX_MLIR_NESTING,
        _limits.MAX_MODULE_BYTES,
        allowance,
    ]
    done = _run(
        _child.PORTABLE_CHILD,
        artifact,
        args=[str(a) for a in args],
        timeout=120,
        max_output=1 << 26,
    )
    assert done.status == 0, done.stderr[-500:]
    assert done.stdout.count(b"stablehlo.add") == OPS


OPS = 100_000  # test_an_op_dense_module_parses_and_prints_within_its_allowance_per_byte's


def test_the_portable_child_parses_on_one_thread(monkeypatch):
    # A thread pool takes a stack and a heap per core out of the allowance: on a machine of
    # many cores, it alone would pass it.
    import importlib.util

    monkeypatch.syspath_prepend(str(_child.PORTABLE_CHILD.parent))  # as the child runs
    spec = importlib.util.spec_from_file_location("portable_child", _child.PORTABLE_CHILD)
    child = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(child)
    assert child.reader_context().get_num_threads() == 1


# --- the fork server --------------------------------------------------------------------------


def test_forks_of_one_server_and_a_crash_kills_the_fork_only(tmp_path):
    script = _script(
        tmp_path,
        "def main():\n"
        "    if sys.stdin.read():\n"
        "        os.kill(os.getpid(), signal.SIGSEGV)\n"
        "    print(os.getppid())\n"
        "    return 0\n",
    )
    server = _fork_servers._server_for(script).process
    assert int(_run(script).stdout) == server.pid
    assert _run(script, b"crash").status == -signal.SIGSEGV
    assert int(_run(script).stdout) == server.pid and server.poll() is None


def test_a_server_that_threads_executes_each_child_afresh(tmp_path):
    # After a fork, only the forking thread exists: a lock another thread held stays held. A
    # server whose preload() started a thread therefore runs each child as a new program.
    body = (
        "PRELOADED = False\n\n"
        "def preload():\n"
        "    global PRELOADED\n"
        "    PRELOADED = True\n"
        "    import threading\n"
        "    threading.Thread(target=time.sleep, args=(600,), daemon=True).start()\n\n"
        "def main():\n    print(PRELOADED)\n    return 0\n\n"
        "if __name__ == '__main__':\n    sys.exit(main())\n"
    )
    assert _run(_script(tmp_path, body)).stdout == b"False\n"
    forked = body.replace("    threading.Thread", "    # threading.Thread")
    assert _run(_script(tmp_path, forked, "single.py")).stdout == b"True\n"


@pytest.mark.slow
def test_a_server_that_was_killed_or_went_idle_is_started_again(tmp_path, monkeypatch):
    script = _script(tmp_path, "def main():\n    print(os.getppid())\n    return 0\n")
    first = int(_run(script).stdout)
    os.kill(first, signal.SIGKILL)
    second = int(_run(script).stdout)
    assert second != first
    monkeypatch.setattr(_fork_servers, "IDLE_S", 0.2)
    _fork_servers._server_for(script).restart()
    third = _fork_servers._server_for(script).process
    third.wait(timeout=10)  # it exits by itself when idle
    assert int(_run(script).stdout) not in (first, second, third.pid)


def test_calls_from_many_threads_each_get_their_own_answer(tmp_path):
    script = _script(tmp_path, "def main():\n    sys.stdout.write(sys.stdin.read()[::-1])\n")
    answers: dict[int, bytes] = {}

    def call(i: int) -> None:
        answers[i] = _run(script, f"{i}-abc".encode()).stdout

    threads = [threading.Thread(target=call, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert answers == {i: f"cba-{i}".encode() for i in range(6)}


def test_a_fork_finds_nothing_of_the_calls_before_it_in_its_memory(tmp_path):
    # Another bundle's artifact and its print passed through this server: a compromised fork
    # searches all of its memory for them (the server never holds a call's bytes itself).
    script = _script(
        tmp_path,
        "import re\n\n"
        "def main():\n"
        "    data = sys.stdin.buffer.read()\n"
        "    if data:\n"
        "        sys.stdout.buffer.write(data[:39])\n"
        "        sys.stderr.buffer.write(data[:39])\n"
        "        return 0\n"
        "    found = set()\n"
        "    with open('/proc/self/maps') as maps, open('/proc/self/mem', 'rb', 0) as mem:\n"
        "        for line in maps:\n"
        "            span, perms = line.split()[:2]\n"
        "            start, end = (int(x, 16) for x in span.split('-'))\n"
        "            if perms[0] != 'r' or line.rstrip().endswith(('[vvar]', '[vsyscall]')):\n"
        "                continue\n"
        "            try:\n"
        "                mem.seek(start)\n"
        "                found |= set(re.findall(rb'SECRET-[0-9a-f]{32}', mem.read(end - start)))\n"
        "            except (OSError, ValueError, OverflowError):\n"
        "                pass\n"
        "    sys.stdout.buffer.write(b' '.join(sorted(found)))\n"
        "    return 0\n",
    )
    secrets = [f"SECRET-{os.urandom(16).hex()}".encode() for _ in range(3)]
    for secret, size in zip(secrets, (0, 100_000, 3 << 20), strict=True):
        assert _run(script, secret + b"\0" * size).stdout == secret
    assert _run(script, b"").stdout == b""


def test_a_grandchild_holding_the_output_is_killed_when_the_fork_exits(tmp_path):
    # A fork leaves a daemon (double fork, its own session) that holds stdout open: the call
    # still ends when the fork does, and nothing it started outlives the call.
    script = _script(
        tmp_path,
        "def main():\n"
        "    r, w = os.pipe()\n"
        "    if os.fork() == 0:\n"
        "        if os.fork() == 0:\n"
        "            os.setsid()\n"
        "            os.write(w, str(os.getpid()).encode())\n"
        "            time.sleep(600)\n"
        "        os._exit(0)\n"
        "    os.close(w)\n"
        "    sys.stdout.write(os.read(r, 64).decode())\n"
        "    return 0\n",
    )
    done = _run(script, timeout=30)
    daemon = int(done.stdout)
    try:
        assert (done.status, done.timed_out) == (0, False)
        assert _gone(daemon) and not os.path.exists(f"/proc/{daemon}")  # killed and reaped
    finally:
        _kill([daemon])


@pytest.mark.slow
@pytest.mark.parametrize("how", ["killed", "ctrl-c"])
def test_when_the_caller_dies_mid_call_its_server_fork_and_their_children_go(tmp_path, how):
    # The caller is killed, or a terminal's Ctrl-C reaches its process group, while a fork (and
    # a daemon the fork started) runs: the server, in a session of its own, sees its stdin
    # close, kills both and exits, instead of running on to the deadline and beyond (or dying
    # of the same Ctrl-C before it could).
    pids = tmp_path / "pids"
    script = _script(
        tmp_path,
        "def main():\n"
        "    daemon = os.fork()\n"
        "    if daemon == 0:\n"
        "        os.setsid()\n"
        "        time.sleep(600)\n"
        "        os._exit(0)\n"
        "    with open(sys.argv[1] + '.tmp', 'w') as f:\n"
        "        f.write(f'{os.getppid()} {os.getpid()} {daemon}')\n"
        "    os.rename(sys.argv[1] + '.tmp', sys.argv[1])\n"
        "    time.sleep(600)\n",
    )
    caller = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import signal, sys, pathlib\nfrom hlobundle._isolation import _fork_servers\n"
                # a terminal's foreground group hears Ctrl-C, however the suite was started
                "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
                "_fork_servers.run(pathlib.Path(sys.argv[1]), [sys.argv[2]], b'', timeout=300, "
                "max_output=1024)\n"
            ),
            str(script),
            str(pids),
        ],
        start_new_session=True,
        stderr=subprocess.DEVNULL,
    )
    left: list[int] = []
    try:
        for _ in range(600):
            if pids.exists() or caller.poll() is not None:
                break
            time.sleep(0.1)
        left = [int(pid) for pid in pids.read_text().split()]
        if how == "ctrl-c":
            os.killpg(caller.pid, signal.SIGINT)  # what a terminal sends its foreground group
        else:
            caller.kill()
        caller.wait(timeout=60)
        for _ in range(200):
            if all(_gone(pid) for pid in left):
                break
            time.sleep(0.1)
        assert [pid for pid in left if not _gone(pid)] == []
    finally:
        caller.kill()
        _kill(left)


def test_an_interrupted_call_leaves_no_reply_for_the_next_call(tmp_path, monkeypatch):
    # Ctrl-C (or any exception) after the request went out: its reply must not answer the next.
    script = _script(tmp_path, "def main():\n    sys.stdout.write(sys.stdin.read())\n")
    assert _run(script, b"warm").stdout == b"warm"

    def interrupted(*_):
        raise KeyboardInterrupt

    monkeypatch.setattr(_fork_servers._Server, "_read_reply", interrupted)
    with pytest.raises(KeyboardInterrupt):
        _run(script, b"first")
    monkeypatch.undo()
    assert _run(script, b"second").stdout == b"second"


def _in_a_fork(check) -> int:
    """The exit status of a forked copy of this process that runs `check()` (its status)."""
    with warnings.catch_warnings():
        # fork() in a threaded process: Python's and jax's warnings (the copy uses no jax)
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", RuntimeWarning)
        pid = os.fork()
    if pid == 0:  # pragma: no cover - the copy
        status = 99
        try:
            signal.alarm(60)  # a copy that deadlocks fails the test instead of hanging it
            status = check()
        finally:
            os._exit(status)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def test_a_copy_forked_while_another_thread_started_a_server_starts_its_own(tmp_path):
    # os.fork() or multiprocessing while a thread holds the lock around starting a server.
    script = _script(tmp_path, "def main():\n    print(os.getppid())\n    return 0\n")
    ours = int(_run(script).stdout)
    with _fork_servers._servers_lock:
        status = _in_a_fork(lambda: 0 if int(_run(script).stdout) != ours else 2)
    assert status == 0


def test_a_server_sees_its_caller_leave_while_a_forked_copy_of_the_caller_lives(tmp_path):
    script = _script(tmp_path, "def main():\n    return 0\n")
    server = _fork_servers._server_for(script).process
    r, w = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", RuntimeWarning)
        copy = os.fork()
    if copy == 0:  # pragma: no cover - the copy: it lives on, holding what it inherited
        os.read(r, 1)
        os._exit(0)
    try:
        server.stdin.close()  # what this process does at exit
        assert server.wait(timeout=30) == 0
    finally:
        os.write(w, b"x")
        os.waitpid(copy, 0)
        os.close(r)
        os.close(w)
        server.stdout.close()
        del _fork_servers._servers[(os.getpid(), script)]


@pytest.mark.parametrize(
    ("end", "status", "stderr"),
    [
        ("return None", 0, b""),
        ("return 3", 3, b""),
        ("sys.exit(None)", 0, b""),
        ("sys.exit('no')", 1, b"no\n"),
        ("return 256 + 5", 5, b""),
    ],
)
def test_main_ends_the_fork_as_sys_exit_main_ends_the_script(tmp_path, end, status, stderr):
    done = _run(_script(tmp_path, f"def main():\n    {end}\n"))
    assert (done.status, done.stderr) == (status, stderr)


def test_no_data_and_a_server_started_by_a_thread_that_ended(tmp_path):
    script = _script(tmp_path, "def main():\n    return len(sys.stdin.buffer.read())\n")
    thread = threading.Thread(target=_run, args=(script, b"abc"))
    thread.start()
    thread.join()
    server = _fork_servers._server_for(script).process.pid
    assert _run(script, b"").status == 0 and _run(script, b"abcd").status == 4
    assert _fork_servers._server_for(script).process.pid == server


def test_a_reply_forged_through_proc_never_answers_the_next_call(tmp_path):
    # A compromised fork finds its request's header in its memory and writes a whole reply to
    # the server's stdout through /proc: its own call may take that reply (the fork chooses
    # its own answer anyway), but the server's real reply must not answer the next call.
    script = _script(
        tmp_path,
        "import json\n\n"
        "def main():\n"
        "    data = sys.stdin.buffer.read()\n"
        "    if data != b'forge':\n"
        "        sys.stdout.buffer.write(data)\n"
        "        return 0\n"
        "    frame = sys._getframe()\n"
        "    while 'header' not in frame.f_locals:\n"
        "        frame = frame.f_back\n"
        "    head = {'status': 42, 'timed_out': False, 'overflow': False}\n"
        "    head['id'] = frame.f_locals['header'].get('id')\n"
        "    parts = [json.dumps(head).encode(), b'forged', b'']\n"
        "    with open(f'/proc/{os.getppid()}/fd/1', 'wb') as reply:\n"
        "        for part in parts:\n"
        "            reply.write(len(part).to_bytes(8, 'little') + part)\n"
        "    return 0\n",
    )
    assert _run(script, b"warm").stdout == b"warm"
    try:
        _run(script, b"forge")
    except _fork_servers.ServerError:
        pass
    replies = _fork_servers._server_for(script).process.stdout.fileno()
    select.select([replies], [], [], 30)  # the server's own reply to the forged call came
    assert [_run(script, x).stdout for x in (b"a", b"b")] == [b"a", b"b"]


@pytest.mark.slow
def test_a_fork_that_kills_or_stops_its_server_gets_a_server_error(tmp_path, monkeypatch):
    monkeypatch.setattr(_fork_servers, "_SLACK_S", 0.3)
    script = _script(
        tmp_path,
        "def main():\n"
        "    data = sys.stdin.buffer.read()\n"
        "    if data:\n"
        "        os.kill(os.getppid(), getattr(signal, data.decode()))\n"
        "        time.sleep(60)\n"
        "    return 0\n",
    )
    for sig in ("SIGKILL", "SIGSTOP"):
        with pytest.raises(_fork_servers.ServerError, match="fork server for child.py"):
            _run(script, sig.encode(), timeout=0.5)
        assert _run(script).status == 0


@pytest.mark.parametrize(
    ("status", "line", "code"),
    [
        # the dynamic loader's own end when a fork past its limit loads a module's thread-local
        # data: `_dl_fatal_printf`, exit status 127 (seen once in the suite: MLIR_INVALID)
        (127, b"cannot allocate memory for thread-local data: ABORT\n", "LIMIT_EXCEEDED"),
        (
            -6,
            b"terminate called after throwing an instance of 'std::bad_alloc'\n",
            "LIMIT_EXCEEDED",
        ),
        # an artifact's own refusal that merely says the words stays the artifact's
        (1, b"error: cannot allocate memory for thread-local data\n", "MLIR_INVALID"),
    ],
)
def test_a_child_that_ends_for_want_of_memory_is_a_limit_error(monkeypatch, status, line, code):
    from hlobundle._parse import _children
    from hlobundle.errors import HloBundleError

    def ended(script, args, data, *, timeout, max_output):
        return _child.Done(status, b"", line, False, False)

    monkeypatch.setattr(_child, "run", ended)
    with pytest.raises(HloBundleError) as e:
        _children.run_child(
            ROOT / "child.py", [], b"x", path="m.mlirbc", what="the artifact", max_output=1 << 20
        )
    assert e.value.code == code
