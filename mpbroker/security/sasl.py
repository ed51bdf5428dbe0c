"""SASL on a broker connection (KIP-43 SaslHandshake, KIP-152 SaslAuthenticate,
KIP-368 re-authentication): the mechanism registry, the server interface mechanisms
implement, and the per-connection state machine (`SaslSession`, pure: the connection
in workers/ drives it and owns the socket).

Registry: `MECHANISMS[name] = factory`; each mechanism module calls `register` at import
(plain.py; scram.py), and `mpbroker/security/__init__.py` imports them. A factory is
called as `factory(listener_name=..., config=..., credentials=...)`: `config` is the
listener's view of the broker config (`ListenerConfig`: `get(key)` with the
`listener.name.<l>.` overrides, `jaas(mechanism)`), `credentials(user, mechanism)` the
stored SCRAM credential or None. It returns a `SaslServer`, or raises
`SaslConfigError` when the listener's config does not allow the mechanism (a broker
start refuses that with exit 2).

States of a connection on a SASL listener (Kafka's SaslServerAuthenticator):

    HANDSHAKE   only ApiVersions and SaslHandshake are served
    AUTHENTICATE (after a v1 handshake) SaslAuthenticate frames carry the tokens
    RAW_TOKEN   (after a v0 handshake) the next frames are bare tokens (length-prefixed,
                no request header), answered as bare length-prefixed challenges
    COMPLETE    every API; with `connections.max.reauth.ms` the session ends at
                `expires_at` and then only SaslHandshake (re-authentication) is served
    FAILED      the connection is closed (after `connection.failed.authentication.delay.ms`)

Any other request before COMPLETE closes the connection. Tokens above
`sasl.server.max.receive.size` close it too. Nothing here logs a token.
"""
from __future__ import annotations

from typing import Callable, Dict, List, Optional, Protocol

from mpbroker.protocol import api_keys
from mpbroker.protocol.errors import ErrorCode

HANDSHAKE, AUTHENTICATE, RAW_TOKEN, COMPLETE, FAILED = (
    "HANDSHAKE", "AUTHENTICATE", "RAW_TOKEN", "COMPLETE", "FAILED")
PRE_AUTH_APIS = frozenset({api_keys.API_VERSIONS, api_keys.SASL_HANDSHAKE,
                           api_keys.SASL_AUTHENTICATE})


class SaslAuthenticationError(Exception):
    """A failed authentication; its message goes to the client (never a secret)."""


class SaslConfigError(ValueError):
    """A mechanism cannot be served with the listener's config (missing JAAS entry...)."""


class SaslServer(Protocol):
    mechanism: str
    complete: bool
    authorization_id: str

    def evaluate(self, token: bytes) -> bytes: ...


MECHANISMS: Dict[str, Callable[..., SaslServer]] = {}


def register(name: str, factory: Callable[..., SaslServer]) -> None:
    MECHANISMS[name] = factory


def enabled_mechanisms(config) -> List[str]:
    """The listener's `sasl.enabled.mechanisms` (upper case, config order)."""
    raw = config.get("sasl.enabled.mechanisms")
    items = raw.split(",") if isinstance(raw, str) else list(raw or [])
    return [m.strip().upper() for m in items if m and m.strip()]


class SaslSession:
    """One connection's authentication state (see the module docstring)."""

    def __init__(self, listener_name: str, config, mechanisms: List[str],
                 credentials: Callable[[str, str], object] | None = None,
                 max_receive_size: int = 524288, reauth_ms: int = 0,
                 clock: Callable[[], float] | None = None):
        self.listener_name = listener_name
        self.config = config
        self.mechanisms = mechanisms
        self.credentials = credentials or (lambda user, mechanism: None)
        self.max_receive_size = max_receive_size
        self.reauth_ms = reauth_ms
        self.clock = clock
        self.state = HANDSHAKE
        self.server: Optional[SaslServer] = None
        self.principal: Optional[str] = None      # "User:<name>" once COMPLETE
        self.expires_at: Optional[float] = None   # clock seconds (reauth)
        self.reauthenticating = False

    # --------------------------------------------------------------- gating
    def allows(self, api_key: int) -> bool:
        """Whether a request of `api_key` may be served in the current state."""
        if self.state == COMPLETE:
            if self.expired():
                return api_key == api_keys.SASL_HANDSHAKE
            return True
        if self.state == HANDSHAKE:
            return api_key in (api_keys.API_VERSIONS, api_keys.SASL_HANDSHAKE)
        if self.state == AUTHENTICATE:
            return api_key == api_keys.SASL_AUTHENTICATE
        return False

    def expired(self) -> bool:
        return (self.expires_at is not None and self.clock is not None
                and self.clock() >= self.expires_at)

    @property
    def raw_token_expected(self) -> bool:
        return self.state == RAW_TOKEN

    # --------------------------------------------------------------- steps
    def handshake(self, version: int, mechanism: str) -> int:
        """SaslHandshake: the error code to answer (with `self.mechanisms`)."""
        if self.state == COMPLETE:
            self.reauthenticating = True
        elif self.state != HANDSHAKE:
            self.state = FAILED
            return ErrorCode.ILLEGAL_SASL_STATE
        if mechanism not in self.mechanisms or mechanism not in MECHANISMS:
            self.state = FAILED
            return ErrorCode.UNSUPPORTED_SASL_MECHANISM
        if self.reauthenticating and self.server is not None \
                and mechanism != self.server.mechanism:
            self.state = FAILED       # KIP-368: re-authenticate with the same mechanism
            return ErrorCode.UNSUPPORTED_SASL_MECHANISM
        self._previous = self.principal
        self.server = MECHANISMS[mechanism](listener_name=self.listener_name,
                                            config=self.config, credentials=self.credentials)
        self.state = AUTHENTICATE if version >= 1 else RAW_TOKEN
        return ErrorCode.NONE

    def authenticate(self, token: bytes) -> bytes:
        """One token (SaslAuthenticate or a v0 raw frame): the challenge to send back.
        Raises SaslAuthenticationError (the state is then FAILED)."""
        if self.state not in (AUTHENTICATE, RAW_TOKEN) or self.server is None:
            self.state = FAILED
            raise SaslAuthenticationError("Unexpected SASL token in state " + self.state)
        try:
            challenge = self.server.evaluate(bytes(token))
        except SaslAuthenticationError:
            self.state = FAILED
            raise
        except Exception as e:        # a malformed token a mechanism did not foresee
            self.state = FAILED
            raise SaslAuthenticationError(
                f"Authentication failed during authentication due to invalid credentials "
                f"with SASL mechanism {self.server.mechanism}") from e
        if self.server.complete:
            principal = "User:" + self.server.authorization_id
            if self.reauthenticating and principal != self._previous:
                self.state = FAILED
                raise SaslAuthenticationError(
                    "Cannot change principals during re-authentication")
            self.principal = principal
            self.state = COMPLETE
            self.reauthenticating = False
            if self.reauth_ms > 0 and self.clock is not None:
                self.expires_at = self.clock() + self.reauth_ms / 1000
        return challenge

    def session_lifetime_ms(self) -> int:
        return self.reauth_ms if self.state == COMPLETE and self.reauth_ms > 0 else 0


# ---------------------------------------------------------------- client side
class SaslClient(Protocol):
    """A mechanism's client steps (workers/kafka_client.py drives them):
    `first()` the initial token, `evaluate(challenge)` the next one; `complete` once
    the server's last message is accepted."""
    mechanism: str
    complete: bool

    def first(self) -> bytes: ...

    def evaluate(self, challenge: bytes) -> bytes: ...


CLIENT_MECHANISMS: Dict[str, Callable[[str, str], SaslClient]] = {}


def register_client(name: str, factory: Callable[[str, str], SaslClient]) -> None:
    """`factory(username, password)`: a SaslClient (plain.py; scram.py)."""
    CLIENT_MECHANISMS[name] = factory
