"""The EmbeddedController's SCRAM users: stored in the metadata store (a restart keeps
them), pushed to the workers with the metadata."""
import asyncio

from mpbroker.protocol.errors import ErrorCode
from mpbroker.security import scram_credentials as sc
from tests.mpbroker.controller.embedded_harness import Worker, make


def test_alter_stores_pushes_and_survives_a_restart(tmp_path):
    ctl = make(tmp_path)
    w = Worker()
    ctl.attach_worker(w)
    salted = sc.salted_password(sc.SHA512, "pw", b"s", 4096)
    res = asyncio.run(ctl.alter_user_scram_credentials([], [("alice", 2, 4096, b"s", salted)]))
    assert res == [("alice", 0, None)]
    assert w.md.scram_credential("alice", "SCRAM-SHA-512") == sc.credential_from_password(
        sc.SHA512, "pw", 4096, b"s")
    again = make(tmp_path)
    assert again.md.scram_users == ctl.md.scram_users
    [d] = asyncio.run(again.describe_user_scram_credentials(["alice"]))
    assert d["credential_infos"] == [{"mechanism": 2, "iterations": 4096}]
    # a refused request changes nothing
    epoch = again.md.epoch
    res = asyncio.run(again.alter_user_scram_credentials([("bob", 1)], []))
    assert res == [("bob", ErrorCode.RESOURCE_NOT_FOUND,
                    "Attempt to delete a user credential that does not exist")]
    assert again.md.epoch == epoch
    assert asyncio.run(again.alter_user_scram_credentials([("alice", 2)], [])) == [("alice", 0, None)]
    assert make(tmp_path).md.scram_users == {}
