"""The messages of KServe's gRPC predict protocol (`grpc_predict_v2.proto`, vendored beside this
module), as protobuf classes built at import from its descriptor (`_predict_v2.py`, generated).

Why a descriptor and not protoc's `_pb2` modules: generated `_pb2` code registers
`inference.ModelInferRequest` and the rest in protobuf's default pool, where tritonclient's and
kserve's own copies of the same protocol register them too, so that one process could not import
both; and it pins the protobuf runtime to the generator's version. The classes here live in a
pool of their own. `write()` regenerates `_predict_v2.py` with grpcio-tools (the dev extra);
tests/test_grpc.py checks that it is current."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

PROTO = Path(__file__).with_name("grpc_predict_v2.proto")
GENERATED = Path(__file__).with_name("_predict_v2").with_suffix(".py")
PACKAGE = "inference"
SERVICE = "inference.GRPCInferenceService"

_HEADER = '''"""Generated from grpc_predict_v2.proto by `_grpc_messages.write()` (grpcio-tools' protoc):
its FileDescriptorProto, serialized. Do not edit; tests/test_grpc.py checks that it is current."""

'''


def descriptor_bytes() -> bytes:
    """The .proto's FileDescriptorProto, serialized, as protoc (grpcio-tools) compiles it."""
    import tempfile

    from google.protobuf import descriptor_pb2
    from grpc_tools import protoc

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "set.binpb"
        argv = ["protoc", f"-I{PROTO.parent}", f"--descriptor_set_out={out}", PROTO.name]
        if protoc.main(argv) != 0:
            raise RuntimeError(f"protoc failed on {PROTO}")
        (file,) = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file
    return bytes(file.SerializeToString(deterministic=True))


def generated_text() -> str:
    """The text of `_predict_v2.py`: the descriptor in hex, 44 bytes to a line (as ruff formats it)."""
    data = descriptor_bytes().hex()
    lines = [f'    "{data[i : i + 88]}"\n' for i in range(0, len(data), 88)]
    return _HEADER + "SERIALIZED = bytes.fromhex(\n" + "".join(lines) + ")\n"


def write() -> None:
    GENERATED.write_text(generated_text())


@functools.cache
def messages() -> Any:
    """The protocol's message classes, by name (`messages().ModelInferRequest`), in a
    descriptor pool of their own."""
    from types import SimpleNamespace

    from google.protobuf import descriptor_pool, message_factory

    from ._predict_v2 import SERIALIZED

    pool = descriptor_pool.DescriptorPool()
    file = pool.AddSerializedFile(SERIALIZED)
    return SimpleNamespace(
        **{
            name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{PACKAGE}.{name}"))
            for name in file.message_types_by_name
        }
    )
