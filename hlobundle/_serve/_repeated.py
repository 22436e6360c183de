"""A binary request whose JSON header is the text of an earlier one's: a client of the binary
tensor data extension sends the same header before new data, request after request. What
checking that header against the model found (`_app.decoded`: its inputs' names, datatypes,
shapes and sizes, the outputs asked for, the results' shapes and bounds) depends on the header's
text and the model alone, so it is kept, and such a request's data is only cut into its inputs:
its length and a BOOL input's bytes are still checked on every request, and anything else goes
the whole way (`Repeated`)."""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from ._responses import Decoded
    from ._spec import Spec

# Headers kept, by model and text (least recently kept out): at most KEPT x MAX_TEXT bytes.
KEPT, MAX_TEXT = 64, 4096


@dataclass(frozen=True)
class _Plan:
    """A header's outcome: its `Decoded` without inputs, and where each input's data lies in
    the data after the header (name, dtype, offset, count, shape), in the request's order."""

    decoded: Decoded
    inputs: tuple[tuple[str, np.dtype[Any], int, int, tuple[int, ...]], ...]
    size: int  # the data's bytes, all of them claimed


class Repeated:
    """The headers that passed `_app.decoded`, kept where every input travels as binary data
    and no output goes to a shared-memory region (whose registrations change between requests);
    used and filled on the event loop only."""

    def __init__(self) -> None:
        self.kept: OrderedDict[tuple[int, bytes], _Plan] = OrderedDict()

    def decoded(self, served: Spec, body: bytes, header_length: str | None) -> Decoded | None:
        """`body`'s request as `_app.decoded` decodes it, where its header was kept and its
        data is what the header says (its length, a BOOL's bytes); else None: the whole way
        decodes it, or says why not."""
        text = _text(body, header_length)
        if text is None:
            return None
        plan = self.kept.get((id(served), text))
        if plan is None or len(body) - len(text) != plan.size:
            return None
        data = memoryview(body)[len(text) :]
        given = {}
        for name, dtype, offset, count, shape in plan.inputs:
            raw = np.frombuffer(data, dtype=dtype, count=count, offset=offset)
            if dtype.kind == "b" and (raw.view(np.uint8) > 1).any():
                return None  # the whole way refuses it
            given[name] = raw.reshape(shape)
        return dataclasses.replace(plan.decoded, given=given)

    def keep(
        self, served: Spec, body: bytes, header_length: str | None, parsed: Any, decoded: Decoded
    ) -> None:
        """`decoded`, the outcome of `body`'s header (`parsed`), kept where it can be."""
        text = _text(body, header_length)
        if text is None or decoded.written or decoded.want.shared:
            return
        if not all(_binary(item) for item in parsed["inputs"]):
            return
        inputs, offset = [], 0
        for name, x in decoded.given.items():  # in the request's order (`read_inputs`)
            inputs.append((name, x.dtype, offset, x.size, x.shape))
            offset += x.nbytes
        if offset != len(body) - len(text):
            return
        self.kept[(id(served), text)] = _Plan(
            dataclasses.replace(decoded, given={}), tuple(inputs), offset
        )
        if len(self.kept) > KEPT:
            self.kept.popitem(last=False)


def _text(body: bytes, header_length: str | None) -> bytes | None:
    """The binary request's JSON header; None where there is none, it is longer than any kept
    (`MAX_TEXT`: not copied), or its length is not one `parse_request` accepts."""
    if header_length is None or not (header_length.isascii() and header_length.isdigit()):
        return None
    if len(header_length) > 12:  # longer than any body: `parse_request` says why
        return None
    n = int(header_length)
    return body[:n] if n <= min(len(body), MAX_TEXT) else None


def _binary(item: Any) -> bool:
    """Whether an input of the request travels as binary data (not JSON, not a region)."""
    if type(item) is not dict:
        return False
    params = item.get("parameters")
    return (
        type(params) is dict
        and "binary_data_size" in params
        and "shared_memory_region" not in params
        and "data" not in item
    )
