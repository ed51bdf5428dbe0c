"""The SCRAM users requests' checks and answers (mpbroker/metadata/scram_users.py) and
the model's SCRAM users (mpbroker/metadata/model.py)."""
import json

from mpbroker.metadata import model, scram_users as su
from mpbroker.protocol.errors import ErrorCode as E
from mpbroker.security import scram_credentials as sc

SALTED = sc.salted_password(sc.SHA256, "pw", b"salt", 4096)


def up(user, mech=1, iterations=4096, salt=b"salt", salted=SALTED):
    return (user, mech, iterations, salt, salted)


def test_upsert_then_describe():
    results, changes = su.alter({}, [], [up("alice"), up("alice", 2, 8192), up("bob")])
    assert results == [("alice", 0, None), ("bob", 0, None)]
    assert set(changes["alice"]) == {"SCRAM-SHA-256", "SCRAM-SHA-512"}
    assert changes["alice"]["SCRAM-SHA-256"] == sc.credential_from_password(sc.SHA256, "pw", 4096, b"salt")
    md = model.set_scram_credentials(model.new_cluster_metadata(), changes)
    assert md.epoch == 1
    assert md.scram_credential("alice", "SCRAM-SHA-512").iterations == 8192
    assert md.scram_credential("carol", "SCRAM-SHA-256") is None
    assert su.describe(md.scram_users, None) == su.describe(md.scram_users, []) == [
        {"user": "alice", "error_code": 0, "error_message": None,
         "credential_infos": [{"mechanism": 1, "iterations": 4096}, {"mechanism": 2, "iterations": 8192}]},
        {"user": "bob", "error_code": 0, "error_message": None,
         "credential_infos": [{"mechanism": 1, "iterations": 4096}]}]


def test_describe_errors():
    users = {"alice": {"SCRAM-SHA-256": sc.credential_from_password(sc.SHA256, "pw")}}
    out = su.describe(users, ["nobody", "alice", "x", "x"])
    assert [(r["user"], r["error_code"]) for r in out] == [
        ("nobody", E.RESOURCE_NOT_FOUND), ("alice", 0), ("x", E.DUPLICATE_RESOURCE)]
    assert out[0]["error_message"] == "Attempt to describe a user credential that does not exist"


def test_alter_errors_are_per_user_and_all_or_nothing():
    existing = {"alice": {"SCRAM-SHA-256": sc.credential_from_password(sc.SHA256, "pw")}}
    results, changes = su.alter(existing, [("alice", 2), ("dave", 1)], [
        up("alice"),                       # fine alone, but alice's deletion fails
        up("bob", 1, 4095), up("carol", 2, 16385), up("", 1), up("eve", 3),
        up("frank"), up("frank"), up("gina", 1, salt=b""), up("hank", 1), up("hank", 2)])
    assert results == [
        ("alice", E.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist"),
        ("dave", E.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist"),
        ("bob", E.UNACCEPTABLE_CREDENTIAL, "Too few iterations"),
        ("carol", E.UNACCEPTABLE_CREDENTIAL, "Too many iterations"),
        ("", E.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"),
        ("eve", E.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"),
        ("frank", E.DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request"),
        ("gina", E.UNACCEPTABLE_CREDENTIAL, "Salt and salted password must not be empty"),
        ("hank", 0, None)]
    assert list(changes) == ["hank"]


def test_delete_removes_the_user_once_it_has_no_credential():
    md = model.set_scram_credentials(model.new_cluster_metadata(), su.alter({}, [], [up("a"), up("a", 2)])[1])
    results, changes = su.alter(md.scram_users, [("a", 1)], [])
    assert results == [("a", 0, None)]
    md = model.set_scram_credentials(md, changes)
    assert set(md.scram_users["a"]) == {"SCRAM-SHA-512"}
    md = model.set_scram_credentials(md, su.alter(md.scram_users, [("a", 2)], [])[1])
    assert md.scram_users == {}


def test_metadata_round_trip_keeps_kafkas_credential_strings():
    md = model.set_scram_credentials(model.new_cluster_metadata(), su.alter({}, [], [up("a")])[1])
    d = json.loads(json.dumps(model.to_dict(md)))
    assert d["scram_users"]["a"]["SCRAM-SHA-256"].startswith("salt=c2FsdA==,stored_key=")
    assert model.from_dict(d) == md
    assert "scram_users" not in model.to_dict(model.new_cluster_metadata())


def test_config_map_helpers_keep_other_keys():
    cred = sc.credential_from_password(sc.SHA512, "pw")
    config = su.merge_config({"producer_byte_rate": "1024", "SCRAM-SHA-256": "old"},
                             {"SCRAM-SHA-256": None, "SCRAM-SHA-512": cred})
    assert config == {"producer_byte_rate": "1024", "SCRAM-SHA-512": sc.credential_to_string(cred)}
    assert su.credentials_from_config("u", {**config, "SCRAM-SHA-256": "junk"}) == {"SCRAM-SHA-512": cred}
