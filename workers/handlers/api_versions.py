"""ApiVersions (key 18), v0-v4.

Answers the registry's ranges (workers/handlers/__init__.py). The response header is
always v0 (framing does that). Writes no feature tagged fields: they would carry only
defaults, and librdkafka 2.0.2 (Debian's kcat) mis-skips default-valued tagged fields
here (CLIENT-API-USAGE.md, last section). An unsupported ApiVersions version never
reaches this handler: the dispatcher answers it with the KIP-511 v0 fallback.
"""
from mpbroker.protocol.errors import ErrorCode


def handle(broker, ctx, req):
    from workers.handlers import advertised_versions
    return {"error_code": ErrorCode.NONE, "api_keys": advertised_versions(),
            "throttle_time_ms": 0}
