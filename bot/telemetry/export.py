"""The OpenTelemetry SDK set up to export over OTLP/HTTP; imported only when tracing is on (`threadbot[otel]`).

The exporter takes its endpoint, headers, timeout and compression from the SDK's own
`OTEL_EXPORTER_OTLP_*` variables; the batch processor sends from a thread of its own, never the loop.
"""

from __future__ import annotations

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from bot import __version__


def otlp_provider(service_name: str) -> TracerProvider:
    """A provider of its own (not the global one); `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES` win."""
    resource = Resource.create({"service.version": __version__})
    if str(resource.attributes.get(SERVICE_NAME, "unknown_service")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: service_name}))
    provider = TracerProvider(resource=resource, shutdown_on_exit=False)  # `Tracing.close` stops it, bounded
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return provider
