"""The system shared-memory extension's gRPC calls, as Triton defines them (its
grpc_service.proto): SystemSharedMemoryRegister, SystemSharedMemoryUnregister and
SystemSharedMemoryStatus, on the service `_grpc` serves. The regions and every check of them
are `_shm`'s, the same object REST's routes (`_shm_http`) register into: a region registered
over either protocol may be named over the other.

A region is the server's, not a connection's: a gRPC channel reconnects under its client
(grpc's own retries, and the server's `max_connection_age`, which closes every connection
after 5 minutes), so the end of a connection unregisters nothing. What ends a region is an
unregister, by name or of every region, or the server's stop: it unregisters every region and
closes their files once its calls are drained (`_grpc.with_grpc`, `_grpc.serving`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._protocol import NO_SHARED_MEMORY, RequestError

if TYPE_CHECKING:
    from ._shm import Regions

# name -> (the method of `Calls`, its request message, its response message)
RPCS = {
    "SystemSharedMemoryStatus": (
        "status",
        "SystemSharedMemoryStatusRequest",
        "SystemSharedMemoryStatusResponse",
    ),
    "SystemSharedMemoryRegister": (
        "register",
        "SystemSharedMemoryRegisterRequest",
        "SystemSharedMemoryRegisterResponse",
    ),
    "SystemSharedMemoryUnregister": (
        "unregister",
        "SystemSharedMemoryUnregisterRequest",
        "SystemSharedMemoryUnregisterResponse",
    ),
}


class Calls:
    """A method each, over `regions` (None: the extension is not offered, and every call is
    refused as a request naming a region is)."""

    def __init__(self, regions: Regions | None, m: Any) -> None:
        self.regions, self.m = regions, m

    def _offered(self) -> Regions:
        if self.regions is None:
            raise RequestError(400, NO_SHARED_MEMORY)
        return self.regions

    async def register(self, request: Any, context: Any) -> Any:
        body = {"key": request.key, "offset": request.offset, "byte_size": request.byte_size}
        self._offered().register(request.name, body)
        return self.m.SystemSharedMemoryRegisterResponse()

    async def unregister(self, request: Any, context: Any) -> Any:
        self._offered().unregister(request.name or None)  # "": every region
        return self.m.SystemSharedMemoryUnregisterResponse()

    async def status(self, request: Any, context: Any) -> Any:
        response = self.m.SystemSharedMemoryStatusResponse
        found = self._offered().status(request.name or None)
        return response(regions={r["name"]: response.RegionStatus(**r) for r in found})
