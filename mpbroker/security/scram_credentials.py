"""SCRAM credentials as Kafka forms and stores them (ScramFormatter, ScramCredentialUtils).

RFC 5802 §3, with H = SHA-256 or SHA-512 (RFC 7677)::

    SaltedPassword = Hi(password, salt, iterations)      (PBKDF2-HMAC)
    ClientKey = HMAC(SaltedPassword, "Client Key");  StoredKey = H(ClientKey)
    ServerKey = HMAC(SaltedPassword, "Server Key")

The broker keeps (salt, StoredKey, ServerKey, iterations), never the password. Stored as
Kafka's `ScramCredentialUtils.credentialToString`, base64 standard encoding::

    salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=<n>

(the value of the `SCRAM-SHA-256` / `SCRAM-SHA-512` key in ZooKeeper's
`/config/users/<user>` config map and in the embedded metadata store). Mechanism type
ids are KIP-554's (`ScramMechanism`): 0 unknown, 1 SCRAM-SHA-256, 2 SCRAM-SHA-512.
Iterations: at least 4096 (Kafka's `ScramMechanism.minIterations`), at most 16384 through
AlterUserScramCredentials (Kafka's limit).
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass, field
from typing import Dict, Optional

__all__ = ["ScramMechanism", "MECHANISMS", "BY_TYPE", "ScramCredential", "MIN_ITERATIONS",
           "MAX_ITERATIONS", "DEFAULT_ITERATIONS", "salted_password", "client_key", "stored_key",
           "server_key", "hmac_digest", "credential_from_password", "credential_from_salted",
           "credential_to_string", "credential_from_string", "mechanism", "ScramFormatError"]

MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
DEFAULT_ITERATIONS = 4096


class ScramFormatError(ValueError):
    """A stored credential string or a mechanism name that is not Kafka's."""


@dataclass(frozen=True)
class ScramMechanism:
    name: str           # "SCRAM-SHA-256"
    hash_name: str      # hashlib's name
    type_id: int        # KIP-554's ScramMechanism type
    min_iterations: int = MIN_ITERATIONS

    def digest(self, data: bytes) -> bytes:
        return hashlib.new(self.hash_name, data).digest()


SHA256 = ScramMechanism("SCRAM-SHA-256", "sha256", 1)
SHA512 = ScramMechanism("SCRAM-SHA-512", "sha512", 2)
MECHANISMS: Dict[str, ScramMechanism] = {m.name: m for m in (SHA256, SHA512)}
BY_TYPE: Dict[int, ScramMechanism] = {m.type_id: m for m in (SHA256, SHA512)}


def mechanism(name: str) -> ScramMechanism:
    m = MECHANISMS.get(name)
    if m is None:
        raise ScramFormatError(f"Unsupported SCRAM mechanism {name!r}")
    return m


@dataclass(frozen=True)
class ScramCredential:
    # the keys stay out of repr (a logged metadata never shows them)
    salt: bytes = field(repr=False)
    stored_key: bytes = field(repr=False)
    server_key: bytes = field(repr=False)
    iterations: int


def hmac_digest(m: ScramMechanism, key: bytes, data: bytes) -> bytes:
    return hmac.new(key, data, m.hash_name).digest()


def salted_password(m: ScramMechanism, password: str, salt: bytes, iterations: int) -> bytes:
    """Hi(Normalize(password), salt, i); Kafka does no SASLprep, nor do we."""
    return hashlib.pbkdf2_hmac(m.hash_name, password.encode("utf-8"), salt, iterations)


def client_key(m: ScramMechanism, salted: bytes) -> bytes:
    return hmac_digest(m, salted, b"Client Key")


def stored_key(m: ScramMechanism, ckey: bytes) -> bytes:
    return m.digest(ckey)


def server_key(m: ScramMechanism, salted: bytes) -> bytes:
    return hmac_digest(m, salted, b"Server Key")


def credential_from_salted(m: ScramMechanism, salt: bytes, salted: bytes,
                           iterations: int) -> ScramCredential:
    """What AlterUserScramCredentials stores from an upsertion (salt, salted password)."""
    return ScramCredential(bytes(salt), stored_key(m, client_key(m, salted)),
                           server_key(m, salted), iterations)


def credential_from_password(m: ScramMechanism, password: str,
                             iterations: int = DEFAULT_ITERATIONS,
                             salt: Optional[bytes] = None) -> ScramCredential:
    """Kafka's ScramFormatter.generateCredential (a random salt unless given)."""
    salt = secrets.token_bytes(32) if salt is None else salt
    return credential_from_salted(m, salt, salted_password(m, password, salt, iterations),
                                  iterations)


def credential_to_string(c: ScramCredential) -> str:
    b64 = lambda b: base64.b64encode(b).decode("ascii")  # noqa: E731
    return (f"salt={b64(c.salt)},stored_key={b64(c.stored_key)},"
            f"server_key={b64(c.server_key)},iterations={c.iterations}")


def credential_from_string(s: str) -> ScramCredential:
    """Kafka's ScramCredentialUtils.credentialFromString (each `k=v` split at its first
    '=': base64 values end in '=')."""
    props = {}
    for token in s.split(","):
        key, sep, value = token.partition("=")
        if not sep:
            raise ScramFormatError(f"Invalid credential property {token!r}")
        props[key.strip()] = value.strip()
    try:
        return ScramCredential(base64.b64decode(props["salt"], validate=True),
                               base64.b64decode(props["stored_key"], validate=True),
                               base64.b64decode(props["server_key"], validate=True),
                               int(props["iterations"]))
    except (KeyError, ValueError) as e:
        raise ScramFormatError(f"Invalid SCRAM credential: {type(e).__name__}: {e}") from None
