"""The definitions parser (mpbroker/protocol/schema.py): version ranges, defaults, field
names, message headers and attributes, nesting, shared structs, and the errors a
malformed definitions file raises. (Every block of definitions.txt against Kafka's
schemas: test_definitions_vs_kafka.py; the codec built from it: test_codec.py.)"""
import pytest

from mpbroker.protocol.schema import (NO_DEFAULT, NO_VERSIONS, VERSION_INF, SchemaError,
                                      Versions, load, parse, parse_default, parse_versions,
                                      snake)


@pytest.mark.parametrize("text, lo, hi, shown", [
    ("3+", 3, VERSION_INF, "3+"), ("v0-2", 0, 2, "0-2"), ("4", 4, 4, "4"), (" v7 ", 7, 7, "7"),
])
def test_version_ranges(text, lo, hi, shown):
    v = parse_versions(text)
    assert (v.lo, v.hi, v.text) == (lo, hi, shown)
    assert v.has(lo) and v.has(hi) and not v.has(lo - 1)


def test_no_versions():
    assert parse_versions("none") is NO_VERSIONS and NO_VERSIONS.text == "none"
    assert not any(NO_VERSIONS.has(v) for v in range(-1, 5))
    assert Versions(2, 1).text == "none"


@pytest.mark.parametrize("name, key", [
    ("TopicId", "topic_id"), ("ThrottleTimeMs", "throttle_time_ms"),
    ("ISRVersion", "isr_version"), ("Acks", "acks"), ("LogStartOffset", "log_start_offset"),
])
def test_snake(name, key):
    assert snake(name) == key


def test_defaults():
    assert parse_default("int32", "-1") == -1 and parse_default("int64", "0x10") == 16
    assert parse_default("bool", "true") is True and parse_default("bool", False) is False
    assert parse_default("float64", "0.5") == 0.5 and parse_default("string", "abc") == "abc"
    assert parse_default("string", "null") is None
    with pytest.raises(SchemaError):
        parse_default("bool", "yes")
    with pytest.raises(SchemaError):
        parse_default("bytes", "00")


TEXT = """\
# a comment
ThingRequest key 99 versions 0-3 flexible 2+ deprecated 0 unstable listeners broker,controller
  Name: string v0+ nullable v1+ default null
  Count: int32 v1+ default 7
  Items: []Item v0+
    Id: uuid v0+
    Note: string v3+ tag 0 tagged v3+ default ""
  Leader: LeaderAndEpoch v2+
  struct LeaderAndEpoch v2+
    LeaderId: int32 v2+ default -1
ThingResponse key 99 versions 0-3 flexible none
  ErrorCode: int16 v0+
SomeHeader header versions 0-1 flexible 1+
  ClientId: string v1+ flexible none
"""


def test_a_message_its_fields_and_structs():
    msgs = parse(TEXT)
    req = msgs["ThingRequest"]
    assert (req.api_key, req.kind, req.valid_versions, req.flexible_from) == (99, "request", (0, 3), 2)
    assert req.deprecated.text == "0" and req.unstable and req.listeners == ("broker", "controller")
    assert req.is_flexible(2) and not req.is_flexible(1) and req.has_version(3) and not req.has_version(4)
    name, count, items, leader = req.fields
    assert (name.snake, name.type, name.versions.text, name.nullable_versions.text) == \
        ("name", "string", "0+", "1+")
    assert name.default is None and count.default == 7
    assert items.is_array and items.is_struct and items.elem_type == "Item"
    item_id, note = items.fields
    assert item_id.default is NO_DEFAULT and item_id.tag is None and not item_id.tagged_in(3)
    assert note.tag == 0 and note.tagged_in(3) and not note.tagged_in(2) and note.default == ""
    # a field naming a shared struct gets the struct's fields
    assert leader.is_struct and not leader.is_array
    assert [f.snake for f in leader.fields] == ["leader_id"] and leader.fields[0].default == -1
    resp = msgs["ThingResponse"]
    assert resp.kind == "response" and resp.flexible_from is None and not resp.is_flexible(3)
    hdr = msgs["SomeHeader"]
    assert (hdr.kind, hdr.api_key) == ("header", None)
    assert hdr.fields[0].flexible_versions is NO_VERSIONS


@pytest.mark.parametrize("text, says", [
    ("Thing key 1 versions 0 flexible none\n", "cannot tell the kind"),
    ("ThingRequest versions 0 flexible none\n", "cannot tell the kind"),
    ("ThingRequest key 1 versions 0 flexible none bogus\n", "unexpected 'bogus'"),
    ("  Orphan: int32 v0+\n", "field outside a message"),
    ("ThingRequest key 1 versions 0 flexible none\n  Bad field\n", "bad field"),
    ("ThingRequest key 1 versions 0 flexible none\n  A: int32 v0+ colour red\n", "unknown attribute"),
    ("ThingRequest key 1 versions 0 flexible none\n  A: int32 v0+ nullable\n", "needs a value"),
    ("ThingRequest key 1 versions 0 flexible none\n   A: int32 v0+\n", "bad indentation"),
    ("ThingRequest key 1 versions 0 flexible none\n  A: Missing v0+\n", "unknown struct Missing"),
    ("ThingRequest key 1 versions 0 flexible none\nThingRequest key 1 versions 0 flexible none\n",
     "defined twice"),
])
def test_malformed_definitions_are_refused(text, says):
    with pytest.raises(SchemaError, match=says):
        parse(text)


def test_the_project_definitions_load_once():
    msgs = load()
    assert load() is msgs
    assert msgs["ProduceRequest"].api_key == 0 and msgs["RequestHeader"].kind == "header"
