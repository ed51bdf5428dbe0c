"""SaslHandshake (key 17), v0-v1 (KIP-43). Runs on the front: it drives the
connection's SASL session (mpbroker/security/sasl.py). v1: the tokens follow in
SaslAuthenticate requests; v0: as bare frames (workers/connection.py `_raw_token`).
An unknown or disabled mechanism gets UNSUPPORTED_SASL_MECHANISM with the enabled
list, and the connection closes after the answer; on a listener without SASL, or out
of turn, ILLEGAL_SASL_STATE.
"""
import logging

from mpbroker.protocol.errors import ErrorCode

log = logging.getLogger(__name__)


def handle(broker, ctx, req):
    session = getattr(ctx.connection, "sasl", None)
    if session is None:
        return {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "mechanisms": []}
    code = session.handshake(ctx.api_version, req["mechanism"])
    if code != ErrorCode.NONE:
        log.info("Failed authentication with %s (%s for SASL mechanism %.64r)",
                 getattr(ctx, "client_host", "?"), ErrorCode(code).name, req["mechanism"])
    return {"error_code": code, "mechanisms": list(session.mechanisms)}
