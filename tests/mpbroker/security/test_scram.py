import base64

import pytest

from mpbroker.security import sasl, scram, scram_credentials as sc
from mpbroker.security.scram_client import ScramClient, ScramClientError

# RFC 7677 §3's example exchange
SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
SERVER_FIRST = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
CLIENT_FINAL = (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def store(**users):
    """user -> password, both mechanisms, RFC 7677's salt."""
    creds = {(u, m.name): sc.credential_from_password(m, p, 4096, SALT)
             for u, p in users.items() for m in sc.MECHANISMS.values()}
    return lambda user, mech: creds.get((user, mech))


def server(mech="SCRAM-SHA-256", **users):
    return sasl.MECHANISMS[mech](listener_name="SASL_PLAINTEXT", config=None,
                                 credentials=store(**users))


def test_rfc7677_vector():
    s = scram.ScramSaslServer(sc.SHA256, store(user="pencil"), nonce=lambda: SERVER_NONCE)
    assert s.evaluate(CLIENT_FIRST) == SERVER_FIRST
    assert not s.complete
    assert s.evaluate(CLIENT_FINAL) == SERVER_FINAL
    assert s.complete and s.authorization_id == "user"


def test_rfc7677_vector_from_the_client_side():
    c = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    assert c.first() == CLIENT_FIRST
    assert c.final(SERVER_FIRST) == CLIENT_FINAL
    c.verify(SERVER_FINAL)
    with pytest.raises(ScramClientError):
        c.verify(b"v=" + base64.b64encode(b"x" * 32))


@pytest.mark.parametrize("mech", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_both_mechanisms_are_registered_and_log_in(mech):
    s = server(mech, alice="wonderland")
    assert s.mechanism == mech
    c = ScramClient(mech, "alice", "wonderland")
    server_first = s.evaluate(c.first())
    server_final = s.evaluate(c.final(server_first))
    c.verify(server_final)
    assert s.complete and s.authorization_id == "alice"


def test_wrong_password_and_unknown_user_fail_alike():
    for user, password in (("alice", "wrong"), ("bob", "wonderland")):
        s = server(alice="wonderland")
        c = ScramClient("SCRAM-SHA-256", user, password)
        with pytest.raises(sasl.SaslAuthenticationError) as e:
            s.evaluate(c.final(s.evaluate(c.first())))
        assert str(e.value) == ("Authentication failed during authentication due to invalid "
                                "credentials with SASL mechanism SCRAM-SHA-256")
        assert "wrong" not in str(e.value) and not s.complete


def test_escaped_user_names():
    s = server(**{"a,b=c": "pw"})
    c = ScramClient("SCRAM-SHA-256", "a,b=c", "pw")
    assert b"n=a=2Cb=3Dc," in c.first()
    c.verify(s.evaluate(c.final(s.evaluate(c.first()))))
    assert s.authorization_id == "a,b=c"


def test_authzid_must_be_the_user():
    s = server(alice="pw")
    s.evaluate(b"n,a=alice,n=alice,r=abc")           # the same: fine
    with pytest.raises(sasl.SaslAuthenticationError, match="authorization id"):
        server(alice="pw").evaluate(b"n,a=bob,n=alice,r=abc")


@pytest.mark.parametrize("token", [
    b"", b"garbage", b"y,,n=alice,r=abc", b"p=tls-unique,,n=alice,r=abc", b"n,,n=alice",
    b"n,,n=al=ice,r=abc", b"n,,n=alice,r=a,b", b"\xff\xfe", b"n,,n=,r=abc",
])
def test_malformed_client_first_is_refused(token):
    with pytest.raises(sasl.SaslAuthenticationError):
        server(alice="pw").evaluate(token)


def test_tokenauth_extension_is_unsupported():
    with pytest.raises(sasl.SaslAuthenticationError, match="tokenauth"):
        server(alice="pw").evaluate(b"n,,n=alice,r=abc,tokenauth=true")
    # other extensions are ignored, as Kafka does
    server(alice="pw").evaluate(b"n,,n=alice,r=abc,foo=bar")


def _final_with(s, c, edit):
    final = c.final(s.evaluate(c.first())).decode()
    return s.evaluate(edit(final).encode())


@pytest.mark.parametrize("edit, match", [
    (lambda f: f.replace(",p=", "x,p=", 1), "nonce"),          # not the server's nonce
    (lambda f: f.replace(",p=", ",p=", 1)[:f.index(",p=") - 1] + f[f.index(",p="):], "nonce"),
    (lambda f: f.replace("c=biws", "c=eSws"), "channel binding"),
    (lambda f: f[:f.index(",p=")] + ",p=" + base64.b64encode(b"\0" * 32).decode(), "invalid credentials"),
    (lambda f: f[:f.index(",p=")] + ",p=AAAA", "invalid credentials"),
    (lambda f: f[:f.index(",p=")], "format"),
    (lambda f: f + "!", "format"),
])
def test_bad_client_final_is_refused(edit, match):
    s = server(alice="pw")
    with pytest.raises(sasl.SaslAuthenticationError, match=match):
        _final_with(s, ScramClient("SCRAM-SHA-256", "alice", "pw"), edit)
    assert not s.complete


def test_a_final_nonce_with_the_client_nonce_prepended_again_is_accepted():
    """librdkafka before 2.6.1 (Debian 12's kcat) answers r=<cnonce><cnonce><snonce>, its
    proof over that message; Kafka accepts a final nonce that ends with the server's
    (cnonce + snonce), and so does the server here."""
    s = server(alice="pw")
    c = ScramClient("SCRAM-SHA-256", "alice", "pw")
    first = c.first().decode()
    server_first = s.evaluate(first.encode()).decode()
    cnonce = first.split("r=", 1)[1]
    attrs = dict(a.split("=", 1) for a in server_first.split(","))
    m = sc.mechanism("SCRAM-SHA-256")
    salted = sc.salted_password(m, "pw", base64.b64decode(attrs["s"]), int(attrs["i"]))
    without_proof = f"c=biws,r={cnonce}{attrs['r']}"
    msg = scram.auth_message(first[3:], server_first, without_proof)
    ckey = sc.client_key(m, salted)
    proof = bytes(a ^ b for a, b in zip(ckey, sc.hmac_digest(m, sc.stored_key(m, ckey), msg)))
    server_final = s.evaluate(f"{without_proof},p={base64.b64encode(proof).decode()}".encode())
    assert server_final.startswith(b"v=") and s.complete and s.authorization_id == "alice"


def test_no_token_after_completion_or_failure():
    s = server(alice="pw")
    c = ScramClient("SCRAM-SHA-256", "alice", "pw")
    s.evaluate(c.final(s.evaluate(c.first())))
    with pytest.raises(sasl.SaslAuthenticationError):
        s.evaluate(c.first())
    f = server(alice="pw")
    with pytest.raises(sasl.SaslAuthenticationError):
        f.evaluate(b"junk")
    with pytest.raises(sasl.SaslAuthenticationError):
        f.evaluate(c.first())


def test_credentials_below_the_minimum_iterations_are_refused():
    weak = sc.credential_from_password(sc.SHA256, "pw", 1000, SALT)
    s = scram.ScramSaslServer(sc.SHA256, lambda u, m: weak)
    with pytest.raises(sasl.SaslAuthenticationError):
        s.evaluate(b"n,,n=alice,r=abc")


def test_client_refuses_bad_server_first():
    c = ScramClient("SCRAM-SHA-256", "alice", "pw", nonce="abc")
    for bad in (b"e=unknown-user", b"r=xyz123,s=AAAA,i=4096", b"r=abc,s=AAAA,i=4096",
                b"r=abcd,s=AAAA,i=100", b"r=abcd"):
        with pytest.raises(ScramClientError):
            c.final(bad)


@pytest.mark.parametrize("mech", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_kafka_pythons_scram_client_logs_in(mech):
    kp = pytest.importorskip("kafka.net.sasl.scram")
    c = kp.ScramClient("alice", "wonderland", mech)
    s = server(mech, alice="wonderland")
    c.process_server_first_message(s.evaluate(c.first_message()))
    c.process_server_final_message(s.evaluate(c.final_message()))
    assert s.complete and s.authorization_id == "alice"
    bad = kp.ScramClient("alice", "nope", mech)
    s = server(mech, alice="wonderland")
    bad.process_server_first_message(s.evaluate(bad.first_message()))
    with pytest.raises(sasl.SaslAuthenticationError):
        s.evaluate(bad.final_message())


def test_exchange_runs_both_round_trips():
    import asyncio
    from mpbroker.security.scram_client import exchange
    s = server("SCRAM-SHA-512", alice="pw")

    async def send(token):
        return s.evaluate(token)
    asyncio.run(exchange(ScramClient("SCRAM-SHA-512", "alice", "pw"), send))
    assert s.complete


@pytest.mark.parametrize("mech", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_registered_client_steps_as_the_own_client_drives_them(mech):
    """workers/kafka_client.py: `first()`, then `evaluate(server token)` until `complete`."""
    s = server(mech, alice="pw")
    c = sasl.CLIENT_MECHANISMS[mech]("alice", "pw")
    token = c.first()
    while not c.complete:
        token = c.evaluate(s.evaluate(token))
    assert token == b"" and s.complete and s.authorization_id == "alice"
    bad = sasl.CLIENT_MECHANISMS[mech]("alice", "nope")
    s = server(mech, alice="pw")
    with pytest.raises(sasl.SaslAuthenticationError):
        s.evaluate(bad.evaluate(s.evaluate(bad.first())))
