"""Every option of the functions that write bundles, defined once: its name, type, default and
help text, and, where `hlobundle` offers it, its flag (`Flag`).

`PackOptions` holds them. Each writer entry names the options it takes (`@takes("names", ...)`)
and receives them as one `PackOptions`; its signature (what `inspect.signature` and `help()`
show) and its docstring's list of options are made here, from these definitions, and so are the
flags of `hlobundle pack`, `refresh`, `compile` and `sign` (`_cli/_parser_write.py`). A new
option is one field here and a name in the tuple of each function that takes it.

This module imports nothing heavy: the command line reads it to build its parser.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import inspect
import os
import textwrap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeVar

if TYPE_CHECKING:
    from .._format._manifest import Layout, Role
    from .._format._metadata import Metadata
    from .._format._signature import SigningKey

R = TypeVar("R")


@dataclass(frozen=True)
class Flag:
    """How `hlobundle` spells an option: `add_argument`'s arguments, but `type`, which names a
    converter of `_cli/_values.py` (the layer above), and the help, the option's own."""

    flag: str
    dest: str | None = None  # the parsed attribute, where it is not the option's name
    action: str | None = None
    metavar: str | None = None
    nargs: str | None = None
    choices: tuple[str, ...] | None = None
    type: str | None = None
    default: Any = None  # the command's own default, where it differs from the function's
    note: str = ""  # what the flag's form adds to the help ("comma-separated")
    help: str = ""  # a flag's own help, where one option has several flags


def option(
    default: Any,
    text: str,
    *flags: Flag,
    convert: Callable[[Any], Any] | None = None,
    internal: bool = False,
    group: str | None = None,
) -> Any:
    """A field of `PackOptions`: its default, its help `text` (markdown), the flags `hlobundle`
    offers it by, what a given value becomes (`convert`, never applied to None), and whether it
    is the writers' own (`internal`: no public function takes it), and the title of the help's
    group of its flags where they are several that go together (`group`; otherwise a command
    takes one of them)."""
    meta = {"help": text, "flags": flags, "convert": convert, "internal": internal, "group": group}
    return field(default=default, metadata=meta)


def _signing_key(value: str | os.PathLike[str] | SigningKey) -> SigningKey:
    from .._format._signature import signing_key

    return signing_key(value)


# The metadata's fields (SPEC.md 2.12; the model, `_format/_metadata.py`), each a flag of
# `pack`: its name, what it takes, its help. The lists' flags are singular and repeated.
_METADATA_FLAGS = {
    "description": ("--description", "TEXT", "what the model does"),
    "license": ("--license", "SPDX", "its license, an SPDX expression: Apache-2.0"),
    "authors": ("--author", "NAME", "an author; may be repeated"),
    "source_url": ("--source-url", "URL", "where its source lives (http or https)"),
    "tags": ("--tag", "TAG", "a search keyword; may be repeated"),
    "citation": ("--citation", "TEXT", "how to cite it (BibTeX, say)"),
    "framework": ("--framework", "NAME", "the framework it was written in: Lux"),
    "base_model": ("--base-model", "NAME", "the model it came from"),
}
METADATA_FIELDS = tuple(_METADATA_FLAGS)


def _metadata_flag(name: str) -> Flag:
    flag, metavar, text = _METADATA_FLAGS[name]
    repeated = name in ("authors", "tags")
    return Flag(
        flag,
        dest=f"metadata_{name}",
        metavar=metavar,
        action="append" if repeated else None,
        help=text,
    )


def _metadata(value: Any) -> Metadata:
    from ._card import metadata_of

    return metadata_of(value)


@dataclass(frozen=True)
class PackOptions:
    """Everything the writers take besides their sources and the output path."""

    names: Sequence[str] | None = option(
        None,
        "argument names, Python identifiers, in `@main`'s order (default: from the key paths "
        "JAX recorded or Reactant's Julia paths, else `arg0`, `arg1`...)",
        Flag("--names", type="csv", note="comma-separated"),
    )
    paths: Sequence[str] | None = option(
        None, "each argument's path in the producer's terms (default: `%arg0`, `%arg1`...)"
    )
    roles: Mapping[str, Role] | None = option(
        None,
        "each argument's role, `input` (the default), `parameter` or `state`, by argument name; "
        "a name may be a glob (`params_*`), and a later one wins. For a JAX function, a name may "
        "also be one of its parameters' (an Exported's: `arg0`), for every leaf under it: "
        '`{"params": "parameter"}`',
        Flag(
            "--role",
            dest="role",
            action="append",
            metavar="NAME=ROLE",
            type="role",
            note="may be repeated",
        ),
    )
    result_names: Sequence[str] | None = option(
        None,
        "result names, Python identifiers, in `@main`'s order (default: from the key paths JAX "
        "recorded, else `result` for one, `result_0`, `result_1`... for several)",
        Flag("--result-names", type="csv", note="comma-separated"),
    )
    # The command's default is auto: it reads files, and a file's storage order can tell.
    layout: Layout | Literal["auto"] = option(
        "row_major",
        "how the example arrays are oriented: row-major (NumPy's), column-major (Julia's: axes "
        "reversed against the MLIR tensor; the arrays are transposed before saving, and the "
        "layout is recorded), or auto: column-major when the arrays' shapes are the tensors' "
        "reversed, or, where no shape tells (square matrices), when they are stored in Fortran "
        "order, as Julia's NPZ.jl writes them; otherwise row-major",
        Flag(
            "--layout",
            choices=("auto", "row-major", "column-major"),
            default="auto",
            note="default: auto",
        ),
    )
    function: str | None = option(
        None,
        "the function's name in the bundle (default: the module's name less a `jit_` or "
        "`reactant_` prefix; an Exported's `fun_name`; a Reactant export's `function_name`)",
        Flag("--function"),
    )
    name: str | None = option(None, "the function's name in the bundle (default: `fn.__name__`)")
    force: bool = option(
        False,
        "replace what is there rather than refuse it (`OutputExistsError`): a bundle at the "
        "output path (never anything else), or, when signing, the bundle's signature",
        Flag("--force", action="store_true"),
    )
    target_version: str | None = option(
        None,
        "the StableHLO version, X.Y.Z, of the portable artifacts (default: for each, the "
        "oldest from 1.13.7 up that expresses it, which the oldest supported jaxlib reads "
        "unless the module needs newer; SPEC.md 5)",
        Flag("--target-version", type="target_version", metavar="X.Y.Z"),
    )
    producer: tuple[str, str] | None = option(
        None, "`(name, version)` of the producer, for the provenance (default: hlobundle's)"
    )
    timestamp: str | None = option(
        None,
        "an ISO 8601 time for the provenance (omitted by default, so that writing a bundle is "
        "deterministic)",
    )
    input_tree: Any = option(
        None,
        "the arguments' pytree structure, as nested lists and dicts whose leaves are argument "
        "names",
    )
    output_tree: Any = option(
        None,
        "the results' pytree structure, as nested lists and dicts whose leaves are result names",
    )
    expected: Sequence[Any] | Mapping[str, Any] | Literal["compute"] | None = option(
        None,
        "expected results to store: arrays (`pack()`: a sequence, or a mapping keyed like the "
        "inputs but by result name), files of them (`pack_files()` and the importers: `.npz`, "
        '`.npy`, `.safetensors`, keyed by result name or `arr_<k>`), or `"compute"` to run the '
        "module once on the example inputs",
        Flag(
            "--expected",
            nargs="+",
            metavar="FILE",
            help="expected outputs (.npz, .npy, .safetensors), keyed by result name or arr_<k>",
        ),
        Flag(
            "--compute-expected",
            action="store_true",
            help="run the module once on the inputs and store the results as expected outputs",
        ),
    )
    allow_custom_calls: Sequence[str] = option(
        (),
        "custom call targets to accept although they look tied to the producer's process "
        '(SPEC.md, "Normalization"); recorded in the manifest',
        Flag(
            "--allow-custom-call",
            dest="allow_custom_call",
            action="append",
            metavar="NAME",
            note="may be repeated",
        ),
        convert=tuple,
    )
    with_vjp: bool | str | Callable[..., Any] = option(
        False,
        'also store a backward module (SPEC.md, "Backward module"), so that the xla backend can '
        "differentiate the bundle: the one JAX derives from a JAX function, else one lowered "
        "from the module's Enzyme gradient (needs enzyme-ad). `pack()` also takes a function "
        "of the flat arguments to derive it from, or its MLIR text, lowered already",
        Flag("--with-vjp", action="store_true"),
    )
    batched: str | Callable[..., Any] | None = option(
        None,
        'also store a batched module (SPEC.md, "Batched module") taking `batched_arguments` with '
        "a leading batch dimension, so that `jax.vmap` over them runs it instead of a loop: its "
        "MLIR text, or a function of the flat arguments, vmapped and lowered for any batch size",
    )
    batched_arguments: Sequence[str] = option(
        (),
        "the arguments the batched module takes with a leading batch dimension",
        convert=tuple,
    )
    vmap_in_axes: Any = option(
        None,
        'also store `jax.vmap(fn, in_axes=vmap_in_axes)` as a batched module (SPEC.md, "Batched '
        'module") for any batch size; `jax.vmap` of the bundle function over the same arguments '
        "then runs it instead of a loop. As `jax.vmap`'s `in_axes`, with 0 or None",
    )
    shapes_specs: Any = option(
        None,
        "symbolic shapes, as `jax.export.symbolic_args_specs` takes them (for example "
        '`(None, "b, 8")`), with their `constraints`: the function then takes any sizes that fit '
        "(format 2.0, SPEC.md 2.8); the example arguments stay concrete",
    )
    constraints: Sequence[str] = option(
        (),
        'constraints on the symbols of symbolic shapes (`("b >= 2",)`), recorded in the manifest',
        convert=tuple,
    )
    independent_rows: str | Mapping[str, Mapping[str, int]] | None = option(
        None,
        "declare the function's rows independent along a symbolic dimension (SPEC.md 2.13): "
        "its symbol (`b`: every argument and result whose shape has it, at that axis), or "
        '`{"arguments": {NAME: AXIS}, "results": {NAME: AXIS}}`. A trusted bundle\'s '
        "`jax.vmap` then folds the mapped axis into it, one call, and `serve` joins requests "
        "along it. `export` first checks the claim on the function (blocks of random rows "
        "joined against each block alone) and records that it did",
        Flag("--independent-rows", metavar="SYMBOL"),
    )
    store_inputs: bool = option(True, "store the example arguments in the bundle")
    store_expected: bool = option(
        True,
        "store the function's results on the example arguments, computed by JAX, as expected "
        "outputs (with `store_inputs`)",
    )
    inputs: Sequence[Any] | None = option(
        None,
        "example positional arguments, pytrees as the Exported takes them; stored, with the "
        "results the Exported computes on them as expected outputs",
    )
    blob: bytes | None = option(
        None,
        "the bytes the Exported was deserialized from (`read_blob`), if it was: its VJP is then "
        "read from them in a child process, never in this one",
    )
    batch_size: int | None = option(
        None,
        "a ReactantServer.jl bundle's one compiled batch size to pack (default: every one, a "
        "function `bN` each, the smallest the default)",
        Flag("--batch-size", type="positive_int", metavar="N"),
    )
    max_shard_size: int | None = option(
        None,
        "split each tensor file whose tensors hold more than this many bytes into shards named "
        "as Hugging Face names them (`weights-00001-of-00003.safetensors`), in key order, each "
        "at most this size unless one tensor alone is larger (a tensor never straddles shards; "
        "SPEC.md 2.10)",
        Flag("--max-shard-size", type="size", metavar="SIZE", note="e.g. 2G"),
    )
    metadata: Mapping[str, Any] | Metadata | None = option(
        None,
        "what a model card says of the bundle (SPEC.md 2.12), each optional: `description`, "
        "`license` (an SPDX expression), `authors`, `source_url`, `tags`, `citation`, "
        "`framework`, `base_model`; a `README.md` card with its YAML header is written too",
        *map(_metadata_flag, METADATA_FIELDS),
        convert=_metadata,
        group="metadata (SPEC.md 2.12; a README.md model card is written with it)",
    )
    card: str | os.PathLike[str] | None = option(
        None,
        "a Hugging Face model card (markdown, with a YAML header) to store as the bundle's "
        "`README.md`: its header gives `metadata` (whose own fields win), its text the card's",
        Flag("--card", metavar="README.md"),
    )
    add: bool = option(
        False,
        "add the function to the existing bundle at the output path (format 2.0), rewritten "
        "atomically, its parameters stored once with the others' (the same name and bytes are "
        "shared; the same name with other bytes is a `TensorConflictError`)",
        Flag("--add", action="store_true", note="a signed bundle needs --sign-key"),
    )
    default: bool = option(
        False,
        "adding a function: make it (the first added) the bundle's default; otherwise the "
        "default stays, or becomes the bundle's first function",
        Flag("--default", action="store_true"),
    )
    sign_key: str | os.PathLike[str] | SigningKey | None = option(
        None,
        "sign the bundle with this elliptic-curve private key (a PEM file; SPEC.md, "
        '"Signature") as the last step. A signed bundle that is rewritten '
        "(refreshed, compiled, a function added) is refused without it, and signed again",
        Flag("--sign-key", dest="private_key", metavar="KEY.pem"),
        convert=_signing_key,
    )
    public_key: str | os.PathLike[str] | None = option(
        None,
        "a signed bundle's signature must verify with this key before it is signed again "
        "(default: the signing key's own public key)",
        Flag("--public-key", metavar="PUB.pem"),
    )
    replace_signature: bool = option(
        False,
        "sign again even though the bundle's signature does not verify (take the bundle over)",
        Flag("--replace-signature", action="store_true"),
    )
    platforms: Sequence[str] | None = option(
        None,
        "lower the function for each of these platforms, as `jax.export` does "
        '(`("cpu", "cuda")`; SPEC.md 2.14): one module whose `@main` takes the index of the '
        "platform it runs on, which the xla backend passes. Without it, one portable module",
        convert=tuple,
    )
    rows_checked: bool = option(
        False, "`independent_rows` was checked on the function (`export`)", internal=True
    )
    already_permuted: bool = option(
        False, "column-major arrays have the tensors' shapes already (Reactant's)", internal=True
    )
    expected_here: bool = option(
        False,
        "the given expected values were computed by this process's jax (`export`, "
        "`from_exported`): record where, as for computed ones (SPEC.md 2.15)",
        internal=True,
    )
    without_values: Sequence[str] = option(
        (),
        "arguments stored with no example value (a ReactantServer.jl bundle's inputs)",
        convert=tuple,
        internal=True,
    )
    # Symbolic dimensions (format 2.0, SPEC.md 2.8): each argument's and result's shape, where
    # the module's dynamic (`?`) dimensions are expressions.
    shapes: Sequence[Sequence[int | str]] | None = option(
        None, "each argument's manifest shape, symbolic dimensions as expressions", internal=True
    )
    result_shapes: Sequence[Sequence[int | str]] | None = option(
        None, "each result's manifest shape, symbolic dimensions as expressions", internal=True
    )

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value, convert = getattr(self, f.name), f.metadata["convert"]
            if convert is not None and value is not None:
                object.__setattr__(self, f.name, convert(value))

    @property
    def signing_key(self) -> SigningKey | None:
        """`sign_key` as `__post_init__` converted it (`_signing_key`)."""
        from .._format._signature import SigningKey

        key = self.sign_key
        assert key is None or isinstance(key, SigningKey), "__post_init__ converts sign_key"
        return key


OPTIONS: dict[str, dataclasses.Field[Any]] = {f.name: f for f in dataclasses.fields(PackOptions)}


# What `pack` takes (and `pack_files`, with `sign_key`): the options of one module's bundle.
PACK = (
    "names",
    "paths",
    "roles",
    "result_names",
    "layout",
    "function",
    "force",
    "target_version",
    "producer",
    "timestamp",
    "input_tree",
    "output_tree",
    "expected",
    "allow_custom_calls",
    "with_vjp",
    "batched",
    "batched_arguments",
    "max_shard_size",
    "metadata",
    "card",
)


def takes(*names: str) -> Callable[[Callable[..., R]], Callable[..., R]]:
    """A writer entry that takes the options `names` as keywords: `impl`'s own parameters and
    then these, with their definitions' defaults, in its signature and its docstring. `impl`
    receives them, and the defaults of the rest, as one `PackOptions`, its parameter `opt`.
    A keyword it does not take is a `TypeError` that names it and the closest it takes."""
    for name in names:
        if name not in OPTIONS or OPTIONS[name].metadata["internal"]:
            raise ValueError(f"{name!r} is not a writer option a function may take")

    def decorate(impl: Callable[..., R]) -> Callable[..., R]:
        own = inspect.signature(impl)
        public = own.replace(
            parameters=[p for n, p in own.parameters.items() if n != "opt"]
            + [_parameter(n) for n in names]
        )

        @functools.wraps(impl)
        def entry(*args: Any, **kwargs: Any) -> R:
            for key in kwargs:
                if key not in public.parameters or key == "opt":
                    raise TypeError(_unexpected(impl.__name__, key, public))
            try:
                bound = public.bind(*args, **kwargs)
            except TypeError as e:
                raise TypeError(f"{impl.__name__}() {e}") from None
            given = {k: v for k, v in bound.arguments.items() if k in names}
            rest = {k: v for k, v in bound.arguments.items() if k not in names}
            call = inspect.BoundArguments(own, {**rest, "opt": PackOptions(**given)})
            return impl(*call.args, **call.kwargs)

        del entry.__wrapped__  # the signature is `public`
        entry.__signature__ = public  # type: ignore[attr-defined]
        entry.__doc__ = _document(impl.__doc__ or "", names)
        return entry

    return decorate


def _parameter(name: str) -> inspect.Parameter:
    f = OPTIONS[name]
    return inspect.Parameter(
        name, inspect.Parameter.KEYWORD_ONLY, default=f.default, annotation=f.type
    )


def _unexpected(function: str, key: str, public: inspect.Signature) -> str:
    close = difflib.get_close_matches(key, [p for p in public.parameters if p != key], 1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"{function}() got an unexpected keyword argument {key!r}{hint}"


def _document(doc: str, names: Sequence[str]) -> str:
    """`doc` with a bullet for each option in its `**Arguments:**` list (made if it has none),
    after the bullets of the function's own arguments."""
    lines = inspect.cleandoc(doc).splitlines()
    bullets = [
        textwrap.fill(
            f"`{n}={OPTIONS[n].default!r}`: {OPTIONS[n].metadata['help']}.",
            92,
            initial_indent="- ",
            subsequent_indent="  ",
            break_on_hyphens=False,
        )
        for n in names
    ]
    if "**Arguments:**" not in lines:
        returns = [i for i, line in enumerate(lines) if line.startswith("**Returns:**")]
        at = returns[0] if returns else len(lines)
        while at and not lines[at - 1].strip():
            at -= 1
        lines[at:at] = ["", "**Arguments:**", "", *bullets]
        return "\n".join(lines)
    at = lines.index("**Arguments:**") + 1
    while at < len(lines) and not lines[at].strip():
        at += 1
    while at < len(lines) and lines[at].startswith(("- ", "  ")):
        at += 1
    lines[at:at] = bullets + ([""] if at < len(lines) and lines[at].strip() else [])
    return "\n".join(lines)
