"""DescribeUserScramCredentials / AlterUserScramCredentials (KIP-554) over a user ->
{mechanism: ScramCredential} map: the checks and answers both controllers share (pure),
as Kafka's ZkAdminManager gives them.

Alter: deletions [(user, mechanism type)], upsertions [(user, mechanism type, iterations,
salt, salted password)] -> one result (user, error code, message) per user in request
order, and the changes to apply ({user: {mechanism name: credential or None}}). A user
with any refused alteration keeps all its credentials (Kafka: per user, all or nothing):

* empty user name: UNACCEPTABLE_CREDENTIAL "Username must not be empty";
* the same (user, mechanism) twice in one request, deletions and upsertions together:
  DUPLICATE_RESOURCE (altering both mechanisms of a user at once is fine);
* a mechanism type other than 1 (SHA-256) or 2 (SHA-512): UNSUPPORTED_SASL_MECHANISM;
* iterations under 4096 or over 16384: UNACCEPTABLE_CREDENTIAL;
* deleting a credential that does not exist: RESOURCE_NOT_FOUND.

The ZooKeeper helpers read and write the SCRAM keys of a `/config/users/<user>` config
map and leave every other key (the user's quotas) as it is.
"""
from __future__ import annotations

import logging
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from mpbroker.protocol.errors import ErrorCode
from mpbroker.security.scram_credentials import (BY_TYPE, MAX_ITERATIONS, MECHANISMS,
                                                 ScramCredential, ScramFormatError,
                                                 credential_from_salted, credential_from_string,
                                                 credential_to_string)

log = logging.getLogger(__name__)

__all__ = ["alter", "describe", "credentials_from_config", "merge_config", "Users", "Changes"]

Users = Mapping[str, Mapping[str, ScramCredential]]
Changes = Dict[str, Dict[str, Optional[ScramCredential]]]


def alter(users: Users, deletions: Sequence[tuple], upsertions: Sequence[tuple]
          ) -> Tuple[List[Tuple[str, int, Optional[str]]], Changes]:
    order: List[str] = []
    errors: Dict[str, Tuple[int, str]] = {}
    changes: Changes = {}
    seen = set()

    def fail(user, code, message):
        errors.setdefault(user, (code, message))

    alterations = [(d[0], d[1], None) for d in deletions] + [(u[0], u[1], u) for u in upsertions]
    for user, mech_type, upsertion in alterations:
        if user not in order:
            order.append(user)
        if (user, mech_type) in seen:
            fail(user, ErrorCode.DUPLICATE_RESOURCE,
                 "A user credential cannot be altered twice in the same request")
        seen.add((user, mech_type))
    for user, mech_type, upsertion in alterations:
        mech = BY_TYPE.get(mech_type)
        if not user:
            fail(user, ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
        elif mech is None:
            fail(user, ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
        elif upsertion is None:
            if mech.name not in users.get(user, {}):
                fail(user, ErrorCode.RESOURCE_NOT_FOUND,
                     "Attempt to delete a user credential that does not exist")
            changes.setdefault(user, {})[mech.name] = None
        else:
            _, _, iterations, salt, salted = upsertion
            if iterations < mech.min_iterations:
                fail(user, ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations")
            elif iterations > MAX_ITERATIONS:
                fail(user, ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations")
            elif not salt or not salted:
                fail(user, ErrorCode.UNACCEPTABLE_CREDENTIAL, "Salt and salted password must not be empty")
            else:
                changes.setdefault(user, {})[mech.name] = credential_from_salted(
                    mech, bytes(salt), bytes(salted), iterations)
    results = []
    for user in order:
        code, message = errors.get(user, (ErrorCode.NONE, None))
        if code:
            changes.pop(user, None)
        results.append((user, int(code), message))
    return results, changes


def describe(users: Users, names: Optional[Sequence[str]]) -> List[dict]:
    """The response's Results: every user with a credential when `names` is None or
    empty (sorted), else one per distinct name in request order."""
    def info(user):
        return [{"mechanism": MECHANISMS[m].type_id, "iterations": c.iterations}
                for m, c in sorted(users[user].items(), key=lambda mc: MECHANISMS[mc[0]].type_id)]

    if not names:
        return [{"user": u, "error_code": 0, "error_message": None, "credential_infos": info(u)}
                for u in sorted(users)]
    out = []
    counts: Dict[str, int] = {}
    for n in names:
        counts[n] = counts.get(n, 0) + 1
    for n in counts:
        if counts[n] > 1:
            out.append({"user": n, "error_code": ErrorCode.DUPLICATE_RESOURCE,
                        "error_message": "Cannot describe SCRAM credentials for the same user "
                                         "twice in a single request", "credential_infos": []})
        elif not users.get(n):
            out.append({"user": n, "error_code": ErrorCode.RESOURCE_NOT_FOUND,
                        "error_message": "Attempt to describe a user credential that does not exist",
                        "credential_infos": []})
        else:
            out.append({"user": n, "error_code": 0, "error_message": None,
                        "credential_infos": info(n)})
    return out


def credentials_from_config(user: str, config: Mapping[str, str]) -> Dict[str, ScramCredential]:
    """The SCRAM credentials in a `/config/users/<user>` config map (other keys ignored; a
    malformed one is logged, without its value, and skipped)."""
    out = {}
    for mech in MECHANISMS:
        if mech in config:
            try:
                out[mech] = credential_from_string(config[mech])
            except ScramFormatError:
                log.warning("ignoring the malformed %s credential of user %r", mech, user)
    return out


def merge_config(config: Mapping[str, str], user_changes: Mapping[str, Optional[ScramCredential]]
                 ) -> Dict[str, str]:
    """`config` with the SCRAM keys changed (None: removed); every other key kept."""
    new = dict(config)
    for mech, cred in user_changes.items():
        if cred is None:
            new.pop(mech, None)
        else:
            new[mech] = credential_to_string(cred)
    return new
