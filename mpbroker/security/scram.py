"""The SCRAM-SHA-256 / SCRAM-SHA-512 SASL server (RFC 5802, RFC 7677) as Kafka's
ScramSaslServer does it; registered in `sasl.MECHANISMS` under both names.

The exchange, one SaslAuthenticate token each way::

    client-first  n,[a=<authzid>],n=<saslname>,r=<cnonce>[,<ext>=<value>...]
    server-first  r=<cnonce><snonce>,s=<b64 salt>,i=<iterations>
    client-final  c=<b64 gs2 header: "biws" for "n,,">,r=<cnonce><snonce>[,ext...],p=<b64 proof>
    server-final  v=<b64 ServerSignature>

Only the gs2 flag `n` (no channel binding) is accepted, as in Kafka. An authzid must be
the user name. `tokenauth=true` (delegation tokens) is refused: mpbroker has none. The
user name's `=2C` / `=3D` are unescaped (ScramFormatter.username). The proof is checked
with a constant-time compare of H(ClientProof xor ClientSignature) with StoredKey.

Failures raise `ScramAuthenticationError` (a SaslAuthenticationError): its message is
the one Kafka gives the client (an unknown user and a wrong password read the same) and
`server_error` the RFC 5802 `e=` value. Nothing secret is ever in a message.
"""
from __future__ import annotations

import base64
import binascii
import hmac
import re
import secrets
from typing import Callable, Dict, Optional

from mpbroker.security.sasl import SaslAuthenticationError, register
from mpbroker.security.scram_credentials import (MECHANISMS as SCRAM_MECHANISMS, ScramCredential,
                                                 ScramMechanism, hmac_digest, mechanism)

__all__ = ["ScramSaslServer", "ScramAuthenticationError", "parse_client_first",
           "parse_client_final", "sasl_name_to_username", "username_to_sasl_name",
           "auth_message", "INVALID_CREDENTIALS"]

# Kafka's ScramMessages patterns (java regex [\x01-\x7F&&[^=,]] etc. spelled out)
_SASLNAME = r"(?:[\x01-\x2B\x2D-\x3C\x3E-\x7F]|=2C|=3D)+"
_PRINTABLE = r"[\x21-\x2B\x2D-\x7E]+"
_VALUE_SAFE = r"[\x01-\x2B\x2D-\x3C\x3E-\x7F]+"
_EXTENSIONS = rf"(?:,[A-Za-z]+={_VALUE_SAFE})*"
_BASE64 = r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?"
_CLIENT_FIRST = re.compile(
    rf"n,(?:a=(?P<authzid>{_SASLNAME}))?,(?P<bare>n=(?P<saslname>{_SASLNAME}),"
    rf"r=(?P<nonce>{_PRINTABLE})(?P<extensions>{_EXTENSIONS}))\Z", re.S)
_CLIENT_FINAL = re.compile(
    rf"(?P<without_proof>c=(?P<channel>{_BASE64}),r=(?P<nonce>{_PRINTABLE}){_EXTENSIONS}),"
    rf"p=(?P<proof>{_BASE64})\Z", re.S)

INVALID_CREDENTIALS = ("Authentication failed during authentication due to invalid credentials "
                       "with SASL mechanism {mechanism}")


class ScramAuthenticationError(SaslAuthenticationError):
    def __init__(self, message: str, server_error: str = "other-error"):
        super().__init__(message)
        self.server_error = server_error


def sasl_name_to_username(sasl_name: str) -> str:
    """ScramFormatter.username: `=2C` -> ',', `=3D` -> '='; any other '=' is invalid."""
    username = sasl_name.replace("=2C", ",").replace("=3D", "=")
    if "=" in sasl_name.replace("=2C", "").replace("=3D", ""):
        raise ValueError("Invalid username: " + sasl_name)
    return username


def username_to_sasl_name(username: str) -> str:
    return username.replace("=", "=3D").replace(",", "=2C")


def _extensions(text: str) -> Dict[str, str]:
    out = {}
    for item in filter(None, text.split(",")):
        k, _, v = item.partition("=")
        out[k] = v
    return out


def parse_client_first(token: bytes) -> dict:
    """-> {authzid, bare, saslname, nonce, extensions: dict, gs2_header}; ValueError if malformed."""
    text = token.decode("utf-8")
    m = _CLIENT_FIRST.match(text)
    if m is None:
        raise ValueError("Invalid SCRAM client first message format")
    return {"authzid": m["authzid"] or "", "bare": m["bare"], "saslname": m["saslname"],
            "nonce": m["nonce"], "extensions": _extensions(m["extensions"]),
            "gs2_header": text[:len(text) - len(m["bare"])]}


def parse_client_final(token: bytes) -> dict:
    """-> {channel: bytes, nonce, proof: bytes, without_proof}; ValueError if malformed."""
    text = token.decode("utf-8")
    m = _CLIENT_FINAL.match(text)
    if m is None:
        raise ValueError("Invalid SCRAM client final message format")
    return {"channel": base64.b64decode(m["channel"]), "nonce": m["nonce"],
            "proof": base64.b64decode(m["proof"]), "without_proof": m["without_proof"]}


def auth_message(client_first_bare: str, server_first: str, client_final_without_proof: str) -> bytes:
    return f"{client_first_bare},{server_first},{client_final_without_proof}".encode("utf-8")


class ScramSaslServer:
    """One SCRAM exchange on one connection (`evaluate` twice, then `complete`)."""

    def __init__(self, mech: ScramMechanism,
                 credentials: Callable[[str, str], Optional[ScramCredential]],
                 nonce: Callable[[], str] = lambda: secrets.token_urlsafe(24)):
        self.mechanism = mech.name
        self._mech = mech
        self._credentials = credentials
        self._nonce = nonce
        self.complete = False
        self.authorization_id = ""
        self._state = "first"
        self._first: dict = {}
        self._server_first = ""
        self._credential: Optional[ScramCredential] = None

    def _invalid(self, server_error: str = "invalid-proof") -> ScramAuthenticationError:
        return ScramAuthenticationError(INVALID_CREDENTIALS.format(mechanism=self.mechanism),
                                        server_error)

    def evaluate(self, token: bytes) -> bytes:
        try:
            if self._state == "first":
                return self._client_first(token)
            if self._state == "final":
                return self._client_final(token)
        except ScramAuthenticationError:
            self._state = "failed"
            raise
        except (ValueError, UnicodeDecodeError, binascii.Error) as e:
            self._state = "failed"
            raise ScramAuthenticationError(f"Authentication failed: {e}", "invalid-encoding") from None
        raise ScramAuthenticationError("Authentication failed: unexpected SCRAM message in state "
                                       f"{self._state}", "other-error")

    def _client_first(self, token: bytes) -> bytes:
        first = parse_client_first(token)
        username = sasl_name_to_username(first["saslname"])
        if first["extensions"].get("tokenauth", "").lower() == "true":
            raise ScramAuthenticationError(
                "Authentication failed: delegation tokens (tokenauth) are not supported",
                "extensions-not-supported")
        credential = self._credentials(username, self.mechanism)
        if credential is None:
            raise self._invalid("unknown-user")
        authzid = sasl_name_to_username(first["authzid"]) if first["authzid"] else ""
        if authzid and authzid != username:
            raise ScramAuthenticationError(
                "Authentication failed: Client requested an authorization id that is different "
                "from username", "invalid-username-encoding")
        if credential.iterations < self._mech.min_iterations:
            raise self._invalid("other-error")
        self._first, self._credential = first, credential
        self.authorization_id = username
        salt = base64.b64encode(credential.salt).decode("ascii")
        self._server_first = f"r={first['nonce']}{self._nonce()},s={salt},i={credential.iterations}"
        self._state = "final"
        return self._server_first.encode("utf-8")

    def _client_final(self, token: bytes) -> bytes:
        final = parse_client_final(token)
        # RFC 5802: the client echoes the server's nonce (its own + the server's). librdkafka
        # before 2.6.1 (Debian 12's kcat: 2.0.2) prepends its own nonce once more; Kafka
        # (since 3.8.1) accepts a final nonce that ends with the server's, and so
        # do we: the server's part, which the replay protection needs, is still checked.
        if not final["nonce"].endswith(self._server_first[2:self._server_first.index(",")]):
            raise ScramAuthenticationError("Invalid client nonce in the final client message.",
                                           "other-error")
        if final["channel"] != self._first["gs2_header"].encode("utf-8"):
            raise ScramAuthenticationError("Authentication failed: channel binding mismatch",
                                           "channel-bindings-dont-match")
        cred, mech = self._credential, self._mech
        msg = auth_message(self._first["bare"], self._server_first, final["without_proof"])
        signature = hmac_digest(mech, cred.stored_key, msg)
        if len(final["proof"]) != len(signature):
            raise self._invalid()
        client_key = bytes(a ^ b for a, b in zip(final["proof"], signature))
        if not hmac.compare_digest(mech.digest(client_key), cred.stored_key):
            raise self._invalid()
        server_signature = hmac_digest(mech, cred.server_key, msg)
        self._credential = None
        self._state = "complete"
        self.complete = True
        return b"v=" + base64.b64encode(server_signature)


def _factory(name: str):
    mech = mechanism(name)

    def factory(listener_name=None, config=None, credentials=None, **_):
        lookup = credentials if credentials is not None else (lambda user, m: None)
        return ScramSaslServer(mech, lookup)
    return factory


for _name in SCRAM_MECHANISMS:
    register(_name, _factory(_name))
del _name
