"""Test certificates made with `cryptography` (issue #17): a CA, a server certificate
for 127.0.0.1/localhost (PEM with an encrypted key, and PKCS12), client certificates
signed by the CA (alice), by an untrusted CA (mallory), and an expired one."""
from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import NameOID

KEY_PASSWORD = "key-pass"
STORE_PASSWORD = "store-pass"


def _name(cn: str, ou: str = "eng") -> x509.Name:
    """Encoded O, OU, CN: its RFC 2253 form (Java's and ours) is CN=..,OU=..,O=acme."""
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "acme"),
                      x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, ou),
                      x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _cert(subject, key, issuer, issuer_key, *, ca=False, san=None, days=(-1, 365)):
    now = datetime.datetime.now(datetime.timezone.utc)
    b = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer)
         .public_key(key.public_key()).serial_number(x509.random_serial_number())
         .not_valid_before(now + datetime.timedelta(days=days[0]))
         .not_valid_after(now + datetime.timedelta(days=days[1]))
         .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if san:
        b = b.add_extension(x509.SubjectAlternativeName(san), critical=False)
    return b.sign(issuer_key, hashes.SHA256())


def _pem(cert) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key_pem(key, password: str | None = None) -> bytes:
    enc = (serialization.BestAvailableEncryption(password.encode()) if password
           else serialization.NoEncryption())
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, enc)


class Certs:
    """PEM files under `dir`: ca.pem, server.pem (key + chain, key encrypted with
    KEY_PASSWORD), server.p12 (password "store-pass"), <who>.crt/<who>.key for
    alice (CA-signed), mallory (signed by an untrusted CA), expired (CA-signed,
    expired)."""

    def __init__(self, d: Path):
        self.dir = d
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca = _cert(_name("test-ca", "ca"), ca_key, _name("test-ca", "ca"), ca_key, ca=True)
        self.ca = self._write("ca.pem", _pem(ca))
        skey = ec.generate_private_key(ec.SECP256R1())
        scert = _cert(_name("broker", "servers"), skey, ca.subject, ca_key, san=[
            x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
        self.server = self._write("server.pem", _key_pem(skey, KEY_PASSWORD) + _pem(scert) + _pem(ca))
        self.server_p12 = self._write("server.p12", pkcs12.serialize_key_and_certificates(
            b"broker", skey, scert, [ca], serialization.BestAvailableEncryption(STORE_PASSWORD.encode())))
        bad_ca_key = ec.generate_private_key(ec.SECP256R1())
        bad_ca = _cert(_name("evil-ca", "ca"), bad_ca_key, _name("evil-ca", "ca"), bad_ca_key, ca=True)
        for who, issuer, issuer_key, days in (("alice", ca, ca_key, (-1, 365)),
                                              ("mallory", bad_ca, bad_ca_key, (-1, 365)),
                                              ("expired", ca, ca_key, (-30, -1))):
            key = ec.generate_private_key(ec.SECP256R1())
            cert = _cert(_name(who.capitalize()), key, issuer.subject, issuer_key, days=days)
            self._write(f"{who}.crt", _pem(cert))
            self._write(f"{who}.key", _key_pem(key))

    def _write(self, name: str, data: bytes) -> str:
        path = self.dir / name
        path.write_bytes(data)
        return str(path)

    def crt(self, who: str) -> str:
        return str(self.dir / f"{who}.crt")

    def key(self, who: str) -> str:
        return str(self.dir / f"{who}.key")
