"""`hlobundle cache ls` and `cache prune` over the caches (`_read/_cache.py`): compiled programs,
check and manifest verdicts, safetensors' header verdicts and JAX's own entries, beside the
store of remote loads (whose tests are in test_remote.py)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import cli

import hlobundle
from hlobundle._read import _cache

HEX = "0123456789abcdef"


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    """Each test its own cache root."""
    root = tmp_path / "cache"
    monkeypatch.setenv("HLOBUNDLE_CACHE_DIR", str(root))
    monkeypatch.delenv("HLOBUNDLE_NO_CACHE", raising=False)
    return root


def _ls() -> dict:
    done = cli("cache", "ls", "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _prune(size: str) -> dict:
    done = cli("cache", "prune", "--max-size", size, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _key(n: int) -> str:
    return hashlib.sha256(str(n).encode()).hexdigest()


def _entry(name: str, n: int, size: int, used: float | None = None) -> Path:
    """An entry of cache `name` as `_cache.write` makes it: `size` bytes, last used at `used`."""
    where = _cache.directory(name)
    assert where is not None
    data = bytes([n % 256]) * size
    _cache.write(where, _key(n), data, ".json")
    path = _cache.entry_path(where, _key(n), data, ".json")
    if used is not None:
        os.utime(path, (used, used))
    return path


def test_ls_counts_what_a_load_leaves_in_each_cache_and_prune_removes_it(tmp_path):
    x = np.ones((2, 3), np.float32)
    out = hlobundle.export(lambda x: x * 2, x, out=tmp_path / "b")
    hlobundle.load(out).verify()  # records a check verdict and a header verdict
    listed = _ls()
    held = {name: c["entries"] for name, c in listed["caches"].items()}
    assert held["checks"] >= 1 and held["safetensors-headers"] >= 1
    assert listed["caches"]["safetensors-headers"]["bytes"] > 0
    assert sorted(listed["caches"]) == sorted(_cache.CACHES)
    text = cli("cache", "ls").stdout
    assert f"safetensors-headers/: {held['safetensors-headers']} entries" in text, text
    after = _prune("0")
    assert all(c == {"entries": 0, "bytes": 0} for c in after["caches"].values()), after
    hlobundle.load(out).verify()  # checked again, and remembered again
    assert _ls()["caches"]["safetensors-headers"]["entries"] == held["safetensors-headers"]


def test_prune_removes_what_was_used_longest_ago_first():
    old = [_entry("checks", n, 1000, used=1_000_000 + n) for n in range(3)]
    new = [_entry("safetensors-headers", n, 1000, used=2_000_000 + n) for n in range(3)]
    after = _prune("3500")  # room for the three used last and half of another
    assert [p.exists() for p in old + new] == [False] * 3 + [True] * 3
    assert after["caches"]["safetensors-headers"] == {"entries": 3, "bytes": 3000}
    assert after["caches"]["checks"] == {"entries": 0, "bytes": 0}


@pytest.mark.slow
@pytest.mark.subprocess
def test_jax_s_own_entries_are_listed_and_pruned(tmp_path, cache):
    """A `hlobundle run` in a process of its own (JAX's cache configuration is the process's)
    leaves JAX's entries in `jax/`; prune removes them and nothing else there."""
    import helpers

    example = Path(__file__).resolve().parent.parent / "examples" / "lenet5.hlobundle"
    done = helpers.CLI_ZYGOTE.run(  # a fork of the CLI zygote, which never set JAX's cache
        "run", example, "--backend", "xla", env={"HLOBUNDLE_CACHE_DIR": str(cache)}
    )
    assert done.returncode == 0, done.stderr
    jax_dir = cache / "jax"
    made = sorted(p.name for p in jax_dir.iterdir())
    assert made and _ls()["caches"]["jax"]["entries"] == len(
        [n for n in made if n.endswith("-cache")]
    )
    (jax_dir / "notes.txt").write_text("mine")
    assert _prune("0")["caches"]["jax"] == {"entries": 0, "bytes": 0}
    assert sorted(p.name for p in jax_dir.iterdir()) == ["notes.txt"]


def test_prune_touches_only_what_the_caches_write(tmp_path, cache):
    """Planted beside real entries: files not named as entries are, an entry's name in a shard
    it does not belong to, symlinks named as entries (to someone's file), a shard that is a
    symlink to someone's directory, and in `jax/` a symlink and a directory named as JAX names
    its files. Prune to 0 removes the real entries and none of these, nor what they point to."""
    real = [_entry(name, n, 10) for n, name in enumerate(["checks", "iree", "safetensors-headers"])]
    victim = tmp_path / "victim"
    victim.mkdir()
    precious = victim / "precious.txt"
    precious.write_text("mine")
    checks = cache / "checks"
    shard = real[0].parent
    planted = [
        shard / "notes.txt",
        shard / f"{_key(0)}.{'0' * 64}",  # no suffix
        shard / f"{_key(0).upper()}.{'0' * 64}.json",
    ]
    for path in planted:
        path.write_text("not an entry")
    wrong = next(h for h in (a + b for a in HEX for b in HEX) if not (checks / h).exists())
    (checks / wrong).mkdir(mode=0o700)
    misplaced = checks / wrong / real[0].name  # a real entry's bytes and name, another shard
    misplaced.write_bytes(real[0].read_bytes())
    linked = shard / f"{_key(7)}.{'1' * 64}.json"
    linked.symlink_to(precious)
    taken = next(_key(n) for n in range(100, 200) if not _cache.shard(checks, _key(n)).exists())
    hidden = victim / f"{taken}.{'2' * 64}.json"  # in the shard the key names, through a link
    hidden.write_text("mine too")
    _cache.shard(checks, taken).symlink_to(victim)
    jax_dir = cache / "jax"
    jax_dir.mkdir(mode=0o700)
    jax_link = jax_dir / f"jit_f-{'3' * 64}-cache"
    jax_link.symlink_to(precious)
    (jax_dir / f"jit_g-{'4' * 64}-cache").mkdir()
    (jax_dir / "jit_h-cache").write_text("no key")

    after = _prune("0")
    assert all(c == {"entries": 0, "bytes": 0} for c in after["caches"].values()), after
    assert not any(p.exists() for p in real)
    for path in [*planted, misplaced, hidden, precious, jax_dir / "jit_h-cache"]:
        assert path.exists(), path
    assert linked.is_symlink() and jax_link.is_symlink()
    assert (jax_dir / f"jit_g-{'4' * 64}-cache").is_dir()


def test_a_cache_others_may_write_is_neither_listed_nor_pruned(cache):
    entry = _entry("checks", 1, 10)
    cache.chmod(0o777)
    try:
        listed = cli("cache", "ls", "--json")
        assert "not using the cache" in listed.stderr, listed.stderr
        assert json.loads(listed.stdout)["caches"]["checks"] == {"entries": 0, "bytes": 0}
        assert "not using the cache" in cli("cache", "prune").stderr
    finally:
        cache.chmod(0o700)
    assert entry.exists()
    entry.parent.chmod(0o770)  # a shard others may write
    _prune("0")
    assert entry.exists()


def test_with_caching_off_nothing_is_listed_or_removed(monkeypatch):
    entry = _entry("safetensors-headers", 1, 10)
    monkeypatch.setenv("HLOBUNDLE_NO_CACHE", "1")
    assert _ls()["caches"]["safetensors-headers"] == {"entries": 0, "bytes": 0}
    _prune("0")
    assert entry.exists()


def _as_nobody(path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("giving a file to another user needs root")
    os.chown(path, 65534, 65534, follow_symlinks=False)


@pytest.mark.parametrize("above", ["open", "foreign"])
def test_a_cache_under_a_directory_others_may_rename_in_is_not_used(tmp_path, monkeypatch, above):
    """Whoever may write the directory above the cache root can swap the root for a symlink
    between our checks and our use, and have prune delete, or JAX read, what they choose: such
    a root is not used, whatever its own mode. The sticky bit (as /tmp has) makes it safe."""
    parent = tmp_path / "shared"
    parent.mkdir()
    root = parent / "cache"
    monkeypatch.setenv("HLOBUNDLE_CACHE_DIR", str(root))
    entry = _entry("checks", 1, 10)
    if above == "open":
        parent.chmod(0o777)
    else:
        _as_nobody(parent)
    _cache._unsafe_above.cache_clear()  # as a process started now: it checks them once
    try:
        listed = cli("cache", "ls", "--json")
        assert "above the cache" in listed.stderr, listed.stderr
        assert json.loads(listed.stdout)["caches"]["checks"] == {"entries": 0, "bytes": 0}
        assert "above the cache" in cli("cache", "prune").stderr
        assert entry.exists()
        with pytest.warns(hlobundle.HloBundleWarning, match="above the cache"):
            assert _cache.directory("checks") is None
        if above == "open":
            parent.chmod(0o1777)  # sticky: others may not rename what is not theirs
            _cache._unsafe_above.cache_clear()
            assert _cache.directory("checks") == root / "checks"
    finally:
        os.chown(parent, os.geteuid(), os.getegid())
        parent.chmod(0o755)
        _cache._unsafe_above.cache_clear()


def test_the_store_s_entries_of_another_user_are_neither_listed_nor_pruned(cache):
    """A records directory others may write, and a remote bundle's directory and a record of
    another user's: prune removes none of them (the store's half of `cache`, as the caches'
    half)."""
    located = cache / "located"
    located.mkdir(parents=True, mode=0o700)
    cache.chmod(0o700)
    theirs = located / ("2" * 64)
    theirs.write_text("0\n/somewhere")
    _as_nobody(theirs)
    view = cache / "remote" / ("4" * 64)
    view.mkdir(parents=True)
    (cache / "remote").chmod(0o700)
    (view / "file").write_text("someone's too")
    _as_nobody(view)
    listed = _ls()
    assert (listed["located"], listed["views"]) == (0, 0), listed
    _prune("0")
    assert theirs.exists() and (view / "file").exists()
    ours = located / ("3" * 64)
    ours.write_text("0\n/somewhere")
    located.chmod(0o777)  # a records directory others may write: nothing in it is counted
    assert _ls()["located"] == 0
    _prune("0")
    assert ours.exists()


def test_ls_makes_no_directory(tmp_path, monkeypatch):
    root = tmp_path / "missing" / "cache"
    monkeypatch.setenv("HLOBUNDLE_CACHE_DIR", str(root))
    assert _ls()["caches"]["checks"] == {"entries": 0, "bytes": 0}
    _prune("1G")
    assert not (tmp_path / "missing").exists()


def test_a_store_directory_that_cannot_be_read_leaves_the_rest_listed(cache, monkeypatch):
    entry = _entry("safetensors-headers", 1, 10)
    (cache / "remote").mkdir(mode=0o700)
    listdir = os.listdir

    def refusing(path=".", *a, **k):  # as without read permission (root reads anything)
        if str(path) == str(cache / "remote"):
            raise PermissionError(13, "Permission denied", str(path))
        return listdir(path, *a, **k)

    monkeypatch.setattr(os, "listdir", refusing)
    assert _ls()["caches"]["safetensors-headers"] == {"entries": 1, "bytes": 10}
    _prune("0")
    assert not entry.exists()


def test_jax_s_names_with_letters_beyond_ascii_are_its_too(cache):
    """JAX keeps every `\\w` letter of a function's name in its entry's name."""
    where = cache / "jax"
    where.mkdir(parents=True, mode=0o700)
    cache.chmod(0o700)
    (where / f"jit_répondre-{'5' * 64}-cache").write_bytes(b"x" * 10)
    assert _ls()["caches"]["jax"] == {"entries": 1, "bytes": 10}
    _prune("0")
    assert list(where.iterdir()) == []


def test_a_file_with_another_name_is_not_an_entry(tmp_path, cache):
    """An entry's name hard-linked to someone's file: not counted, not removed (the caches write
    files of one name)."""
    victim = tmp_path / "victim.bin"
    victim.write_bytes(b"v" * 100)
    real = _entry("checks", 1, 10)
    shard = _cache.shard(cache / "checks", _key(50))  # the shard its name belongs in
    shard.mkdir(mode=0o700, exist_ok=True)
    os.link(victim, shard / f"{_key(50)}.{'6' * 64}.json")
    assert _ls()["caches"]["checks"] == {"entries": 1, "bytes": 10}
    _prune("0")
    assert victim.stat().st_nlink == 2 and not real.exists()


# ---- what a record of the store, or an entry, names: opened only when it is a regular file

_OPENS_A_TERMINAL = r"""
import os
import subprocess
import sys
from hlobundle._read import _store

master, slave = os.openpty()
terminal = os.ttyname(slave)
os.close(slave)


def controlling_terminal():
    try:
        os.close(os.open("/dev/tty", os.O_RDWR))
        return True
    except OSError:
        return False


before = controlling_terminal()
store = _store.Store()
(store.located / ("ab" * 32)).write_bytes(b"0\n" + os.fsencode(terminal))
print(before, store.get("ab" * 32, 1), controlling_terminal())
"""


@pytest.mark.subprocess
def test_a_record_naming_a_terminal_is_not_opened(cache):
    """A record of the store naming this user's terminal, read by a process that has none (a
    server started apart): the terminal was opened, and became the process's controlling
    terminal (its hangup then a SIGHUP to the server). Nothing but a regular file is opened."""
    done = subprocess.run(
        [sys.executable, "-c", _OPENS_A_TERMINAL],
        env={**os.environ, "HLOBUNDLE_CACHE_DIR": str(cache)},
        capture_output=True,
        text=True,
        start_new_session=True,  # no controlling terminal
        stdin=subprocess.DEVNULL,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "None", "False"]


@pytest.mark.slow
def test_a_record_naming_a_fifo_is_not_opened(cache):
    """A record naming a FIFO a writer waits on: opening it to read (even without blocking)
    lets the writer's open through; nothing but a regular file is opened."""
    import threading

    from hlobundle._read import _store

    fifo = cache.parent / "fifo"
    os.mkfifo(fifo)
    opened = threading.Event()

    def writer() -> None:
        os.close(os.open(fifo, os.O_WRONLY))  # blocks until a reader opens it
        opened.set()

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    _waiting_in_open(thread)
    store = _store.Store()
    assert store.located is not None
    (store.located / ("cd" * 32)).write_bytes(b"0\n" + os.fsencode(fifo))
    got = store.get("cd" * 32, 1), store.pieces("cd" * 32, 1)
    let_through = opened.wait(1)
    os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))  # the writer's open returns
    thread.join(5)
    assert got == (None, None)
    assert not let_through, "the FIFO was opened"


def _waiting_in_open(thread) -> None:
    """Returns once `thread` waits in its open of a FIFO for a reader (Linux's /proc)."""
    import time

    wchan = Path(f"/proc/self/task/{thread.native_id}/wchan")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if wchan.read_text() in ("wait_for_partner", "fifo_open"):
                return
        except OSError:
            break
        time.sleep(0.01)
    pytest.skip("cannot see a thread wait in a FIFO's open here")


def test_what_a_killed_load_left_in_the_store_is_pruned(cache):
    """A load killed while it wrote a fetched file leaves its temporary (`.partial-*`, beside
    the remote bundles' directories): no later load renames it, and prune removed nothing of
    it, so no --max-size bounded the store again. One not written for a day is removed; one
    being written now (a load running) stays, and so does a name the store never makes."""
    import time

    from hlobundle._read import _store

    remote = _cache.directory(_store.VIEWS)
    assert remote is not None
    left = remote / ".partial-0123456789abcdef-x1y2z3"  # as `_load._write_new` names it
    left.write_bytes(b"\0" * (1 << 20))
    old = time.time() - 2 * 86400
    os.utime(left, (old, old))
    running = remote / ".partial-0123456789abcdef-a1b2c3"
    running.write_bytes(b"\0" * 10)
    other = remote / "notes.partial"
    other.write_bytes(b"mine")
    os.utime(other, (old, old))
    _prune("10G")
    assert not left.exists(), "a killed load's temporary is kept"
    assert running.exists() and other.exists()
