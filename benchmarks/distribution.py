"""Distribution: pull from a local registry against oras (section `pull`), and remote loading's
bytes against the bytes a function uses (`remote`)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.bundles import module_for, weights
from benchmarks.harness import PY, free_port, interleaved


def _registry(tmp: Path) -> tuple[subprocess.Popen, str]:
    """CNCF distribution's `docker-registry serve` on loopback, storing under `tmp`."""
    import urllib.request

    port = free_port()
    config = tmp / "registry.yml"
    config.write_text(
        f"version: 0.1\nlog: {{level: error}}\nstorage: {{filesystem: "
        f"{{rootdirectory: {tmp / 'registry'}}}}}\nhttp: {{addr: 127.0.0.1:{port}}}\n"
    )
    process = subprocess.Popen(
        ["docker-registry", "serve", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(200):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=1).close()
            return process, f"127.0.0.1:{port}"
        except OSError:
            time.sleep(0.05)
    process.kill()
    raise RuntimeError("docker-registry did not start")


# VmHWM, not getrusage's ru_maxrss: that one survives exec, and is the forking parent's peak.
PULL_PEAK = """
import sys
import oras.provider
import hlobundle._oci._pull as p
def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
start = status("VmRSS")
p.pull(sys.argv[1], sys.argv[2])
print(status("VmHWM") - start)
"""


def pull_cost(tmp: Path, quick: bool) -> list[dict]:
    """`hlobundle pull` (every blob hashed as it streams, the bundle then verified; the store
    emptied first, so every byte comes from the registry) / `oras pull` (oras' Python client, no digest
    checks) of the same artifact from a local registry; peak RSS of a pull above its start-up
    / the bundle's size (goal <= 0.1)."""
    import oras.provider

    import hlobundle

    size = 32 * 1024**2 if quick else 256 * 1024**2  # 1 GiB is too slow for this 2-core machine
    arrays = weights(size, 16)
    bundle = hlobundle.pack(module_for(arrays), arrays, tmp / "pull-big.hlobundle")
    del arrays
    process, host = _registry(tmp)
    # Every pull from the registry, as oras': the store of what earlier pulls put where is
    # emptied before each (the caches of check verdicts stay, as on a user's machine).
    cache = tmp / "pull-cache"
    os.environ["HLOBUNDLE_CACHE_DIR"] = str(cache)

    def no_store() -> None:
        for name in ("pulled", "blobs"):
            shutil.rmtree(cache / name, ignore_errors=True)

    try:
        ref = hlobundle.push(bundle, f"oci://{host}/bench/pull:v1").ref
        client = oras.provider.Registry(hostname=host, insecure=True)
        counter = iter(range(1000))

        def ours() -> None:
            no_store()
            hlobundle.pull(ref, tmp / f"ours-{next(counter)}.hlobundle")

        def theirs() -> None:
            client.pull(target=f"{host}/bench/pull:v1", outdir=str(tmp / f"oras-{next(counter)}"))

        res = interleaved({"hlobundle pull": ours, "oras pull": theirs}, 3 if quick else 7)
        out = tmp / "peak.hlobundle"
        no_store()
        r = subprocess.run(
            [PY, "-c", PULL_PEAK, ref, str(out)], capture_output=True, text=True, check=True
        )
        peak = int(r.stdout.split()[-1])
    finally:
        os.environ.pop("HLOBUNDLE_CACHE_DIR")
        process.terminate()
        process.wait()
    total = sum(p.stat().st_size for p in bundle.iterdir())
    base = res["oras pull"][0]
    mib = f"{total / 1024**2:.0f} MiB"
    return _new_version_pull(tmp, quick) + [
        {
            "case": f"hlobundle pull / oras pull, {mib} (goal <= 1.1)",
            "s": res["hlobundle pull"][0],
            "ratio": res["hlobundle pull"][0] / base,
            "spread": res["hlobundle pull"][1],
        },
        {"case": f"oras pull, {mib}", "s": base, "ratio": 1.0, "spread": res["oras pull"][1]},
        {
            "case": f"peak RSS of a pull above start-up / bundle size, {mib} (goal <= 0.1)",
            "s": "",
            "ratio": peak / total,
        },
    ]


def _sharded_bundle(out: Path, count: int, size: int, changed: int | None = None) -> Path:
    """`f(p, x) = sum of x @ p[wK]` over `count` weights of `size` bytes, each in a shard of its
    own; `changed`: that weight differs (a new version of the model)."""
    import hlobundle

    rows = 256
    params = {
        f"w{k}": np.full((rows, size // 4 // rows), k + (0.5 if k == changed else 0.0), np.float32)
        for k in range(count)
    }
    return hlobundle.export(
        lambda p, x: sum(x @ p[k] for k in sorted(p)),
        params,
        np.ones((1, rows), np.float32),
        out=out,
        roles={"p": "parameter"},
        max_shard_size=size + (1 << 20),
    )


def _new_version_pull(tmp: Path, quick: bool) -> list[dict]:
    """`pull` of a new version of a model of 10 weight shards, one changed, after the old one:
    bytes through loopback / the files that changed (the shard, the expected outputs)."""
    import hlobundle

    count, size = 10, (4 if quick else 100) * 1024**2
    old = _sharded_bundle(tmp / "shards-v1.hlobundle", count, size)
    new = _sharded_bundle(tmp / "shards-v2.hlobundle", count, size, changed=3)
    changed = sum(
        p.stat().st_size
        for p in new.iterdir()
        if p.name != "manifest.json" and (old / p.name).read_bytes() != p.read_bytes()
    )
    process, host = _registry(tmp)
    os.environ["HLOBUNDLE_CACHE_DIR"] = str(tmp / "store-pull")
    try:
        hlobundle.push(old, f"oci://{host}/bench/versions:v1")
        hlobundle.push(new, f"oci://{host}/bench/versions:v2")
        hlobundle.pull(f"oci://{host}/bench/versions:v1", tmp / "pulled-v1.hlobundle")
        before = _loopback_bytes()
        hlobundle.pull(f"oci://{host}/bench/versions:v2", tmp / "pulled-v2.hlobundle")
        moved = _loopback_bytes() - before
    finally:
        os.environ.pop("HLOBUNDLE_CACHE_DIR", None)
        process.terminate()
        process.wait()
    return [
        {
            "case": f"pull of a new version of {count} shards of {size // 1024**2} MiB, one "
            "changed, after the old one: bytes through loopback / the files that changed "
            "(goal <= 1.1)",
            "s": moved,
            "ratio": moved / changed,
        }
    ]


def _loopback_bytes() -> int:
    """Bytes through the loopback interface so far (/proc/net/dev, received side): what every
    connection on 127.0.0.1 carried, both directions, requests and headers included."""
    for line in Path("/proc/net/dev").read_text().splitlines():
        name, _, counters = line.partition(":")
        if name.strip() == "lo":
            return int(counters.split()[0])
    raise RuntimeError("no loopback interface in /proc/net/dev")


def _static_server(root: Path) -> tuple[Any, str]:
    """Starlette's StaticFiles (FileResponse honours Range) under uvicorn, in a thread, on a
    free loopback port: any HTTP server a bundle could be put on."""
    import threading

    import uvicorn
    from starlette.applications import Starlette
    from starlette.routing import Mount
    from starlette.staticfiles import StaticFiles

    port = free_port()
    app = Starlette(routes=[Mount("/", StaticFiles(directory=root))])
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.02)
    return server, f"http://127.0.0.1:{port}/"


def _functions_bundle(
    out: Path, count: int, size: int, changed: int | None = None, distinct: bool = False
) -> Path:
    """`count` functions `fK(p, x) = x @ p["wK"]` over one weights file, each weight `size`
    bytes; `changed`: that function's weight differs (a new version of the model); `distinct`:
    random weights, so that no chunk is a hole or a repeat of another."""

    import hlobundle

    rows = 256
    cols = size // 4 // rows
    x = np.ones((2, rows), np.float32)
    for k in range(count):
        if distinct:
            seed = k + (100 if k == changed else 0)
            w = np.random.default_rng(seed).random((rows, cols), np.float32)
        else:
            w = np.full((rows, cols), k + (0.5 if k == changed else 0.0), np.float32)
        hlobundle.export(
            lambda p, x, k=k: x @ p[f"w{k}"],
            {f"w{k}": w},
            x,
            out=out,
            name=f"f{k}",
            roles={"p": "parameter"},
            add=k > 0,
            force=k == 0,
        )
    return out


def _function_bytes(bundle: Path, name: str) -> int:
    """The bytes function `name` uses: its module files, stored examples and its weight."""
    manifest = json.loads((bundle / "manifest.json").read_bytes())
    (f,) = [f for f in manifest["functions"] if f["name"] == name]
    files = {f["module"]["text"], f["module"]["portable"]["file"]}
    files |= {a["value"]["file"] for a in f["arguments"] if a.get("value")}
    files |= {r["expected"]["file"] for r in f["results"] if r.get("expected")}
    files.discard("weights.safetensors")
    (w,) = [a for a in f["arguments"] if a["role"] == "parameter"]
    weight = int(np.prod(w["shape"])) * 4
    return sum(manifest["files"][n]["size"] for n in files) + weight


def remote_cost(tmp: Path, quick: bool) -> list[dict]:
    """`load(REF, functions=[one])` of a bundle of 10 functions over one weights file: bytes
    through loopback / the bytes that function uses (its module files, examples and weight;
    goal <= 1.1), over https:// (Starlette's StaticFiles) and oci:// (docker-registry); and a
    new version whose one function's weight changed, loaded whole after the old one: bytes /
    that weight (goal <= 1.1). Each load starts from an empty store but the last."""
    import hlobundle

    count, size = 10, (4 if quick else 100) * 1024**2
    root = tmp / "remote"
    root.mkdir()
    old = _functions_bundle(root / "v1.hlobundle", count, size)
    _functions_bundle(root / "v2.hlobundle", count, size, changed=3)
    used = _function_bytes(old, "f3")
    server, base = _static_server(root)
    process, host = _registry(tmp)
    rows = []
    try:
        ref = hlobundle.push(old, f"oci://{host}/bench/remote:v1").ref
        for label, where in (("https://", base + "v1.hlobundle/"), ("oci://", ref)):
            os.environ["HLOBUNDLE_CACHE_DIR"] = str(tmp / f"store-{label[:3]}")
            before = _loopback_bytes()
            hlobundle.load(where, functions=["f3"])
            moved = _loopback_bytes() - before
            rows.append(
                {
                    "case": f"load {label}, one function of 10 ({size // 1024**2} MiB weights "
                    "each): bytes / its module, examples and weight (goal <= 1.1)",
                    "bytes": moved,
                    "ratio": moved / used,
                    "baseline_bytes": used,
                }
            )
        os.environ["HLOBUNDLE_CACHE_DIR"] = str(tmp / "store-new")
        every = [f"f{k}" for k in range(count)]
        hlobundle.load(base + "v1.hlobundle/", functions=every)
        before = _loopback_bytes()
        hlobundle.load(base + "v2.hlobundle/", functions=every)
        moved = _loopback_bytes() - before
        rows.append(
            {
                "case": "load https:// of a new version, every function, after the old one: "
                "bytes / the one weight that changed (goal <= 1.1)",
                "bytes": moved,
                "ratio": moved / size,
                "baseline_bytes": size,
            }
        )
    finally:
        os.environ.pop("HLOBUNDLE_CACHE_DIR", None)
        server.should_exit = True
        process.terminate()
        process.wait()
    return rows
