"""Every code block of README.md and of each guide in docs/ runs as written, or is skipped with
its reason (FENCES, SH_SKIPPED): python blocks in-process (from the repository root's view of
`examples/`, in a scratch directory for what the blocks write), the sh blocks that can run here
in bash."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from helpers import FIXTURES, ROOT, needs_fixtures

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
README = (ROOT / "README.md").read_text()
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.S | re.M)

# Every fenced block's language, and what the tests do with it. A new language must be added
# here with its reason, so that no block is left untested by accident.
FENCES = {
    "python": "run in-process, each block alone, each file's blocks in order, again (below)",
    "sh": "the blocks of SH_RUN run in bash; SH_SKIPPED gives each other block's reason",
    "": "not code: the bundle's file tree (checked below)",
    "julia": "skipped: it needs Julia with Reactant.jl and NPZ.jl, which this test suite has not",
    "dockerfile": "skipped: building an image needs a container engine and a package source",
    "yaml": "skipped: a KServe InferenceService needs a Kubernetes cluster",
    "json": "parsed here; docs/deploy.md's MLServer settings are the ones test_mlserver.py serves",
}


def _name(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _section(text: str, at: int) -> str:
    """The title of the heading (any level) above offset `at`."""
    titles = re.findall(r"^#+ (.*)$", FENCE.sub("", text[:at]), re.M)  # not a code comment
    return titles[-1] if titles else ""


def _blocks(language: str) -> list[tuple[str, str, str]]:
    """(file, section, code) of every block in `language`, in the order of DOCS."""
    found = []
    for path in DOCS:
        text = path.read_text()
        for m in FENCE.finditer(text):
            if m[1] == language:
                found.append((_name(path), _section(text, m.start()), m[2]))
    return found


def _ids(blocks: list[tuple[str, str, str]]) -> list[str]:
    counts: dict[str, int] = {}
    ids = []
    for file, _, _ in blocks:
        counts[file] = counts.get(file, -1) + 1
        ids.append(f"{file}:{counts[file]}")
    return ids


PYTHON = _blocks("python")
SH = _blocks("sh")
JULIA = _blocks("julia")


def _missing_extra(block: str) -> str | None:
    """Why `block` cannot run here: an extra it uses is not installed."""
    import importlib.util

    from helpers import ENZYME

    if '"enzyme"' in block and not ENZYME:
        return "the block uses enzyme-ad, which is not installed"
    if 'function("iree"' in block:
        from hlobundle._run._backends import _installed

        if not (_installed.iree_runtime() and _installed.iree_compiler()):
            return "the block uses the iree extra, which is not installed"
    if "starlette" in block and not all(
        importlib.util.find_spec(m) for m in ("starlette", "httpx2")
    ):
        return "the block uses the serve extra and Starlette's test client (httpx2)"
    if "import torch" in block and not importlib.util.find_spec("torch"):
        return "the block uses the torch extra (its CPU wheel: Python 3.11 here)"
    if "tritonclient.http" in block and not importlib.util.find_spec("tritonclient"):
        return "the block uses tritonclient[http]"
    if "tritonclient.grpc" in block and not all(
        importlib.util.find_spec(m) for m in ("grpc", "tritonclient", "orjson")
    ):
        return "the block uses the grpc extra and tritonclient[grpc]"
    return None


def _exec(file: str, section: str, code: str) -> None:
    exec(compile(code, f"{file} python block in {section!r}", "exec"), {"__name__": "__docs__"})


# The blocks over half a second, in the full suite only: the serving guide's (each starts a
# model server), and those that compile with IREE, run the language model, lower in child
# processes or import torch. Each runs alone in its file's test below, where its file's blocks
# run in order anyway: there, a block that nothing was written before is alone already (each
# of the serving guide's, and each guide's first, ran three times where once does).
_SLOW = ("hlobundle.compile(", "examples/lm.hlobundle", "from_exported(", "import torch")


def _slow(file: str, code: str) -> bool:
    return file == "docs/serving.md" or any(s in code for s in _SLOW)


# Each block alone, in a directory of its own: here the edit-test loop's, and a slow block
# only where its extra is missing (it skips, saying why: its file's test leaves it out).
ALONE = [
    pytest.param(*block, id=name)
    for block, name in zip(PYTHON, _ids(PYTHON), strict=True)
    if not _slow(block[0], block[2]) or _missing_extra(block[2])
]


@pytest.mark.parametrize(("file", "section", "code"), ALONE)
def test_python_block_runs(tmp_path, monkeypatch, file, section, code):
    if _missing_extra(code):
        pytest.skip(_missing_extra(code))
    _exec_in(_scratch(tmp_path), monkeypatch, file, section, code)


def _scratch(where: Path) -> Path:
    """A directory as a reader's: the repository's `examples/` beside what the blocks write."""
    where.mkdir(exist_ok=True)
    (where / "examples").symlink_to(ROOT / "examples")
    return where


def _exec_in(where: Path, monkeypatch, file: str, section: str, code: str) -> None:
    monkeypatch.chdir(where)
    _exec(file, section, code)
    assert os.getcwd() == str(where)


def _written(where: Path) -> dict[str, tuple[int, int]]:
    """Every file and link under `where` (not through `examples`), its size and mtime."""
    found = {}
    for root, dirs, files in os.walk(where):
        for name in files + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
            path = os.path.join(root, name)
            st = os.lstat(path)
            found[os.path.relpath(path, where)] = (st.st_size, st.st_mtime_ns)
    return found


@pytest.mark.slow  # each block of a file again; the edit-test loop runs the fast ones above
@pytest.mark.parametrize("file", sorted({file for file, _, _ in PYTHON}))
def test_python_blocks_of_a_file_run_one_after_another_then_again(tmp_path, monkeypatch, file):
    # A reader runs them in one directory: no block may write where an earlier one wrote. A
    # slow block (above) runs alone too: in a directory of its own first, unless nothing was
    # written before it here. Then again each block that wrote here, as a reader runs a block
    # after editing it: it writes to fresh paths or replaces (force=True) what its first run
    # wrote. (A block that wrote nothing here meets no output of its own the second time.)
    shared = _scratch(tmp_path / "shared")
    fresh = _written(shared)
    blocks = [(s, code) for f, s, code in PYTHON if f == file and not _missing_extra(code)]
    wrote = []
    for i, (section, code) in enumerate(blocks):  # an extra's block: skipped above, saying why
        before = _written(shared)
        if _slow(file, code) and before != fresh:
            _exec_in(_scratch(tmp_path / f"alone-{i}"), monkeypatch, file, section, code)
        _exec_in(shared, monkeypatch, file, section, code)
        if _written(shared) != before:
            wrote.append((section, code))
    for section, code in wrote:
        _exec_in(shared, monkeypatch, file, section, code)


def _bash(block: str, cwd: Path, *, forked: bool = True, **env: str):
    """`block` in bash, in `cwd`. Its `hlobundle` commands run in forks of the session's CLI
    zygote (helpers.CliZygote), each a process of its own without the start of Python and jax,
    which the signals the block sends its `hlobundle` (`kill $!`) reach; `forked=False` where
    one cannot be sent on (SIGKILL, SIGSTOP: it then runs the installed command)."""
    import subprocess
    import sys

    import helpers

    (cwd / "examples").symlink_to(ROOT / "examples")
    bin_dirs = [os.path.dirname(sys.executable)]  # hlobundle, model_signing and this python
    if forked:
        bin_dirs.insert(0, str(helpers.CLI_ZYGOTE.bin_dir()))
    env = {**os.environ, "PATH": os.pathsep.join([*bin_dirs, os.environ["PATH"]]), **env}
    r = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block], cwd=cwd, env=env, capture_output=True, text=True
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return r


def _sh(file: str, section: str) -> str:
    (code,) = [c for f, s, c in SH if (f, s) == (file, section)]
    return code


# The sh blocks that run here, by (file, section), and why the others do not.
SH_RUN = {
    (
        "docs/accelerators.md",
        "How results are compared",
    ): "test_precision.py::test_the_docs_block_runs",
    ("docs/signing.md", "Signed bundles"): "test_signing_block_runs",
    ("docs/iree.md", "Without JAX: IREE and stored executables"): "test_iree_block_runs",
    (
        "docs/jax.md",
        "A language model: several functions over one set of weights",
    ): "test_lm_emit_block_generates_text",
    ("docs/julia.md", "Names"): "test_julia_names_block_runs",
    ("docs/distribution.md", "Push, pull, pin by digest"): "test_oci.py::test_the_docs_blocks_run",
    ("docs/distribution.md", "Signatures"): "test_oci.py::test_the_docs_blocks_run",
    ("docs/distribution.md", "Loading remotely"): "test_oci.py::test_the_docs_blocks_run",
    ("docs/distribution.md", "Sharded weights"): "test_shards.py::test_the_docs_block_runs",
    ("docs/serving.md", "Over a unix socket: `--uds`"): "test_uds.py::test_the_docs_block_runs",
    (
        "docs/serving.md",
        "Several front doors, one device: `--frontends N`",
    ): "test_serve_frontdoor.py::test_the_docs_block_runs",
    (
        "docs/deploy.md",
        "An image KServe mounts: `push --image`",
    ): "test_image.py::test_the_docs_block_unpacks_the_image_with_umoci_and_the_bundle_verifies_and_runs",
    (
        "docs/distribution.md",
        "A registry of your own",
    ): "test_oci.py::test_the_local_registry_block_runs",
    (
        "docs/distribution.md",
        "Versions: fingerprint and diff",
    ): "test_diff.py::test_the_docs_block_runs",
}
SH_SKIPPED = {
    ("README.md", "hlobundle"): "installing needs a fresh virtual environment (what .ci/run does)",
    ("README.md", "Command line"): "a synopsis of every command, not commands to run",
    ("README.md", "Working on hlobundle"): "installing needs a fresh virtual environment (.ci/run)",
    (
        "docs/accelerators.md",
        "Measured on a TPU",
    ): "they need a TPU: run by hand there (closing notes)",
    ("docs/julia.md", "From Julia (Reactant.jl)"): "it packs what the Julia blocks write",
    ("docs/torch.md", "hlobundle from PyTorch"): "installing needs a fresh virtual environment",
    (
        "docs/torch.md",
        "From a saved program: `pack --from-torch-export`",
    ): "it needs a signing key and a registry, and serves until stopped; test_torch.py packs and "
    "runs a saved program, test_torch_bundle.py signs, serves, pushes and pulls a torch bundle",
    (
        "docs/serving.md",
        "Serving: `hlobundle serve`",
    ): "it starts servers that run until stopped; test_serve.py starts serve and queries it",
}


def test_every_block_is_run_or_skipped_with_a_reason():
    for path in DOCS:
        languages = {m[1] for m in FENCE.finditer(path.read_text())}
        assert languages <= set(FENCES), (
            f"{_name(path)} has blocks in {languages - set(FENCES)}: add them to FENCES"
        )
    unplaced = {(f, s) for f, s, _ in SH} - set(SH_RUN) - set(SH_SKIPPED)
    assert not unplaced, f"sh blocks neither run nor skipped with a reason: {unplaced}"
    for file, section in SH_RUN:
        assert len([1 for f, s, _ in SH if (f, s) == (file, section)]) == 1, (file, section)


@pytest.mark.slow
@pytest.mark.subprocess
def test_signing_block_runs(tmp_path):
    pytest.importorskip("model_signing", reason="the sign extra is not installed")
    import shutil

    if shutil.which("openssl") is None:
        pytest.skip("the block makes its key with the openssl command, which is not installed")
    r = _bash(_sh("docs/signing.md", "Signed bundles"), tmp_path)
    assert "Verification succeeded" in r.stdout + r.stderr
    assert r.stdout.rstrip().endswith("ok")  # hlobundle run's last line


@pytest.mark.slow
@pytest.mark.subprocess
def test_iree_block_runs(tmp_path):
    from hlobundle._run import _backends

    if not _backends.kind("iree").available():
        pytest.skip("the iree extra is not installed")
    block = _sh("docs/iree.md", "Without JAX: IREE and stored executables")
    r = _bash(block, tmp_path, HLOBUNDLE_CACHE_DIR=str(tmp_path / "cache"))
    assert "backend iree (stored executable compiled/llvm-cpu.vmfb)" in r.stdout
    assert r.stdout.rstrip().endswith("ok")  # the emitted script's last line


@pytest.mark.slow
@pytest.mark.subprocess
def test_lm_emit_block_generates_text(tmp_path):
    r = _bash(
        _sh("docs/jax.md", "A language model: several functions over one set of weights"), tmp_path
    )
    assert "(backend xla;" in r.stdout  # chosen for the symbolic shapes
    assert r.stdout.rstrip("\n").splitlines()[-1].startswith("A bundle artifact the manifest")


@pytest.mark.slow
@pytest.mark.subprocess
@needs_fixtures
def test_julia_names_block_runs(tmp_path):
    """On the real export_to_enzymejax output the section describes (Lux's LeNet-5)."""
    import hlobundle

    (tmp_path / "exported").symlink_to(FIXTURES / "export_to_enzymejax_lux")
    r = _bash(_sh("docs/julia.md", "Names"), tmp_path)
    b = hlobundle.load(tmp_path / "lenet.hlobundle")
    assert b.manifest.function == "run_lux_model" and [x.name for x in b.results] == ["result"]
    assert [a.name for a in b.arguments][::5] == ["arg_2", "arg_3_6_1_1", "arg_3_6_3_2"]
    named = hlobundle.load(tmp_path / "lenet_named.hlobundle")
    assert named.manifest.function == "lenet" and [x.name for x in named.results] == ["logits"]
    roles = {a.name: a.role for a in named.arguments}
    assert roles.pop("x") == "input" and set(roles.values()) == {"parameter"}
    assert "fc3_b" in r.stdout and "logits" in r.stdout  # what inspect shows


@pytest.mark.parametrize(("file", "section", "code"), JULIA, ids=_ids(JULIA))
def test_julia_block(file, section, code):
    pytest.skip(FENCES["julia"])


def _tree() -> str:
    return re.search(r"## What it is.*?```\n(.*?)```", README, re.S)[1]


def test_the_readme_tree_lists_every_file_a_bundle_can_hold():
    from hlobundle._format._signature import SIGNATURE_NAME
    from hlobundle._parse._stored import FORMS
    from hlobundle._write._plan import EXPECTED_FILE, TENSOR_FILES

    listed = set(re.findall(r"^\s+(\S+)", _tree(), re.M))
    listed |= {name.replace("(bc)", "") for name in listed} | {
        name.replace("(bc)", "bc") for name in listed
    }
    names = {"manifest.json", SIGNATURE_NAME, EXPECTED_FILE, *TENSOR_FILES.values()}
    names |= {f for form in FORMS for f in (form.text_file, form.portable_file)}
    assert sorted(names - listed) == []
    # the writer's executables (hlobundle/_write/_compile.py): compiled/<target>.vmfb
    assert any(re.fullmatch(r"compiled/[\w*-]+\.vmfb", name) for name in listed)


def test_the_command_line_synopsis_names_every_command_and_every_option_the_guides_name():
    """A command, or an option docs/ names in backticks (`serve --uds`, `--access-log`), that the
    parser has is in README.md's "Command line"."""
    from hlobundle._cli import _parser

    synopsis = re.search(r"## Command line\n\n```sh\n(.*?)```", README, re.S)[1]
    (sub,) = [a for a in _parser.build()._actions if a.choices and a.dest == "command"]
    listed = set(re.findall(r"^hlobundle ([\w|]+)", synopsis, re.M))
    assert set(sub.choices) - {c for names in listed for c in names.split("|")} == set()
    options = {
        o for parser in sub.choices.values() for a in parser._actions for o in a.option_strings
    }
    guides = "".join(path.read_text() for path in DOCS[1:])
    spans = re.findall(r"`([^`\n]+)`", guides)
    named = {
        o for span in spans for o in re.findall(r"(?<![\w-])--[a-z][\w-]*", span)
    } & options - {"--help"}
    assert sorted(o for o in named if o not in synopsis) == []


def test_the_first_commands_install_for_users_before_contributors():
    first = README[: README.index("## What it is")]
    user = re.search(r"pip install \.(\s|$|\")", first)
    assert user, "a plain `pip install .` (no dev tools) among the first commands"
    assert user.start() < first.index('.[dev]"'), "the user's install before the contributor's"


# An extra is installed one way: `pip install "hlobundle[X]"` from a package index, `pip install
# ".[X]"` in a clone; `-e` only where one works on hlobundle itself (dev, an engine's tests).
_PIP_EXTRA = re.compile(r"pip install (-e )?([\"']?)(hlobundle|\.)\[([\w,-]+)\]")


def _pip_lines_of_extras(paths: list[Path]) -> list[tuple[str, str]]:
    """(file, line) of every `pip install` of an extra of hlobundle in `paths`, in the wrong form."""
    wrong = []
    for path in paths:
        for m in _PIP_EXTRA.finditer(path.read_text()):
            editable, quote, _, extras = m.groups()
            developing = all(e == "dev" or e.endswith("-tests") for e in extras.split(","))
            if quote != '"' or (editable and not developing):
                wrong.append((path.name, m[0]))
    return wrong


def test_extras_are_installed_one_way_in_every_guide_and_message(tmp_path):
    import tomllib

    paths = [*DOCS, ROOT / "SPEC.md", ROOT / "conformance" / "README.md"]
    paths += [*(ROOT / "hlobundle").rglob("*.py"), *(ROOT / "benchmarks").glob("*.py")]
    assert _pip_lines_of_extras(paths) == []
    guard = tmp_path / "guide.md"  # the forms issue 68 found, which the check must see
    guard.write_text(
        '`pip install -e ".[serve]"`, `pip install \'hlobundle[oci]\'`, ok: `pip install ".[oci]"`'
    )
    assert len(_pip_lines_of_extras([guard])) == 2
    # The README's quick start says which extra unlocks which commands: every extra is named.
    table = README[README.index("### Extras") : README.index("## What it is")]
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    missing = [e for e in extras["optional-dependencies"] if f"`{e}`" not in table]
    assert missing == []
    from hlobundle._extras import pip_line

    assert pip_line("oci") == (
        'pip install "hlobundle[oci]" (in a clone of hlobundle: pip install ".[oci]")'
    )


def test_a_guide_that_installs_an_extra_from_an_index_says_how_in_a_clone_too():
    """A user of a clone (the README's first command) cannot `pip install "hlobundle[torch]"`:
    hlobundle is not on their package index. Each guide gives the clone's line beside it
    (docs/torch.md gave only the index's)."""
    index = re.compile(r'pip install "hlobundle\[([\w,-]+)\]"(?! @)')
    alone = []
    for path in DOCS:
        text = " ".join(path.read_text().split())  # a line may break after `pip install`
        alone += [
            (_name(path), extras)
            for extras in index.findall(text)
            if f'pip install ".[{extras}]"' not in text
        ]
    assert alone == []


def test_ci_runs_the_readme_s_example_and_test_command():
    """The first command whole (the user's plain install, which an editable one would not
    test: a wheel ships only its package's files), and the test command after the contributor's
    install, each a line of .ci/run."""
    blocks = [code for f, s, code in SH if (f, s) == ("README.md", "hlobundle")]
    first = blocks[0].strip()
    tests = blocks[1].strip().splitlines()[-1]  # after the contributor's install
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert first in ci and tests in ci, (first, tests)
    assert ci.index(first) < ci.index(tests)


def test_every_guide_is_linked_from_the_readme_and_links_resolve():
    for path in DOCS[1:]:
        assert f"(docs/{path.name})" in README, f"README links no {_name(path)}"
    for path in [*DOCS, ROOT / "conformance" / "README.md"]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", path.read_text()):
            if not re.match(r"\w+://", target):
                assert (path.parent / target).exists(), f"{_name(path)} links {target}"


def test_every_section_a_guide_names_in_another_file_is_a_heading_there():
    """`docs/X.md ("Section")` or `docs/X.md, "Section"`: X has a heading that starts so."""
    for path in [*DOCS, ROOT / "conformance" / "README.md"]:
        for target, section in re.findall(r"([\w/.-]+\.md),? \(?\"([^\"]+)\"", path.read_text()):
            headings = re.findall(r"^#+ (.*)$", (ROOT / target).read_text(), re.M)
            section = " ".join(section.split())  # a name may wrap
            assert any(h.startswith(section) for h in headings), (
                f"{_name(path)}: {target} {section}"
            )


def test_every_json_block_parses():
    for path in DOCS:
        for language, code in FENCE.findall(path.read_text()):
            if language == "json":
                json.loads(code)
