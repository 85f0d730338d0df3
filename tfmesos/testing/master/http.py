"""The HTTP side: the scheduler endpoint, redirection, state and control routes.

Models ``Master::Http::scheduler`` (its order of checks and answers), the
RecordIO subscription stream, ``Master::Http::redirect`` (a protocol-relative
``Location``), a small part of ``/state`` and ``/health``, and the double's own
``/__test__/`` API. Requests may be held before the master takes them
(:meth:`Faults.call_delay <tfmesos.testing.master.faults.Faults.call_delay>`);
it takes them in arrival order.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from tfmesos.testing.master.allocator import Allocator
from tfmesos.testing.master.executor import TaskRunner
from tfmesos.testing.master.fault_table import FAULTS, Fault
from tfmesos.testing.master.faults import Faults
from tfmesos.testing.master.inspection import Inspector
from tfmesos.testing.master.operations import Operations
from tfmesos.testing.master.schema import (
    JSON,
    ProtocolError,
    parse_call,
    recordio_encode,
    validate_call,
)
from tfmesos.testing.master.state import (
    SCHEDULER_PATH,
    CloseStream,
    Framework,
    MasterState,
    Subscription,
    now,
)
from tfmesos.testing.master.subscriptions import Subscriptions
from tfmesos.testing.master.updates import StatusUpdates

MASTER_PREFIX = "/master"
OPERATOR_PATH = "/api/v1"
"""The operator API's path (``docs/operator-http-api.md``)."""
"""The master's libprocess process ID, the first component of its routes' paths."""
STREAM_END_WAIT = 5.0
"""The longest a TEARDOWN's answer waits for the stream it ends to be written to its end."""
TEARDOWN_ANSWER_DELAY = 0.05
"""How long after the stream's end TEARDOWN is answered (Mesos 1.12 here: the
framework read the end first in 4 runs of 5)."""


def accepts_json(header: str | None) -> bool:
    """``Request::acceptsMediaType("application/json")``: no Accept accepts everything."""
    if header is None:
        return True
    for item in header.split(","):
        media, _, params = item.strip().partition(";")
        media = media.strip().lower()
        quality = 1.0
        for param in params.split(";"):
            key, _, value = param.strip().partition("=")
            if key.strip().lower() == "q":
                with contextlib.suppress(ValueError):
                    quality = float(value)
        if quality > 0 and media in ("application/json", "application/*", "*/*"):
            return True
    return False


class HttpApi:
    """The aiohttp application of the master: every route, and the scheduler calls' dispatch."""

    def __init__(
        self,
        state: MasterState,
        *,
        allocator: Allocator,
        updates: StatusUpdates,
        runner: TaskRunner,
        subscriptions: Subscriptions,
        operations: Operations,
        faults: Faults,
        inspector: Inspector,
    ) -> None:
        self.state = state
        self.allocator = allocator
        self.updates = updates
        self.runner = runner
        self.subscriptions = subscriptions
        self.operations = operations
        self.faults = faults
        self.inspector = inspector
        self.held = 0
        """Requests to the scheduler endpoint being held by a call delay right now."""

    def application(self) -> web.Application:
        app = web.Application()
        # libprocess serves the master's routes under its process ID, "/master",
        # and hands it requests for paths no process owns ("/api/v1/scheduler")
        # with "/master" put in front (ProcessManager::handle, process.cpp).
        app.router.add_route("*", SCHEDULER_PATH, self._scheduler_endpoint)
        app.router.add_route("*", MASTER_PREFIX + SCHEDULER_PATH, self._scheduler_endpoint)
        for path in ("/redirect", "/master/redirect"):
            app.router.add_get(path, self._redirect_endpoint)
        for path in ("/state", "/master/state", "/state.json", "/master/state.json"):
            app.router.add_get(path, self._state_endpoint)
        for path in ("/health", "/master/health"):
            app.router.add_get(path, self._health_endpoint)
        for path in (OPERATOR_PATH, MASTER_PREFIX + OPERATOR_PATH):
            app.router.add_post(path, self._operator_endpoint)
        self._control_routes(app)
        return app

    async def _scheduler_endpoint(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        loaded: Any = None
        with contextlib.suppress(UnicodeDecodeError, ValueError):
            loaded = json.loads(body.decode("utf-8"))
        kind = loaded.get("type") if isinstance(loaded, dict) else None
        delay = self.faults.call_delay(kind if isinstance(kind, str) else None)
        if delay > 0:
            # On its way to the master: it arrives, and is taken, after this.
            self.held += 1
            try:
                await asyncio.sleep(delay)
            finally:
                self.held -= 1
        record: JSON = {
            "seq": len(self.state.received_calls),
            "time": now(),
            "method": request.method,
            "content_type": request.headers.get("Content-Type"),
            "stream_id": request.headers.get("Mesos-Stream-Id"),
            "type": None,
            "framework_id": None,
            "body": None,
            "status": None,
            "delay": delay,
        }
        if loaded is not None:
            record["body"] = loaded
        self.state.received_calls.append(record)
        try:
            response = await self._scheduler(request, body, record)
        except ProtocolError as exc:
            record["status"] = exc.status
            record["error"] = exc.message
            headers = {"Allow": "POST"} if exc.status == 405 else None
            return web.Response(status=exc.status, text=exc.message, headers=headers)
        if record["status"] is None:
            record["status"] = response.status
        return response

    async def _scheduler(
        self, request: web.Request, body: bytes, record: JSON
    ) -> web.StreamResponse:
        if not self.state.config.leader:
            return self._redirect(request)
        if request.method != "POST":
            raise ProtocolError(
                405, f"Expecting one of {{ 'POST' }}, but received '{request.method}'"
            )
        content_type = request.headers.get("Content-Type")
        if content_type is None:
            raise ProtocolError(400, "Expecting 'Content-Type' to be present")
        if content_type.strip() == "application/x-protobuf":
            raise ProtocolError(415, "This test master accepts only 'application/json' calls")
        if content_type.strip() != "application/json":
            raise ProtocolError(
                415, "Expecting 'Content-Type' of application/json or application/x-protobuf"
            )
        call = parse_call(body)
        record["type"] = call.get("type")
        record["framework_id"] = call.get("framework_id", {}).get("value")
        validate_call(call)
        kind = call["type"]
        self.faults.check_call(kind)
        if kind == "SUBSCRIBE":
            if not accepts_json(request.headers.get("Accept")):
                raise ProtocolError(
                    406,
                    "Expecting 'Accept' to allow 'application/x-protobuf' or 'application/json'",
                )
            if "Mesos-Stream-Id" in request.headers:
                raise ProtocolError(
                    400, "Subscribe calls should not include the 'Mesos-Stream-Id' header"
                )
            return await self._subscribe(request, call, record)

        framework = self.state.frameworks_by_id.get(call["framework_id"]["value"])
        if framework is None:
            raise ProtocolError(400, "Framework cannot be found")
        if framework.subscription is None:
            raise ProtocolError(403, "Framework is not subscribed")
        stream_id = request.headers.get("Mesos-Stream-Id")
        if stream_id is None:
            raise ProtocolError(
                400, "All non-subscribe calls should include the 'Mesos-Stream-Id' header"
            )
        if stream_id != framework.subscription.stream_id:
            raise ProtocolError(
                400,
                f"The stream ID '{stream_id}' included in this request didn't match the stream "
                f"ID currently associated with framework ID {framework.id}",
            )
        if kind == "UNKNOWN":
            raise ProtocolError(501, "Received 'UNKNOWN' call")
        if kind == "UPDATE_FRAMEWORK":
            self.subscriptions.update_framework(framework, call["update_framework"])
            return web.Response(status=200)
        subscription = framework.subscription
        self._dispatch(framework, kind, call)
        if kind == "TEARDOWN" and subscription is not None:
            # Mesos's master ends the framework's stream while it handles
            # TEARDOWN (Master::removeFramework), so the stream's end reaches
            # the framework before the call's 202 does.
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(subscription.ended.wait(), STREAM_END_WAIT)
            # ...and its tasks are killed and its agents told before the
            # answer goes out: a framework sees the stream end first.
            await asyncio.sleep(TEARDOWN_ANSWER_DELAY)
        return web.Response(status=202)

    def _dispatch(self, framework: Framework, kind: str, call: JSON) -> None:
        if kind == "TEARDOWN":
            self.subscriptions.remove_framework(framework)
        elif kind == "ACCEPT":
            self.operations.accept(framework, call["accept"])
        elif kind == "DECLINE":
            self.allocator.decline(framework, call["decline"])
        elif kind == "REVIVE":
            self.allocator.revive(framework, call.get("revive", {}).get("roles", []))
        elif kind == "SUPPRESS":
            self.allocator.suppress(framework, call.get("suppress", {}).get("roles", []))
        elif kind == "KILL":
            self.runner.kill(framework, call["kill"])
        elif kind == "SHUTDOWN":
            self.runner.shutdown_executor(framework, call["shutdown"])
        elif kind == "ACKNOWLEDGE":
            self.updates.acknowledge(framework, call["acknowledge"])
        elif kind == "RECONCILE":
            self.updates.reconcile(framework, call["reconcile"].get("tasks", []))
        elif kind == "RECONCILE_OPERATIONS":
            self.updates.reconcile_operations(framework, call["reconcile_operations"])
        # MESSAGE, REQUEST, ACKNOWLEDGE_OPERATION_STATUS and the inverse offer
        # calls are accepted and have no effect here (no custom executors, no
        # allocator modules, no operations with feedback, no maintenance).

    def _redirect(self, request: web.Request) -> web.Response:
        """``Master::Http::redirect``: a protocol-relative ``Location`` to the leader.

        ``//`` + the leader's ``MasterInfo`` hostname + ``:`` + port, then
        ``stringify(request.url)``: the path as the master's process got it,
        which libprocess prefixes with ``/master`` when the request named no
        process (``/api/v1/scheduler`` becomes ``/master/api/v1/scheduler``),
        and the query. ``/redirect`` and ``/master/redirect`` go to the bare
        ``//host:port``; paths under them are 404 (no redirect loops).
        """
        config = self.state.config
        if config.redirect_location is not None and not config.leader:
            location = config.redirect_location
        else:
            if config.leader:
                leader = f"{config.hostname}:{self.state.port}"
            elif config.leader_address is not None:
                leader = config.leader_address
            else:
                return web.Response(status=503, text="No leader elected")
            base = "//" + leader
            path = request.path
            if not path.startswith(MASTER_PREFIX + "/") and path != MASTER_PREFIX:
                path = MASTER_PREFIX + path
            if path == MASTER_PREFIX + "/redirect":
                location = base
            elif path.startswith(MASTER_PREFIX + "/redirect/"):
                return web.Response(status=404)
            else:
                query = "?" + request.query_string if request.query_string else ""
                location = base + path + query
        return web.Response(status=307, headers={"Location": location})

    async def _redirect_endpoint(self, request: web.Request) -> web.Response:
        return self._redirect(request)

    async def _health_endpoint(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def _state_endpoint(self, request: web.Request) -> web.Response:
        return web.json_response(self.inspector.mesos_state())

    async def _operator_endpoint(self, request: web.Request) -> web.Response:
        """The v1 operator API, ``GET_AGENTS`` only, in JSON; other calls get 501."""
        try:
            call = json.loads(await request.read())
            kind = call["type"]
        except (ValueError, KeyError, TypeError):
            return web.Response(
                status=400,
                text="Failed to validate master::Call: Expecting 'type' to be present",
            )
        if kind != "GET_AGENTS":
            return web.Response(status=501, text=f"the test master does not serve {kind}")
        try:
            self.faults.check_call(kind)  # fail_next_call("GET_AGENTS", ...)
        except ProtocolError as exc:
            return web.Response(status=exc.status, text=exc.message)
        return web.json_response(
            {"type": "GET_AGENTS", "get_agents": self.inspector.operator_agents()}
        )

    # -------------------------------------------------------- subscription

    async def _subscribe(
        self, request: web.Request, call: JSON, record: JSON
    ) -> web.StreamResponse:
        stream_id = str(uuid.uuid4())
        response = web.StreamResponse(
            status=200,
            headers={"Content-Type": "application/json", "Mesos-Stream-Id": stream_id},
        )
        response.enable_chunked_encoding()
        await response.prepare(request)
        record["status"] = 200
        record["new_stream_id"] = stream_id
        subscription = Subscription(stream_id)
        error = self.subscriptions.admit(subscription, call["subscribe"])
        if error is not None:
            record["error"] = error
            await response.write(recordio_encode({"type": "ERROR", "error": {"message": error}}))
            await response.write_eof()
            return response
        try:
            while True:
                item = await subscription.queue.get()
                if isinstance(item, CloseStream):
                    if item.abort:
                        transport = request.transport
                        if transport is not None:
                            transport.abort()
                        return response
                    await response.write_eof()
                    return response
                await response.write(item)
        except (ConnectionError, RuntimeError):
            return response
        finally:
            subscription.closed = True
            subscription.ended.set()
            if subscription.heartbeat is not None:
                subscription.heartbeat.cancel()
            self.subscriptions.stream_ended(subscription)

    def _fault_route(self, entry: Fault) -> Callable[[web.Request, JSON], Any]:
        return lambda request, body: entry.from_body(self.faults, body)

    def _control_routes(self, app: web.Application) -> None:
        """The ``/__test__/`` control API (JSON in, JSON out; 404/400 on bad input).

        ``GET  /__test__/state``            everything below in one object
        ``GET  /__test__/frameworks``       ``?completed=1`` adds removed ones
        ``GET  /__test__/frameworks/{id}``
        ``GET  /__test__/tasks``            ``?framework_id=``
        ``GET  /__test__/tasks/{id}``
        ``GET  /__test__/calls``            ``?type=DECLINE``
        ``GET  /__test__/offers``
        ``GET  /__test__/agents``
        ``GET  /__test__/events``           ``?framework_id=``
        ``POST /__test__/calls/clear``
        ``POST /__test__/add_agent``        ``{"cpus":..,"mem":..,"disk":..,"gpus":..,"ports":"a-b"}``
        ``POST /__test__/NAME``             each fault of ``faults.FAULTS`` (``leader`` for
                                            ``set_leader``), its parameters as a JSON object
        """

        def handler(
            fn: Callable[[web.Request, JSON], Any],
        ) -> Callable[[web.Request], Awaitable[web.Response]]:
            async def handle(request: web.Request) -> web.Response:
                body: JSON = {}
                if request.method == "POST" and request.can_read_body:
                    try:
                        loaded = await request.json()
                    except ValueError:
                        return web.json_response({"error": "body is not JSON"}, status=400)
                    if loaded is not None and not isinstance(loaded, dict):
                        return web.json_response({"error": "body is not an object"}, status=400)
                    body = loaded or {}
                try:
                    result = fn(request, body)
                except KeyError as exc:
                    return web.json_response({"error": f"not found: {exc}"}, status=404)
                except (ValueError, TypeError, re.error) as exc:
                    return web.json_response({"error": str(exc)}, status=400)
                return web.json_response({"result": result})

            return handle

        q = "framework_id"
        routes: list[tuple[str, str, Callable[[web.Request, JSON], Any]]] = [
            ("GET", "/__test__/state", lambda r, b: self.inspector.snapshot()),
            (
                "GET",
                "/__test__/frameworks",
                lambda r, b: self.inspector.frameworks(
                    include_completed=r.query.get("completed") == "1"
                ),
            ),
            (
                "GET",
                "/__test__/frameworks/{id}",
                lambda r, b: self.inspector.framework(r.match_info["id"]),
            ),
            ("GET", "/__test__/tasks", lambda r, b: self.inspector.tasks(r.query.get(q))),
            ("GET", "/__test__/tasks/{id}", lambda r, b: self.inspector.task(r.match_info["id"])),
            ("GET", "/__test__/calls", lambda r, b: self.inspector.calls(r.query.get("type"))),
            ("GET", "/__test__/offers", lambda r, b: self.inspector.offers()),
            ("GET", "/__test__/agents", lambda r, b: self.inspector.agents()),
            ("GET", "/__test__/events", lambda r, b: self.inspector.events(r.query.get(q))),
            ("POST", "/__test__/calls/clear", lambda r, b: self.state.received_calls.clear()),
            (
                "POST",
                "/__test__/add_agent",
                lambda r, b: self.allocator.add_agent(
                    hostname=b.get("hostname"),
                    cpus=b.get("cpus"),
                    mem=b.get("mem"),
                    disk=b.get("disk"),
                    gpus=b.get("gpus"),
                    ports=b.get("ports"),
                    attributes=b.get("attributes"),
                ),
            ),
        ]
        # Every fault of the table, its parameters read from the JSON body.
        for entry in FAULTS.values():
            routes.append(("POST", entry.path, self._fault_route(entry)))
        for method, path, fn in routes:
            app.router.add_route(method, path, handler(fn))
