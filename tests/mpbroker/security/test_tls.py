import ssl

import pytest

from mpbroker.security import tls
from mpbroker.security.listener_config import ListenerConfig
from tests.security.certs import KEY_PASSWORD, STORE_PASSWORD


def pem_keystore(certs, **extra):
    return {"ssl.keystore.type": "PEM", "ssl.keystore.location": certs.server,
            "ssl.key.password": KEY_PASSWORD, **extra}


def handshake(server_ctx, client_ctx):
    """Run both ends through memory BIOs; the server's SSLObject once done."""
    s_in, s_out, c_in, c_out = (ssl.MemoryBIO() for _ in range(4))
    server = server_ctx.wrap_bio(s_in, s_out, server_side=True)
    client = client_ctx.wrap_bio(c_in, c_out, server_hostname="127.0.0.1")
    done = {"s": False, "c": False}
    for _ in range(20):
        for name, obj in (("c", client), ("s", server)):
            if not done[name]:
                try:
                    obj.do_handshake()
                    done[name] = True
                except ssl.SSLWantReadError:
                    pass
        s_in.write(c_out.read())
        c_in.write(s_out.read())
        if all(done.values()):
            client.write(b"x")          # TLS 1.3: the server sees client cert verdicts late
            s_in.write(c_out.read())
            assert server.read(1) == b"x"
            return server
    raise AssertionError("no handshake")


def client(certs, who=None):
    props = {"ssl.ca.location": certs.ca}
    if who:
        props.update({"ssl.certificate.location": certs.crt(who), "ssl.key.location": certs.key(who)})
    return tls.client_context(props)


def test_pem_keystore_file_with_an_encrypted_key_serves_and_requested_auth_sees_the_dn(certs):
    ctx = tls.server_context(pem_keystore(certs, **{"ssl.truststore.type": "PEM",
                                                    "ssl.truststore.location": certs.ca,
                                                    "ssl.client.auth": "requested"}))
    assert tls.subject_dn(handshake(ctx, client(certs))) is None
    assert tls.subject_dn(handshake(ctx, client(certs, "alice"))) == "CN=Alice,OU=eng,O=acme"


def test_inline_pem_key_and_chain_and_inline_truststore(certs):
    text = open(certs.server).read()
    key = text[:text.index("-----END ENCRYPTED PRIVATE KEY-----") + 35]
    chain = text[len(key):]
    ctx = tls.server_context({"ssl.keystore.type": "PEM", "ssl.keystore.key": key,
                              "ssl.keystore.certificate.chain": chain,
                              "ssl.key.password": KEY_PASSWORD, "ssl.truststore.type": "PEM",
                              "ssl.truststore.certificates": open(certs.ca).read(),
                              "ssl.client.auth": "required"})
    assert tls.subject_dn(handshake(ctx, client(certs, "alice"))).startswith("CN=Alice")


def test_pkcs12_keystore_and_truststore(certs):
    ctx = tls.server_context({"ssl.keystore.type": "PKCS12", "ssl.keystore.location": certs.server_p12,
                              "ssl.keystore.password": STORE_PASSWORD})
    handshake(ctx, client(certs))


def test_required_client_auth_refuses_a_client_without_certificate(certs):
    ctx = tls.server_context(pem_keystore(certs, **{"ssl.truststore.location": certs.ca,
                                                    "ssl.truststore.type": "PEM",
                                                    "ssl.client.auth": "required"}))
    with pytest.raises(ssl.SSLError):
        handshake(ctx, client(certs))


@pytest.mark.parametrize("props, message", [
    ({"ssl.key.password": "wrong"}, "wrong ssl.key.password"),
    ({"ssl.keystore.location": "/nonexistent.pem"}, "/nonexistent.pem: cannot read"),
    ({"ssl.keystore.type": "JKS"}, "not supported"),
    ({"ssl.client.auth": "required"}, "needs a trust store"),
    ({"ssl.enabled.protocols": "TLSv9"}, "unknown protocol TLSv9"),
    ({"ssl.cipher.suites": "NOPE-CIPHER"}, "no usable cipher"),
    ({"ssl.keystore.location": None}, "must be set for a TLS listener"),
])
def test_bad_settings_are_one_line_errors_without_secrets(certs, props, message):
    with pytest.raises(tls.TlsConfigError, match=message) as e:
        tls.server_context({**pem_keystore(certs), **props})
    assert KEY_PASSWORD not in str(e.value) and "\n" not in str(e.value)


def test_pkcs12_with_a_wrong_store_password(certs):
    with pytest.raises(tls.TlsConfigError, match="wrong password"):
        tls.server_context({"ssl.keystore.type": "PKCS12", "ssl.keystore.location": certs.server_p12,
                            "ssl.keystore.password": "nope"})


def test_protocol_bounds_and_listener_overrides(certs):
    cfg = {**pem_keystore(certs), "ssl.enabled.protocols": "TLSv1.2,TLSv1.3",
           "listener.name.internal.ssl.enabled.protocols": "TLSv1.3"}
    ctx = tls.server_context(ListenerConfig(cfg, "INTERNAL"))
    assert ctx.minimum_version == ctx.maximum_version == ssl.TLSVersion.TLSv1_3
    ctx = tls.server_context(ListenerConfig(cfg, "SSL"))
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2


def test_client_checks_the_host_name_unless_told_not_to(certs):
    assert client(certs).check_hostname
    assert not tls.client_context({"ssl.ca.location": certs.ca,
                                   "ssl.endpoint.identification.algorithm": ""}).check_hostname
