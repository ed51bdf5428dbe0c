"""SASL/PLAIN (RFC 4616) on the broker, as Kafka's PlainServerCallbackHandler: the
client sends one token `[authzid] NUL authcid NUL passwd`; the users are the
`user_<name>="<password>"` options of the listener's PlainLoginModule JAAS entry
(`listener.name.<listener>.plain.sasl.jaas.config`, else `sasl.jaas.config`).
Passwords are compared in constant time; neither they nor the token are logged or
put into an error message.
"""
from __future__ import annotations

import hmac
from typing import Dict

from mpbroker.security import jaas
from mpbroker.security.sasl import (SaslAuthenticationError, SaslConfigError, register,
                                    register_client)

MECHANISM = "PLAIN"
LOGIN_MODULE = "PlainLoginModule"


def users_from_jaas(text: str) -> Dict[str, str]:
    entry = jaas.login_module(text, LOGIN_MODULE)
    return {k[len("user_"):]: v for k, v in entry.options.items() if k.startswith("user_")}


class PlainServer:
    mechanism = MECHANISM

    def __init__(self, users: Dict[str, str]):
        self.users = users
        self.complete = False
        self.authorization_id = ""

    def evaluate(self, token: bytes) -> bytes:
        if self.complete:
            raise SaslAuthenticationError("Authentication failed: PLAIN exchange already complete")
        parts = bytes(token).split(b"\x00")
        if len(parts) != 3:
            raise SaslAuthenticationError("Invalid SASL/PLAIN response: expected 3 tokens, got "
                                          f"{len(parts)}")
        try:
            authzid, user, password = (p.decode("utf-8") for p in parts)
        except UnicodeDecodeError:
            raise SaslAuthenticationError("Invalid SASL/PLAIN response: not UTF-8") from None
        if not user:
            raise SaslAuthenticationError("Authentication failed: username not specified")
        if not password:
            raise SaslAuthenticationError("Authentication failed: password not specified")
        expected = self.users.get(user)
        # compare against something even for an unknown user (no timing hint)
        ok = hmac.compare_digest(password.encode(), (expected if expected is not None
                                                     else "\x00" + password).encode())
        if expected is None or not ok:
            raise SaslAuthenticationError("Authentication failed: Invalid username or password")
        if authzid and authzid != user:
            raise SaslAuthenticationError("Authentication failed: Client requested an "
                                          "authorization id that is different from username")
        self.authorization_id = user
        self.complete = True
        return b""


def factory(*, listener_name: str, config, credentials=None) -> PlainServer:
    text = config.jaas(MECHANISM)
    if not text:
        raise SaslConfigError(f"listener {listener_name}: SASL/PLAIN needs "
                              f"listener.name.{listener_name.lower()}.plain.sasl.jaas.config "
                              "(or sasl.jaas.config) with a PlainLoginModule entry")
    try:
        return PlainServer(users_from_jaas(text))
    except jaas.JaasError as e:
        raise SaslConfigError(f"listener {listener_name}: {e}") from None


def client_token(username: str, password: str, authzid: str = "") -> bytes:
    """The client's PLAIN token."""
    return b"\x00".join(s.encode() for s in (authzid, username, password))


class PlainClient:
    """The client steps (mpbroker/security/sasl.py SaslClient): one token, no challenge."""
    mechanism = MECHANISM

    def __init__(self, username: str, password: str):
        self.username, self.password = username, password
        self.complete = False

    def first(self) -> bytes:
        return client_token(self.username, self.password)

    def evaluate(self, challenge: bytes) -> bytes:
        self.complete = True
        return b""


register(MECHANISM, factory)
register_client(MECHANISM, PlainClient)
