# SPDX-License-Identifier: MIT
"""The v05 routes, the same on vLLM's and sglang's FastAPI apps
(docs/SERVERS.md, "Routes"):

  POST /v05/group    a group; streams NDJSON records (wire.py)
  POST /v05/reward   one reward or {"rewards": [...]}
  POST /v05/abort    {"uid", "owner"?}: the group and its requests in
                     the engine, on whichever front end runs it
  GET  /v05/fit      this front end's part of v05-eb's running fit
  POST /v05/fit      {"others", "policy_version"}: the other engines' sum
  GET  /v05/stats    the plugin's counters and the service's
  GET  /v05/metrics  the same as Prometheus text, under the exporter's
                     names (v05.core.metrics; v05.servers.metrics)

A body that is not JSON is a 400, a field refused a 422 (or 404/409 where
the field names something unknown or already done), each naming the
field; the service is untouched by a refused request. The service is
looked up per request (``service_of(request)``): vLLM keeps it in the
app's state, sglang's plugin in a module global.
"""

from typing import Callable

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from . import wire
from .service import GroupService

__all__ = ["make_router"]

NDJSON = "application/x-ndjson"


def _refused(e: wire.WireError) -> JSONResponse:
    return JSONResponse(e.body(), status_code=e.status)


def _unavailable() -> JSONResponse:
    return JSONResponse({"error": "v05 is not running in this server (no "
                         "engine client: see the server's log)"},
                        status_code=503)


def make_router(service_of: Callable[[Request], GroupService]) -> APIRouter:
    router = APIRouter(prefix="/v05", tags=["v05"])

    @router.post("/group")
    async def group(request: Request):
        svc = service_of(request)
        if svc is None:
            return _unavailable()
        try:
            req = wire.group_request(wire.parse_json(await request.body()))
            svc.check_new(req)
        except wire.WireError as e:
            return _refused(e)
        records = svc.group(req)

        async def body():
            try:
                async for rec in records:
                    yield wire.line(rec)
            finally:
                await records.aclose()
        return StreamingResponse(body(), media_type=NDJSON)

    @router.post("/reward")
    async def reward(request: Request):
        svc = service_of(request)
        if svc is None:
            return _unavailable()
        try:
            rs = wire.rewards(wire.parse_json(await request.body()))
            return JSONResponse(await svc.push(rs))
        except wire.WireError as e:
            return _refused(e)

    @router.post("/abort")
    async def abort(request: Request):
        svc = service_of(request)
        if svc is None:
            return _unavailable()
        try:
            uid, owner = wire.abort_request(
                wire.parse_json(await request.body()))
            return JSONResponse(await svc.abort(uid, owner))
        except wire.WireError as e:
            return _refused(e)

    @router.get("/fit")
    async def fit(request: Request):
        svc = service_of(request)
        if svc is None:
            return _unavailable()
        try:
            return JSONResponse(svc.fit())
        except (OSError, ValueError) as e:  # not mode v05-eb on a stream
            return JSONResponse({"error": str(e)}, status_code=409)

    @router.post("/fit")
    async def post_fit(request: Request):
        svc = service_of(request)
        if svc is None:
            return _unavailable()
        try:
            svc.post_fit(wire.fit_post(wire.parse_json(await request.body())))
        except wire.WireError as e:
            return _refused(e)
        except (OSError, ValueError) as e:
            return JSONResponse({"error": str(e)}, status_code=409)
        return JSONResponse({"posted": True})

    @router.get("/stats")
    async def stats(request: Request):
        svc = service_of(request)
        if svc is None:
            return _unavailable()
        return JSONResponse(svc.stats())

    @router.get("/metrics")
    async def metrics(request: Request):
        # On the loop: a scrape reads a few pages of shared memory.
        svc = service_of(request)
        if svc is None:
            return _unavailable()
        body, ctype = svc.metrics()
        return Response(body, media_type=ctype)

    return router
