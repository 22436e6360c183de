"""The system shared-memory extension's REST routes, as Triton serves them (`_shm` keeps the
regions): register a region by name, unregister one or all, and their status. A register
request's body is a small JSON object, read within the body deadline and `MAX_REGISTER_BYTES`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

from ._body import read_body
from ._protocol import NO_SHARED_MEMORY, RequestError
from ._responses import _json, _refusal

if TYPE_CHECKING:
    from starlette.requests import Request

    from ._app import App
    from ._shm import Regions

MAX_REGISTER_BYTES = 4096
_PREFIX = "/v2/systemsharedmemory"


def routes(app: App) -> list[Any]:
    from starlette.routing import Route

    region = f"{_PREFIX}/region/{{name}}"
    handlers = Handlers(app)
    return [
        Route(f"{region}/register", handlers.register, methods=["POST"]),
        Route(f"{region}/unregister", handlers.unregister, methods=["POST"]),
        Route(f"{_PREFIX}/unregister", handlers.unregister, methods=["POST"]),
        Route(f"{region}/status", handlers.status),
        Route(f"{_PREFIX}/status", handlers.status),
    ]


class Handlers:
    """A route each, answering a refusal as inference does: `{"error", "code"}`."""

    def __init__(self, app: App) -> None:
        self.app = app

    async def register(self, request: Request) -> Any:
        return await self._answer(request, self._register)

    async def unregister(self, request: Request) -> Any:
        return await self._answer(request, self._unregister)

    async def status(self, request: Request) -> Any:
        return await self._answer(request, self._status)

    async def _answer(self, request: Request, handler: Any) -> Any:
        try:
            if self.app.regions is None:
                raise RequestError(400, NO_SHARED_MEMORY)
            return await handler(request, self.app.regions)
        except RequestError as e:
            return _json(_refusal(e), e.status)

    async def _register(self, request: Request, regions: Regions) -> Any:
        declared = request.headers.get("content-length")
        timeout_s = self.app.limits.read_timeout_s
        body = await read_body(
            request.receive, declared, MAX_REGISTER_BYTES, timeout_s, self.app.body_deadlines
        )
        try:
            parsed = orjson.loads(body)
        except orjson.JSONDecodeError:
            raise RequestError(400, "the body is not JSON") from None
        regions.register(request.path_params["name"], parsed)
        return _json({})

    async def _unregister(self, request: Request, regions: Regions) -> Any:
        regions.unregister(request.path_params.get("name"))
        return _json({})

    async def _status(self, request: Request, regions: Regions) -> Any:
        return _json(regions.status(request.path_params.get("name")))
