"""The SASL mechanism registry and the server-side mechanism interface.

Each mechanism module calls `register(name, factory)` at import; a connection that
completes the SaslHandshake for `name` makes its server with
`MECHANISMS[name](listener_name=..., config=..., credentials=...)`, where
`credentials(user, mechanism)` returns the stored SCRAM credential or None. The
server's `evaluate(token)` answers each SaslAuthenticate token with the next
challenge and raises `SaslAuthenticationError(message)` on failure (the message is
what the client is told: never a secret).
"""
from __future__ import annotations

from typing import Callable, Dict, Protocol

__all__ = ["SaslServer", "SaslAuthenticationError", "MECHANISMS", "register"]


class SaslAuthenticationError(Exception):
    """Authentication failed: SASL_AUTHENTICATION_FAILED with this message."""


class SaslServer(Protocol):
    mechanism: str
    complete: bool                  # True once authenticated
    authorization_id: str           # the user name once complete

    def evaluate(self, token: bytes) -> bytes: ...


MECHANISMS: Dict[str, Callable[..., SaslServer]] = {}


def register(name: str, factory: Callable[..., SaslServer]) -> None:
    MECHANISMS[name] = factory
