"""ApiVersions (key 18), v0-v4.

Answers the registry's ranges (workers/handlers/__init__.py). The response header is
always v0 (framing does that). Writes no feature tagged fields: they would carry only
defaults, and librdkafka 2.0.2 (Debian's kcat) mis-skips default-valued tagged fields
here (CLIENT-API-USAGE.md, last section).

v3+ carry the client's software name and version (KIP-511); as in Kafka
(ApiVersionsRequest.isValid), each must match `[a-zA-Z0-9](?:[a-zA-Z0-9\\-.]*[a-zA-Z0-9])?`,
else the answer is INVALID_REQUEST with no API list. An unsupported ApiVersions version
never reaches this handler: the dispatcher answers it with the KIP-511 v0 fallback
(`framing.api_versions_fallback`).
"""
import re
from typing import Callable

from mpbroker.protocol.errors import ErrorCode

SOFTWARE_NAME_VERSION = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


def valid_client_software(req: dict) -> bool:
    return all(SOFTWARE_NAME_VERSION.fullmatch(req.get(k) or "")
               for k in ("client_software_name", "client_software_version"))


def handler(advertised: Callable[[], list[dict]]) -> Callable:
    """The ApiVersions handler, answering `advertised()`: the registry's ranges (the
    registry builds it with its own `advertised_versions`)."""
    def handle(broker, ctx, req):
        if ctx.api_version >= 3 and not valid_client_software(req):
            return {"error_code": ErrorCode.INVALID_REQUEST, "api_keys": [],
                    "throttle_time_ms": 0}
        return {"error_code": ErrorCode.NONE, "api_keys": advertised(), "throttle_time_ms": 0}
    return handle
