"""The client side of SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802, RFC 7677), for the
project's own client (inter-broker requests, the CLI): `ScramClient(mechanism, username,
password)`, then `first()` -> client-first token, `final(server_first)` -> client-final
token, `verify(server_final)` (raises `ScramClientError` unless the server proved it
knows the credential). Tokens travel in SaslAuthenticate's auth_bytes; `exchange(client,
send)` runs the two round trips over `send(token) -> awaitable server token` (the
connection's SaslAuthenticate request, after a SaslHandshake naming `client.mechanism`).
As a `SaslClient` (mpbroker/security/sasl.py, registered for both mechanisms at import:
workers/kafka_client.py drives it), `evaluate(server_first)` is `final`, and
`evaluate(server_final)` is `verify`, after which the client is `complete`.
"""
from __future__ import annotations

import base64
import hmac
import secrets
from typing import Awaitable, Callable, Optional

from mpbroker.security.sasl import register_client
from mpbroker.security.scram import auth_message, username_to_sasl_name
from mpbroker.security.scram_credentials import (MIN_ITERATIONS, client_key, hmac_digest, mechanism,
                                                 salted_password, server_key, stored_key)

__all__ = ["ScramClient", "ScramClientError", "exchange"]

GS2_HEADER = "n,,"


class ScramClientError(Exception):
    pass


class ScramClient:
    def __init__(self, mechanism_name: str, username: str, password: str,
                 nonce: Optional[str] = None):
        self._mech = mechanism(mechanism_name)
        self.mechanism = mechanism_name
        self._password = password
        self._nonce = nonce or secrets.token_urlsafe(24)
        self._bare = f"n={username_to_sasl_name(username)},r={self._nonce}"
        self._server_signature: Optional[bytes] = None
        self.complete = False

    def first(self) -> bytes:
        return (GS2_HEADER + self._bare).encode("utf-8")

    def final(self, server_first: bytes) -> bytes:
        text = server_first.decode("utf-8")
        if text.startswith("e="):
            raise ScramClientError(f"SCRAM server error: {text[2:]}")
        attrs = dict(item.split("=", 1) for item in text.split(",") if "=" in item)
        try:
            nonce, salt, iterations = attrs["r"], base64.b64decode(attrs["s"]), int(attrs["i"])
        except (KeyError, ValueError) as e:
            raise ScramClientError(f"Invalid SCRAM server first message: {e}") from None
        if not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce):
            raise ScramClientError("Invalid server nonce: does not start with client nonce")
        if iterations < MIN_ITERATIONS:
            raise ScramClientError(f"Requested iterations {iterations} is less than the minimum "
                                   f"{MIN_ITERATIONS} for {self.mechanism}")
        m = self._mech
        salted = salted_password(m, self._password, salt, iterations)
        without_proof = f"c={base64.b64encode(GS2_HEADER.encode()).decode()},r={nonce}"
        msg = auth_message(self._bare, text, without_proof)
        ckey = client_key(m, salted)
        signature = hmac_digest(m, stored_key(m, ckey), msg)
        proof = bytes(a ^ b for a, b in zip(ckey, signature))
        self._server_signature = hmac_digest(m, server_key(m, salted), msg)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode("utf-8")

    def verify(self, server_final: bytes) -> None:
        text = server_final.decode("utf-8", "replace")
        if text.startswith("e="):
            raise ScramClientError(f"SCRAM server error: {text[2:]}")
        if not text.startswith("v=") or self._server_signature is None:
            raise ScramClientError("Invalid SCRAM server final message")
        try:
            got = base64.b64decode(text[2:].split(",")[0], validate=True)
        except ValueError:
            raise ScramClientError("Invalid SCRAM server final message") from None
        if not hmac.compare_digest(got, self._server_signature):
            raise ScramClientError("Invalid server signature in server final message")
        self.complete = True

    def evaluate(self, challenge: bytes) -> bytes:
        """The SaslClient step: the client-final token for the server-first message, then
        nothing once the server-final message is verified."""
        if self._server_signature is None:
            return self.final(challenge)
        self.verify(challenge)
        return b""


async def exchange(client: ScramClient, send: Callable[[bytes], Awaitable[bytes]]) -> None:
    """Authenticate: client-first, client-final, then check the server's signature."""
    token = client.first()
    while not client.complete:
        token = client.evaluate(await send(token))


for _name in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
    register_client(_name, lambda username, password, _n=_name: ScramClient(_n, username, password))
