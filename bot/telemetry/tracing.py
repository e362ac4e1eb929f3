"""OpenTelemetry spans, exported over OTLP/HTTP when the operator sets the SDK's endpoint variable.

Without `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`), or without the
`threadbot[otel]` extra, a `Tracing` is off: `span()` hands out one shared do-nothing span and
nothing of OpenTelemetry is imported for it, so tracing costs a function call where it is off.
When on, the SDK reads its own variables (`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`,
`OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_TRACES_SAMPLER`, …), and each `Tracing` has its own
`TracerProvider`: the global one is left to whoever embeds the bot.

Spans nest through the context asyncio already carries (a task inherits its creator's), so a turn
started while an event is handled is that event's child. Work queued for another task (a post, a
cluster job) carries its parent explicitly: `bind()` an operation where it is queued, or, across
processes, a W3C `traceparent` string (`traceparent()` where the job is queued, `resumed()` where it runs).

Message and tool contents stay out of spans unless `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`
is `true`, the GenAI conventions' own switch.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import threading
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Tracer

log = logging.getLogger(__name__)

CAPTURE_CONTENT = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
ENDPOINTS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
SERVICE_NAME = "threadbot"
FLUSH_S = 5.0

Attributes = Mapping[str, str | bool | int | float | list[str]]
T = TypeVar("T")
Kind = Literal["internal", "client", "server", "consumer", "producer"]


class Span(Protocol):
    def set(self, attributes: Attributes) -> None:
        """Add attributes known only once the work is under way (tokens, a status)."""
        ...


class _Off:
    __slots__ = ()

    def set(self, attributes: Attributes) -> None:
        pass


OFF = _Off()


class _On:
    __slots__ = ("_span",)

    def __init__(self, span: Any) -> None:
        self._span = span

    def set(self, attributes: Attributes) -> None:
        self._span.set_attributes(attributes)


class Tracing:
    """One daemon's spans: off unless built by `from_environ` with an endpoint and the SDK installed."""

    def __init__(
        self, tracer: Tracer | None = None, *, provider: TracerProvider | None = None, capture_content: bool = False
    ) -> None:
        self._tracer = tracer
        self._provider = provider
        self.capture_content = capture_content and tracer is not None
        """Whether message and tool contents may go into spans (the operator opted in)."""

    @classmethod
    def from_environ(cls) -> Tracing:
        """On when the process environment names an OTLP endpoint; the SDK reads the rest of it there too,
        so these variables come from the environment only, never from `.env`."""
        environ = os.environ
        if not any(environ.get(name) for name in ENDPOINTS) or environ.get("OTEL_SDK_DISABLED", "").lower() == "true":
            return cls()
        try:
            from bot.telemetry.export import otlp_provider  # the SDK and the exporter: the otel extra only
        except ImportError:
            log.warning(
                "OTEL_EXPORTER_OTLP_ENDPOINT is set but the OpenTelemetry SDK is not installed; no traces are "
                "sent (pip install 'threadbot[otel]')"
            )
            return cls()
        provider = otlp_provider(SERVICE_NAME)
        capture = environ.get(CAPTURE_CONTENT, "").lower() == "true"
        return cls(provider.get_tracer("threadbot"), provider=provider, capture_content=capture)

    @property
    def enabled(self) -> bool:
        return self._tracer is not None

    @contextlib.contextmanager
    def span(
        self,
        name: str,
        attributes: Attributes | None = None,
        *,
        kind: Kind = "internal",
    ) -> Iterator[Span]:
        """A span around the block, the current one's child.
        An exception that leaves the block marks the span as an error, with `error.type`."""
        if self._tracer is None:
            yield OFF
            return
        from opentelemetry import trace

        with self._tracer.start_as_current_span(
            name, kind=getattr(trace.SpanKind, kind.upper()), attributes=attributes
        ) as span:
            try:
                yield _On(span)
            except BaseException as exc:
                span.set_attribute("error.type", type(exc).__qualname__)
                raise

    def bind(self, operation: Callable[[], Awaitable[T]]) -> Callable[[], Awaitable[T]]:
        """`operation`, to run later in another task (a queue's worker) as a child of the current span."""
        if self._tracer is None:
            return operation
        from opentelemetry import context

        parent = context.get_current()

        async def bound() -> T:
            token = context.attach(parent)
            try:
                return await operation()
            finally:
                context.detach(token)

        return bound

    async def close(self) -> None:
        """Send what is still buffered and stop the exporter, for at most `FLUSH_S`: a collector that does not
        answer must not hold up the daemon's stop. The SDK blocks, so it runs on a daemon thread of its own,
        which the interpreter does not wait for at exit (the loop's executor would be waited for)."""
        if self._provider is None:
            return
        provider, self._provider, self._tracer = self._provider, None, None
        loop = asyncio.get_running_loop()
        stopped = asyncio.Event()

        def stop() -> None:
            try:
                provider.force_flush(int(FLUSH_S * 1000))
                provider.shutdown()
            finally:
                with contextlib.suppress(RuntimeError):  # the loop is gone: nobody waits any more
                    loop.call_soon_threadsafe(stopped.set)

        threading.Thread(target=stop, name="otel-flush", daemon=True).start()
        try:
            async with asyncio.timeout(FLUSH_S):
                await stopped.wait()
        except TimeoutError:
            log.warning("the trace collector took over %gs; spans not yet sent are dropped", FLUSH_S)


def traceparent() -> str | None:
    """The current span as a W3C `traceparent`, to hand to another process; None outside any span.

    Nothing is imported: where OpenTelemetry was never loaded there can be no current span."""
    if "opentelemetry.trace" not in sys.modules:
        return None
    from opentelemetry import trace

    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


@contextlib.contextmanager
def resumed(header: str | None) -> Iterator[None]:
    """Within the block, spans are children of the span another process sent as `traceparent` (`header`).

    Nothing happens for None or a header that does not parse: the block's spans start a trace of their own."""
    parts = (header or "").split("-")
    try:
        if len(parts) != 4 or parts[0] != "00" or len(parts[1]) != 32 or len(parts[2]) != 16:
            raise ValueError(header)
        trace_id, span_id, flags = int(parts[1], 16), int(parts[2], 16), int(parts[3], 16)
    except ValueError:
        yield
        return
    from opentelemetry import context, trace

    remote = trace.SpanContext(trace_id, span_id, is_remote=True, trace_flags=trace.TraceFlags(flags))
    token = context.attach(trace.set_span_in_context(trace.NonRecordingSpan(remote)))
    try:
        yield
    finally:
        context.detach(token)
