"""The response shape tables against Kafka's JSON schemas (when the reference is present)."""

import json
import pathlib
import re

import pytest

from workers.groups import responses

# beside the repository: <repo>/../shared (parents: groups, workers, tests, repo, its parent)
SCHEMAS = pathlib.Path(__file__).resolve().parents[4] / "shared/reference/kafka-message-schemas"


def snake(name):
    s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", s)
    return s.lower()


def parse_versions(spec):
    if spec == "none":
        return None
    if spec.endswith("+"):
        return int(spec[:-1]), None
    if "-" in spec:
        lo, hi = spec.split("-")
        return int(lo), int(hi)
    return int(spec), int(spec)


def load(name):
    text = (SCHEMAS / f"{name}Response.json").read_text()
    return json.loads(re.sub(r"^\s*//.*$", "", text, flags=re.M))


def fields_at(fields, version, common):
    out = {}
    for f in fields:
        lo, hi = parse_versions(f["versions"])
        if version < lo or (hi is not None and version > hi):
            continue
        sub = f.get("fields")
        if sub is None and f["type"].startswith("[]") and f["type"][2:] in common:
            sub = common[f["type"][2:]]
        out[snake(f["name"])] = fields_at(sub, version, common) if sub else None
    return out


def spec_at(spec, version):
    out = {}
    for name, (lo, hi, nested) in spec.items():
        if version < lo or (hi is not None and version > hi):
            continue
        out[name] = spec_at(nested, version) if nested else None
    return out


@pytest.mark.skipif(not SCHEMAS.is_dir(), reason="Kafka schemas not available")
@pytest.mark.parametrize("api", sorted(responses.SPECS))
def test_spec_matches_kafka_schema(api):
    spec, newest = responses.SPECS[api]
    schema = load(api)
    lo, hi = parse_versions(schema["validVersions"])
    hi = hi if hi is not None else lo
    assert newest == hi, f"{api}: schema goes to v{hi}"
    common = {c["name"]: c["fields"] for c in schema.get("commonStructs", [])}
    for version in range(lo, hi + 1):
        assert spec_at(spec, version) == fields_at(schema["fields"], version, common), (api, version)


def test_join_group_v6_sends_empty_protocol_name_for_none():
    r = responses.join_group(6, responses.JoinResult("m", 79))
    assert r["protocol_name"] == "" and "protocol_type" not in r and "skip_assignment" not in r
    r = responses.join_group(7, responses.JoinResult("m", 79))
    assert r["protocol_name"] is None and r["protocol_type"] is None


def test_leave_group_v0_takes_first_member_error():
    r = responses.leave_group(1, 0, [{"member_id": "a", "group_instance_id": None, "error_code": 25}])
    assert r == {"throttle_time_ms": 0, "error_code": 25}
