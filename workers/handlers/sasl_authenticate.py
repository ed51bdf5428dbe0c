"""SaslAuthenticate (key 36), v0-v2 (KIP-152; v1+ session_lifetime_ms, KIP-368). Runs
on the front with the connection's SASL session (mpbroker/security/sasl.py). A failed
authentication is answered SASL_AUTHENTICATION_FAILED with the mechanism's message
(never a secret), logged once at INFO, after `connection.failed.authentication.delay.ms`,
and the connection then closes (workers/connection.py).
"""
import asyncio
import logging

from mpbroker.protocol.errors import ErrorCode
from mpbroker.security.sasl import SaslAuthenticationError

log = logging.getLogger(__name__)


def _answer(code: int, message, auth_bytes: bytes = b"", lifetime_ms: int = 0) -> dict:
    return {"error_code": code, "error_message": message, "auth_bytes": auth_bytes,
            "session_lifetime_ms": lifetime_ms}


async def _delayed(body: dict, delay_s: float) -> dict:
    await asyncio.sleep(delay_s)
    return body


def handle(broker, ctx, req):
    conn = ctx.connection
    session = getattr(conn, "sasl", None)
    if session is None:
        return _answer(ErrorCode.ILLEGAL_SASL_STATE, "SaslAuthenticate on a listener without SASL")
    try:
        challenge = session.authenticate(req["auth_bytes"])
    except SaslAuthenticationError as e:
        log.info("Failed authentication with %s (%s)", ctx.client_host, e)
        body = _answer(ErrorCode.SASL_AUTHENTICATION_FAILED, str(e))
        delay = conn.security.failure_delay_s if conn.security is not None else 0
        return _delayed(body, delay) if delay > 0 else body
    return _answer(ErrorCode.NONE, None, challenge, session.session_lifetime_ms())
