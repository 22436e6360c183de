"""Sharded tensor files (SPEC.md 2.10): `max_shard_size` cuts a tensor file into shards named as
Hugging Face names them, in key order, a tensor never straddling two; every reference names its
shard; `reshard` writes the same bundle with other shards (or none); a remote load of one
function fetches only the shards that hold its tensors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from helpers import assert_close, cli

import hlobundle
from hlobundle._write._shards import shard_name, unsharded

MIB = 1 << 20


def params() -> dict[str, np.ndarray]:
    """Five weights of 0.25, 0.25, 0.5, 1.5 and 0.25 MiB (float32)."""
    sizes = {"a": 64, "b": 64, "c": 128, "d": 384, "e": 64}
    return {k: np.full((1024, n), i + 1, np.float32) for i, (k, n) in enumerate(sizes.items())}


def f(p, x):
    return sum((x @ p[k]).sum() for k in sorted(p))


def manifest_of(bundle: Path) -> dict:
    return json.loads((bundle / "manifest.json").read_bytes())


@pytest.fixture(scope="module")
def sharded(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("shards") / "s.hlobundle"
    x = np.ones((2, 1024), np.float32)
    return hlobundle.export(f, params(), x, out=out, roles={"p": "parameter"}, max_shard_size=MIB)


def test_weights_are_cut_into_shards_in_key_order_none_straddling(sharded):
    m = manifest_of(sharded)
    shards = sorted(n for n in m["files"] if n.startswith("weights"))
    assert shards == [shard_name("weights.safetensors", i, 3) for i in (1, 2, 3)]
    assert shards[0] == "weights-00001-of-00003.safetensors"
    refs = {a["name"]: a["value"]["file"] for a in m["arguments"] if a["role"] == "parameter"}
    # a, b, c fill 1 MiB; d alone is larger than the size: a shard of its own; then e
    assert refs == {
        "p_a": shards[0],
        "p_b": shards[0],
        "p_c": shards[0],
        "p_d": shards[1],
        "p_e": shards[2],
    }
    b = hlobundle.load(sharded, verify=True)
    assert_close(b.function("xla")(*b.example_args()), f(params(), np.ones((2, 1024), np.float32)))


def test_reshard_joins_and_cuts_again_the_same_values(sharded, tmp_path):
    joined = hlobundle.reshard(sharded, tmp_path / "joined.hlobundle")
    m = manifest_of(joined)
    assert "weights.safetensors" in m["files"]
    assert not [n for n in m["files"] if n.startswith("weights-")]
    again = hlobundle.reshard(joined, tmp_path / "again.hlobundle", max_shard_size=MIB // 2)
    names = [n for n in manifest_of(again)["files"] if n.startswith("weights-")]
    assert len(names) == 4  # a+b, c, d, e
    for path in (joined, again):
        b = hlobundle.load(path, verify=True)
        assert_close(
            b.function("xla")(*b.example_args()), f(params(), np.ones((2, 1024), np.float32))
        )
        for k, v in params().items():
            np.testing.assert_array_equal(b.tensor(f"p_{k}"), v)
    source = manifest_of(sharded)
    for path in (joined, again):  # only which file holds a tensor changed
        m = manifest_of(path)
        assert m["module"] == source["module"] and m["provenance"] == source["provenance"]
        assert [(a["name"], a["shape"]) for a in m["arguments"]] == [
            (a["name"], a["shape"]) for a in source["arguments"]
        ]


def test_the_reshard_command(sharded, tmp_path):
    r = cli("reshard", sharded, "-o", tmp_path / "r.hlobundle", "--max-shard-size", "2M")
    assert r.returncode == 0, r.stderr
    assert len([n for n in manifest_of(tmp_path / "r.hlobundle")["files"] if "-of-" in n]) == 2
    assert cli("reshard", sharded, "-o", tmp_path / "r.hlobundle").returncode == 1  # exists
    assert cli("reshard", sharded, "-o", tmp_path / "x", "--max-shard-size", "0").returncode == 2


def test_joining_two_shards_with_one_key_and_two_values_is_refused(sharded, tmp_path):
    """A hostile index: two shards of one file both hold a tensor `p_a`, referenced by two
    functions with other values; joined, they would be one tensor with two values."""
    import shutil

    evil = tmp_path / "evil.hlobundle"
    shutil.copytree(sharded, evil)
    m = manifest_of(evil)
    (e_ref,) = [a["value"] for a in m["arguments"] if a["name"] == "p_e"]
    (a_ref,) = [a["value"] for a in m["arguments"] if a["name"] == "p_a"]
    # p_e's shard stores its tensor under the key p_a: a second p_a, in another shard
    from hlobundle._bundle_io import _tensor_writing
    from hlobundle._format import _dtypes

    data = hlobundle.load(evil).tensor("p_e")
    (evil / e_ref["file"]).unlink()
    _tensor_writing.write(
        evil / e_ref["file"], {"p_a": (np.asarray(data), _dtypes.BY_NAME["float32"])}
    )
    e_ref["key"] = "p_a"
    from helpers import rehash

    (evil / "manifest.json").write_text(json.dumps(m))
    rehash(evil, e_ref["file"])
    assert a_ref["key"] == "p_a" and a_ref["file"] != e_ref["file"]
    hlobundle.load(evil, verify=True)  # a valid bundle: keys are per file
    with pytest.raises(hlobundle.errors.TensorConflictError):
        hlobundle.reshard(evil, tmp_path / "joined.hlobundle")


def test_a_remote_load_of_one_function_fetches_only_its_shards(tmp_path):
    from http_static import StaticServer

    out = tmp_path / "two.hlobundle"
    x = np.ones((2, 1024), np.float32)
    for k, (name, key) in enumerate((("first", "u"), ("second", "v"))):
        weight = {key: np.full((1024, 512), k + 1, np.float32)}  # 2 MiB each: a shard each
        hlobundle.export(
            lambda p, x, key=key: x @ p[key],
            weight,
            x,
            out=out,
            name=name,
            roles={"p": "parameter"},
            add=k > 0,
            max_shard_size=3 * MIB,
        )
    m = manifest_of(out)
    shards = {n for n in m["files"] if n.startswith("weights-")}
    second = next(f for f in m["functions"] if f["name"] == "second")
    (mine,) = {a["value"]["file"] for a in second["arguments"] if a["role"] == "parameter"}
    assert len(shards) == 2 and mine in shards
    server = StaticServer(tmp_path)
    try:
        b = hlobundle.load(server.url + "two.hlobundle/", functions=["second"])
        fetched = {path.removeprefix("/two.hlobundle/") for path, _ in server.requests}
        assert mine in fetched and not (shards - {mine}) & fetched
        np.testing.assert_array_equal(b.tensor("p_v"), np.full((1024, 512), 2, np.float32))
    finally:
        server.close()


@pytest.mark.parametrize(
    "name, whole",
    [
        ("weights-00001-of-00003.safetensors", "weights.safetensors"),
        ("f/inputs-00002-of-00002.safetensors", "f/inputs.safetensors"),
        ("weights.safetensors", "weights.safetensors"),
        ("weights-1-of-3.safetensors", "weights-1-of-3.safetensors"),
    ],
)
def test_shard_names(name, whole):
    assert unsharded(name) == whole


@pytest.mark.slow
@pytest.mark.subprocess
def test_the_docs_block_runs(tmp_path):
    from test_readme import _bash, _sh

    _bash(_sh("docs/distribution.md", "Sharded weights"), tmp_path)
    shards = [n for n in manifest_of(tmp_path / "sharded.hlobundle")["files"] if "-of-" in n]
    assert len(shards) >= 2
    assert "weights.safetensors" in manifest_of(tmp_path / "joined.hlobundle")["files"]
