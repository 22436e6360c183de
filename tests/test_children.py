"""The fork server that runs child scripts on untrusted bytes (`_format/_children.py`).

Each test gives the server a made-up child script that misbehaves the way a compromised or
crashing MLIR reader could, and checks that the call ends with a report, on time, and that the
next call still works.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from hlobundle._format import _children

pytestmark = pytest.mark.subprocess


def _script(tmp_path, body: str, name: str = "child.py"):
    path = tmp_path / name
    path.write_text("import os, sys, signal, time\n\n" + body)
    return path


def _run(script, data=b"", *, timeout=20.0, max_output=1 << 20, args=()):
    return _children.run(script, list(args), data, timeout=timeout, max_output=max_output)


def test_a_call_runs_main_with_its_arguments_and_data_in_a_fork(tmp_path):
    script = _script(
        tmp_path,
        "def main():\n"
        "    data = sys.stdin.buffer.read()\n"
        "    sys.stdout.write(f'{os.getppid()}|{os.getpid()}|{sys.argv[1:]}|{len(data)}')\n"
        "    sys.stderr.write('why')\n"
        "    return 7\n",
    )
    server = _children._server_for(script).process.pid
    first, second = _run(script, b"x" * 100_000, args=["a", "b"]), _run(script, b"yz")
    assert first.status == 7 and first.stderr == b"why"
    parent, pid, args, size = first.stdout.decode().split("|")
    assert (int(parent), args, size) == (server, "['a', 'b']", "100000")
    _, other, args, size = second.stdout.decode().split("|")
    assert other != pid and (args, size) == ("[]", "2")  # a fresh fork per call


@pytest.mark.parametrize(("body", "sig"), [("os.kill(os.getpid(), signal.SIGSEGV)", "SIGSEGV"),
                                           ("os.abort()", "SIGABRT")])  # fmt: skip
def test_a_crash_kills_the_fork_only(tmp_path, body, sig):
    script = _script(
        tmp_path, f"def main():\n    if sys.stdin.read():\n        {body}\n    return 0\n"
    )
    server = _children._server_for(script).process
    assert _run(script, b"crash").status == -getattr(signal, sig)
    assert _run(script, b"").status == 0
    assert server.poll() is None


def test_a_fork_that_hangs_is_killed_at_its_deadline(tmp_path):
    script = _script(tmp_path, "def main():\n    time.sleep(600)\n")
    start = time.monotonic()
    done = _run(script, timeout=0.5)
    assert done.timed_out and done.status == -signal.SIGKILL
    assert time.monotonic() - start < 10
    assert not _run(_script(tmp_path, "def main():\n    return 0\n", "ok.py")).timed_out


def test_a_fork_that_writes_without_end_is_cut_off(tmp_path):
    script = _script(
        tmp_path, "def main():\n    while True:\n        sys.stdout.write('x' * 65536)\n"
    )
    done = _run(script, timeout=60, max_output=1 << 20)
    assert done.overflow and len(done.stdout) <= 1 << 20 and not done.timed_out


def test_a_fork_holds_no_descriptor_of_its_server(tmp_path):
    # Not the server's replies, nor the pipes of its other forks: only stdin, stdout, stderr.
    script = _script(
        tmp_path, "def main():\n    print(*sorted(int(f) for f in os.listdir('/dev/fd')))\n"
    )
    fds = [int(fd) for fd in _run(script).stdout.split()]
    assert set(fds) - {0, 1, 2} <= {max(fds)}  # the descriptor listdir itself opened


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


def test_a_server_that_was_killed_or_went_idle_is_started_again(tmp_path, monkeypatch):
    script = _script(tmp_path, "def main():\n    print(os.getppid())\n    return 0\n")
    first = int(_run(script).stdout)
    os.kill(first, signal.SIGKILL)
    second = int(_run(script).stdout)
    assert second != first
    monkeypatch.setattr(_children, "IDLE_S", 0.2)
    _children._server_for(script).restart()
    third = _children._server_for(script).process
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
