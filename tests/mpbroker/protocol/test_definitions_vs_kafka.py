"""Our definitions (mpbroker/protocol/definitions.txt) against Kafka's JSON schemas.

Reads Kafka's schemas from ../shared/reference/kafka-message-schemas (relative to the
repository root) at test time and compares, for every API a broker serves (listeners
include broker or zkBroker), both headers and the consumer-protocol data schemas:
valid and flexible versions, and field by field the names, types, versions, nullable
versions, tags, tagged versions, per-field flexible versions and defaults, with
common structs resolved. Skipped when the reference folder is absent.

The reference snapshot stops below some versions that real clients send
(CLIENT-API-USAGE.md). Our definitions may go beyond it only for the messages in
`EXTENSIONS`, by exactly the versions and fields listed there; the main test compares
with the reference plus those additions, and `test_extensions_are_kafka_4` checks each
addition against the Kafka 4.x schemas bundled with kafka-python (the schemas those
clients are built from) and that the reference still stops below it.
"""
import copy
import json
import os

import pytest

from mpbroker.protocol import schema

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SCHEMAS = os.path.join(REPO, "..", "shared", "reference", "kafka-message-schemas")

pytestmark = pytest.mark.skipif(not os.path.isdir(SCHEMAS), reason="no Kafka schema reference")


def strip_comments(text: str) -> str:
    """Drop // comments, leaving // inside JSON strings alone."""
    out = []
    i, n = 0, len(text)
    in_string = False
    while i < n:
        c = text[i]
        if in_string:
            out.append(c)
            if c == "\\" and i + 1 < n:
                out.append(text[i + 1])
                i += 2
                continue
            if c == '"':
                in_string = False
        elif c == '"':
            in_string = True
            out.append(c)
        elif c == "/" and i + 1 < n and text[i + 1] == "/":
            while i < n and text[i] != "\n":
                i += 1
            continue
        else:
            out.append(c)
        i += 1
    return "".join(out)


def load_kafka():
    out = {}
    for fn in sorted(os.listdir(SCHEMAS)):
        if fn.endswith(".json"):
            with open(os.path.join(SCHEMAS, fn), encoding="utf-8") as fh:
                out[fn[:-5]] = json.loads(strip_comments(fh.read()))
    return out


KAFKA = load_kafka() if os.path.isdir(SCHEMAS) else {}
OURS = schema.load()

# Versions beyond the reference snapshot, as Kafka 4.x defines them:
# {message: (new highest version, [(path of the struct, field spec appended to it)])}.
# Metadata v13: kafka-python 3.0 and librdkafka 2.16 send it (KIP-1102 top-level
# error code). ListOffsets v11: kafka-python sends it (KIP-1023, no field change).
# DescribeCluster v2: kafka-python's admin client may send it (KIP-1073).
EXTENSIONS = {
    "MetadataRequest": (13, []),
    "MetadataResponse": (13, [((), {"name": "ErrorCode", "type": "int16", "versions": "13+",
                                    "ignorable": True})]),
    "ListOffsetsRequest": (11, []),
    "ListOffsetsResponse": (11, []),
    "DescribeClusterRequest": (2, [((), {"name": "IncludeFencedBrokers", "type": "bool",
                                         "versions": "2+"})]),
    "DescribeClusterResponse": (2, [(("Brokers",), {"name": "IsFenced", "type": "bool",
                                                    "versions": "2+"})]),
}


def with_extensions(name: str, spec: dict) -> dict:
    """The reference schema plus our listed extension of it."""
    if name not in EXTENSIONS:
        return spec
    hi, added = EXTENSIONS[name]
    spec = copy.deepcopy(spec)
    lo = schema.parse_versions(spec["validVersions"]).lo
    spec["validVersions"] = f"{lo}-{hi}"
    for path, field in added:
        fields = spec["fields"]
        for step in path:
            fields = next(f for f in fields if f["name"] == step)["fields"]
        fields.append(dict(field))
    return spec


def kafka_python_schemas() -> str:
    """kafka-python's bundled Kafka 4.x schemas (found without importing the package)."""
    import importlib.util
    spec = importlib.util.find_spec("kafka")
    assert spec is not None, "kafka-python (a test dependency) is not installed"
    root = spec.submodule_search_locations[0]
    return os.path.join(root, "protocol", "schemas", "resources")


def expected_names():
    names = ["RequestHeader", "ResponseHeader", "ConsumerProtocolSubscription",
             "ConsumerProtocolAssignment"]
    for name, spec in KAFKA.items():
        if spec["type"] == "request" and set(spec.get("listeners", ())) & {"broker", "zkBroker"}:
            names += [name, name[: -len("Request")] + "Response"]
    return sorted(names)


def test_strip_comments_keeps_slashes_in_strings():
    assert json.loads(strip_comments('{"a": "x//y", // note\n "b": 1}')) == {"a": "x//y", "b": 1}


def test_defines_exactly_the_broker_apis():
    assert sorted(OURS) == expected_names()
    assert len([m for m in OURS.values() if m.kind == "request"]) == 79


def norm_versions(text) -> str:
    return schema.parse_versions(str(text)).text


def compare_fields(path, kafka_fields, our_fields, commons):
    assert [f["name"] for f in kafka_fields] == [f.name for f in our_fields], path
    for kf, of in zip(kafka_fields, our_fields):
        where = f"{path}.{kf['name']}"
        assert of.type == kf["type"], where
        assert of.snake == schema.snake(kf["name"]), where
        assert of.versions.text == norm_versions(kf["versions"]), where
        assert of.nullable_versions.text == norm_versions(kf.get("nullableVersions", "none")), where
        assert of.tag == kf.get("tag"), where
        assert of.tagged_versions.text == norm_versions(kf.get("taggedVersions", "none")), where
        if "flexibleVersions" in kf:
            assert of.flexible_versions is not None, where
            assert of.flexible_versions.text == norm_versions(kf["flexibleVersions"]), where
        else:
            assert of.flexible_versions is None, where
        if "default" in kf:
            elem = "array" if kf["type"].startswith("[]") else kf["type"]
            raw = kf["default"]
            expected = None if raw == "null" else schema.parse_default(elem, raw)
            assert of.default is not schema.NO_DEFAULT, where
            assert of.default == expected and type(of.default) is type(expected), where
        else:
            assert of.default is schema.NO_DEFAULT, where
        elem = kf["type"][2:] if kf["type"].startswith("[]") else kf["type"]
        if "fields" in kf:
            compare_fields(where, kf["fields"], of.fields, commons)
        elif elem in commons:
            compare_fields(where, commons[elem]["fields"], of.fields, commons)
        else:
            assert elem in schema.PRIMITIVE_TYPES, where
            assert of.fields is None, where


@pytest.mark.parametrize("name", expected_names())
def test_message_matches_kafka(name):
    spec, ours = with_extensions(name, KAFKA[name]), OURS[name]
    assert ours.kind == spec["type"]
    assert ours.api_key == spec.get("apiKey")
    valid = schema.parse_versions(spec["validVersions"])
    assert ours.valid_versions == (valid.lo, valid.hi)
    flex = schema.parse_versions(spec["flexibleVersions"])
    assert ours.flexible_from == (None if flex.lo > flex.hi else flex.lo)
    if flex.lo <= flex.hi:
        assert flex.hi == schema.VERSION_INF
    assert ours.deprecated.text == norm_versions(spec.get("deprecatedVersions", "none"))
    assert ours.unstable == bool(spec.get("latestVersionUnstable", False))
    assert ours.listeners == tuple(spec.get("listeners", ()))
    commons = {c["name"]: c for c in spec.get("commonStructs", ())}
    assert sorted(ours.common_structs) == sorted(commons)
    for cname, c in commons.items():
        assert ours.common_structs[cname][0].text == norm_versions(c["versions"])
    compare_fields(name, spec["fields"], ours.fields, commons)


def test_request_and_response_versions_agree():
    for m in OURS.values():
        if m.kind == "request":
            resp = OURS[m.name[: -len("Request")] + "Response"]
            assert (resp.valid_versions, resp.flexible_from) == (m.valid_versions, m.flexible_from)


@pytest.mark.parametrize("name", sorted(EXTENSIONS))
def test_extensions_are_kafka_4(name):
    """Each extension: beyond the reference, and exactly Kafka 4.x's fields up to it."""
    hi, added = EXTENSIONS[name]
    reference = schema.parse_versions(KAFKA[name]["validVersions"])
    assert reference.hi < hi, f"{name}: the reference now has v{hi}; drop the extension"
    for _, field in added:
        assert schema.parse_versions(field["versions"]).lo > reference.hi, name
    with open(os.path.join(kafka_python_schemas(), name + ".json"), encoding="utf-8") as fh:
        k4 = json.loads(strip_comments(fh.read()))
    assert schema.parse_versions(k4["validVersions"]).hi == hi
    assert OURS[name].valid_versions[1] == hi
    commons = {c["name"]: c for c in k4.get("commonStructs", ())}
    compare_fields(name, k4["fields"], OURS[name].fields, commons)
