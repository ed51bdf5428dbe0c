"""Helpers of the ACL integration tests (tests/security/test_acls*.py): a private
broker with the ACL authorizer, ACLs through confluent-kafka's AdminClient, and
hand-made requests through the project's codec."""
from __future__ import annotations

from pathlib import Path

from mpbroker.protocol import codec, framing
from tests.integration import broker as harness
from tests.integration.broker import Broker

AUTHORIZER = "kafka.security.authorizer.AclAuthorizer"
ANON = "User:ANONYMOUS"


def acl_broker(workdir: Path, **overrides) -> Broker:
    conf = {"authorizer.class.name": AUTHORIZER, "num.workers": 2, **overrides}
    return Broker(workdir, conf, name="acl-broker").start()


def binding(rtype: str, name: str, op: str, perm: str = "ALLOW", principal: str = ANON,
            pattern: str = "LITERAL", host: str = "*"):
    from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType,
                                       ResourcePatternType, ResourceType)
    return AclBinding(ResourceType[rtype], name, ResourcePatternType[pattern], principal, host,
                      AclOperation[op], AclPermissionType[perm])


def add_acls(bootstrap: str, *bindings, **conf) -> None:
    a = harness.admin(bootstrap, **conf)
    for f in a.create_acls(list(bindings), request_timeout=20).values():
        f.result(20)


def request(bootstrap: str, api_key: int, version: int, body: dict) -> dict:
    """One hand-made request on a new connection -> the decoded response body."""
    s = harness.connect(bootstrap)
    try:
        s.sendall(framing.frame_request(api_key, version, 7, "acl-test", body))
        frame = harness.recv_frame(s)
    finally:
        s.close()
    corr, pos = framing.parse_response_header(frame, api_key, version)
    assert corr == 7
    return codec.decode_response(api_key, version, frame, pos)

