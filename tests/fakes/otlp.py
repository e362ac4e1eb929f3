"""A fake OTLP/HTTP trace receiver: `POST /v1/traces` with a protobuf `ExportTraceServiceRequest`, decoded.

The real exporter (opentelemetry-exporter-otlp-proto-http) talks to it unmodified through
`OTEL_EXPORTER_OTLP_ENDPOINT`; the test sees every span as a `ReceivedSpan` and waits on a condition
for the ones it expects, never on a sleep.
"""

from __future__ import annotations

import asyncio
import gzip
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

T = TypeVar("T")
KINDS = {0: "unspecified", 1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer"}


@dataclass(frozen=True)
class ReceivedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    """Empty for a trace's root."""
    kind: str
    attributes: dict[str, Any]
    resource: dict[str, Any]
    status: int
    """0 unset, 1 ok, 2 error (OTLP's `Status.StatusCode`)."""


@dataclass
class FakeOtlp:
    spans: list[ReceivedSpan] = field(default_factory=list)
    exports: int = 0
    url: str = ""
    _arrived: asyncio.Condition = field(default_factory=asyncio.Condition)
    _runner: web.AppRunner | None = None

    async def __aenter__(self) -> FakeOtlp:
        app = web.Application()
        app.router.add_post("/v1/traces", self._export)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def named(self, prefix: str) -> list[ReceivedSpan]:
        return [span for span in self.spans if span.name.startswith(prefix)]

    async def wait_for(self, check: Callable[[], T | None], timeout_s: float, what: str) -> T:
        """Until `check()` returns something truthy (checked after each export), or fail naming `what`."""
        try:
            async with asyncio.timeout(timeout_s), self._arrived:
                await self._arrived.wait_for(lambda: bool(check()))
        except TimeoutError:
            names = sorted({span.name for span in self.spans})
            raise AssertionError(f"no {what} within {timeout_s}s; spans so far: {names}") from None
        result = check()
        assert result
        return result

    async def _export(self, request: web.Request) -> web.Response:
        body = await request.read()
        encoding = request.headers.get("Content-Encoding", "")
        if encoding == "gzip":
            body = gzip.decompress(body)
        elif encoding == "deflate":
            body = zlib.decompress(body)
        if request.headers.get("Content-Type") != "application/x-protobuf":
            return web.Response(status=415, text="this receiver reads protobuf only")
        export = ExportTraceServiceRequest()
        export.ParseFromString(body)
        for resource_spans in export.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    self.spans.append(
                        ReceivedSpan(
                            name=span.name,
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_id=span.parent_span_id.hex(),
                            kind=KINDS.get(span.kind, str(span.kind)),
                            attributes={a.key: _value(a.value) for a in span.attributes},
                            resource=resource,
                            status=span.status.code,
                        )
                    )
        self.exports += 1
        async with self._arrived:
            self._arrived.notify_all()
        return web.Response(
            body=ExportTraceServiceResponse().SerializeToString(), content_type="application/x-protobuf"
        )


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(item) for item in value.array_value.values]
    if kind == "kvlist_value":
        return {item.key: _value(item.value) for item in value.kvlist_value.values}
    return getattr(value, kind) if kind else None
