import base64

import pytest

from mpbroker.security import scram_credentials as sc

# RFC 7677 §3: user "user", password "pencil", salt W22ZaJ0SNY7soEsUEjb6gQ==, 4096 iterations
SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")


def test_credential_round_trips_through_kafkas_string_format():
    c = sc.credential_from_password(sc.SHA256, "pencil", 4096, SALT)
    s = sc.credential_to_string(c)
    assert s.startswith("salt=W22ZaJ0SNY7soEsUEjb6gQ==,stored_key=")
    assert s.endswith(",iterations=4096")
    assert sc.credential_from_string(s) == c


def test_from_salted_password_equals_from_password():
    for m in sc.MECHANISMS.values():
        salted = sc.salted_password(m, "secret", b"salt", 4096)
        assert sc.credential_from_salted(m, b"salt", salted, 4096) == \
            sc.credential_from_password(m, "secret", 4096, b"salt")


def test_sha512_key_lengths_and_random_salt():
    a = sc.credential_from_password(sc.SHA512, "x")
    b = sc.credential_from_password(sc.SHA512, "x")
    assert len(a.stored_key) == len(a.server_key) == 64
    assert a.salt != b.salt and a.iterations == sc.MIN_ITERATIONS == 4096


def test_mechanism_ids_and_limits():
    assert sc.mechanism("SCRAM-SHA-256").type_id == 1
    assert sc.BY_TYPE[2].name == "SCRAM-SHA-512"
    assert sc.MAX_ITERATIONS == 16384
    with pytest.raises(sc.ScramFormatError):
        sc.mechanism("SCRAM-SHA-1")


@pytest.mark.parametrize("bad", ["", "salt=AA==", "salt=AA==,stored_key=AA==,server_key=AA==,iterations=x",
                                 "salt=!!,stored_key=AA==,server_key=AA==,iterations=1", "junk"])
def test_bad_strings_are_refused(bad):
    with pytest.raises(sc.ScramFormatError):
        sc.credential_from_string(bad)
