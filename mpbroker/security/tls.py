"""SSLContexts from Kafka's ssl.* keys (broker listeners and the project's own client).

Server side (`server_context(config)`, `config` a ListenerConfig or any `get(key)`):

* key store: `ssl.keystore.type=PEM` with `ssl.keystore.location` (private key and
  certificate chain in one file) or inline `ssl.keystore.key` +
  `ssl.keystore.certificate.chain`; `ssl.key.password` decrypts the key.
  `ssl.keystore.type=PKCS12` with `ssl.keystore.location` and `ssl.keystore.password`
  (read with `cryptography`). JKS is refused (convert it: keytool -importkeystore
  -deststoretype PKCS12).
* trust store: `ssl.truststore.type=PEM` with `ssl.truststore.location` or inline
  `ssl.truststore.certificates`; PKCS12 with location + password. It verifies client
  certificates.
* `ssl.client.auth` none | requested | required; `ssl.enabled.protocols` (TLSv1.2,
  TLSv1.3: the lowest and highest become the context's bounds); `ssl.cipher.suites`
  (OpenSSL names; empty: OpenSSL's defaults).

Python's SSLContext loads keys from files only: an inline or PKCS12 key is written,
unencrypted, to a 0600 file in a private temporary directory that is removed as soon
as the context has loaded it.

Client side (`client_context(props)`): librdkafka's and Kafka's client keys:
`ssl.ca.location` / `ssl.truststore.location` (+ `.type`, `.password`) /
`ssl.truststore.certificates`, `ssl.certificate.location` + `ssl.key.location`
(+ `ssl.key.password`) or `ssl.keystore.location`, and
`ssl.endpoint.identification.algorithm` (https, Kafka's default: check the host name;
empty or none: do not).

Every problem is a `TlsConfigError` with one line naming the key (never a password).
"""
from __future__ import annotations

import os
import shutil
import ssl
import tempfile
from typing import List, Optional

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12

from mpbroker.security.principal import dn_of_der

CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL,
               "required": ssl.CERT_REQUIRED}
PROTOCOLS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3,
             "TLSv1.1": ssl.TLSVersion.TLSv1_1, "TLSv1": ssl.TLSVersion.TLSv1}


class TlsConfigError(ValueError):
    pass


def _list(value) -> List[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [s.strip() for s in value.split(",") if s.strip()]
    return [str(s).strip() for s in value if str(s).strip()]


def _read(path: str, key: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise TlsConfigError(f"{key}={path}: cannot read: {e.strerror or e}") from None


def _pem_key_and_chain(key_pem: bytes, chain_pem: bytes, password: Optional[str]) -> bytes:
    """One unencrypted PEM of key + chain (the key decrypted with `password`)."""
    try:
        key = serialization.load_pem_private_key(key_pem, password.encode() if password else None)
    except (TypeError, ValueError) as e:
        raise TlsConfigError(f"ssl.keystore: cannot load the private key (wrong ssl.key.password?): "
                             f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()) + chain_pem


def _pkcs12(path: str, password: Optional[str], key: str):
    data = _read(path, key)
    try:
        return pkcs12.load_key_and_certificates(data, password.encode() if password else None)
    except (TypeError, ValueError) as e:
        raise TlsConfigError(f"{key}={path}: cannot open the PKCS12 store (wrong password?): "
                             f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from None


def _certs_pem(certs) -> bytes:
    return b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certs if c is not None)


def _load_chain(ctx: ssl.SSLContext, pem: bytes) -> None:
    tmp = tempfile.mkdtemp(prefix="mpbroker-tls-")
    try:
        path = os.path.join(tmp, "keystore.pem")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(pem)
        ctx.load_cert_chain(path)
    except ssl.SSLError as e:
        raise TlsConfigError(f"ssl.keystore: the key does not load or match its certificate: "
                             f"{e.reason or e}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def load_keystore(ctx: ssl.SSLContext, get, required: bool) -> bool:
    """Load the key store named by Kafka's keys (`get(key)`); False when there is none."""
    kind = str(get("ssl.keystore.type") or "PEM").upper()
    location = get("ssl.keystore.location")
    key_pem, chain_pem = get("ssl.keystore.key"), get("ssl.keystore.certificate.chain")
    key_password = get("ssl.key.password")
    if not location and not key_pem:
        if required:
            raise TlsConfigError("ssl.keystore.location (or ssl.keystore.key and "
                                 "ssl.keystore.certificate.chain) must be set for a TLS listener")
        return False
    if kind == "PEM":
        if key_pem:
            if not chain_pem:
                raise TlsConfigError("ssl.keystore.certificate.chain must be set with ssl.keystore.key")
            pem = _pem_key_and_chain(str(key_pem).encode(), str(chain_pem).encode(), key_password)
        else:
            data = _read(location, "ssl.keystore.location")
            pem = _pem_key_and_chain(data, _only_certs(data), key_password)
        _load_chain(ctx, pem)
    elif kind == "PKCS12":
        if not location:
            raise TlsConfigError("ssl.keystore.location must be set for ssl.keystore.type=PKCS12")
        pw = get("ssl.keystore.password")
        key, cert, extra = _pkcs12(location, pw, "ssl.keystore.location")
        if key is None or cert is None:
            raise TlsConfigError(f"ssl.keystore.location={location}: no private key and certificate in it")
        pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()) + _certs_pem([cert, *extra])
        _load_chain(ctx, pem)
    else:
        raise TlsConfigError(f"ssl.keystore.type={kind}: not supported (PEM or PKCS12; convert a "
                             "JKS store with keytool -importkeystore -deststoretype PKCS12)")
    return True


def _only_certs(pem: bytes) -> bytes:
    out, start = [], 0
    begin, end = b"-----BEGIN CERTIFICATE-----", b"-----END CERTIFICATE-----"
    while True:
        i = pem.find(begin, start)
        if i < 0:
            break
        j = pem.index(end, i) + len(end)
        out.append(pem[i:j] + b"\n")
        start = j
    if not out:
        raise TlsConfigError("ssl.keystore: no certificate in the key store")
    return b"".join(out)


def load_truststore(ctx: ssl.SSLContext, get, ca_key: str = "ssl.truststore.location") -> bool:
    kind = str(get("ssl.truststore.type") or "PEM").upper()
    location = get(ca_key) or get("ssl.truststore.location")
    inline = get("ssl.truststore.certificates")
    if not location and not inline:
        return False
    try:
        if kind == "PEM" or ca_key == "ssl.ca.location" and get(ca_key):
            if inline:
                ctx.load_verify_locations(cadata=str(inline))
            else:
                _read(location, ca_key)
                ctx.load_verify_locations(cafile=location)
        elif kind == "PKCS12":
            _, cert, extra = _pkcs12(location, get("ssl.truststore.password"), "ssl.truststore.location")
            ctx.load_verify_locations(cadata=_certs_pem([cert, *extra]).decode())
        else:
            raise TlsConfigError(f"ssl.truststore.type={kind}: not supported (PEM or PKCS12)")
    except ssl.SSLError as e:
        raise TlsConfigError(f"{ca_key}: no usable certificate: {e.reason or e}") from None
    return True


def _protocols(ctx: ssl.SSLContext, get) -> None:
    wanted = _list(get("ssl.enabled.protocols")) or ["TLSv1.2", "TLSv1.3"]
    versions = []
    for p in wanted:
        if p not in PROTOCOLS:
            raise TlsConfigError(f"ssl.enabled.protocols: unknown protocol {p}")
        versions.append(PROTOCOLS[p])
    ctx.minimum_version = min(versions)
    ctx.maximum_version = max(versions)
    ciphers = _list(get("ssl.cipher.suites"))
    if ciphers:
        try:
            ctx.set_ciphers(":".join(ciphers))
        except ssl.SSLError:
            raise TlsConfigError(f"ssl.cipher.suites: no usable cipher in {','.join(ciphers)}") from None


def server_context(config) -> ssl.SSLContext:
    """The SSLContext of a TLS listener (`config`: its ListenerConfig)."""
    get = config.get
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _protocols(ctx, get)
    load_keystore(ctx, get, required=True)
    auth = str(get("ssl.client.auth") or "none").lower()
    if auth not in CLIENT_AUTH:
        raise TlsConfigError(f"ssl.client.auth={auth}: must be one of none, requested, required")
    has_trust = load_truststore(ctx, get)
    if auth != "none" and not has_trust:
        raise TlsConfigError(f"ssl.client.auth={auth} needs a trust store "
                             "(ssl.truststore.location or ssl.truststore.certificates)")
    ctx.verify_mode = CLIENT_AUTH[auth]
    return ctx


def client_context(props) -> ssl.SSLContext:
    """A client's SSLContext from its properties (`props`: a dict or any `get(key)`)."""
    get = props.get
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _protocols(ctx, get)
    if not load_truststore(ctx, get, "ssl.ca.location"):
        ctx.load_default_certs()
    cert, key = get("ssl.certificate.location"), get("ssl.key.location")
    if cert:
        chain = _only_certs(_read(cert, "ssl.certificate.location"))
        _load_chain(ctx, _pem_key_and_chain(_read(key or cert, "ssl.key.location"), chain,
                                            get("ssl.key.password")))
    else:
        load_keystore(ctx, get, required=False)
    algo = get("ssl.endpoint.identification.algorithm")
    algo = "https" if algo is None else str(algo).lower()
    ctx.check_hostname = algo == "https"
    return ctx


def subject_dn(ssl_object) -> Optional[str]:
    """The RFC 2253 DN of the peer's verified certificate, or None."""
    der = ssl_object.getpeercert(binary_form=True)
    if not der:
        return None
    return dn_of_der(der)
