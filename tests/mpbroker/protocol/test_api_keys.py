"""mpbroker/protocol/api_keys.py against the definitions: every API the project defines
has its constant and its Kafka name here, with the same key."""
from mpbroker.protocol import api_keys as K
from mpbroker.protocol.schema import load


def test_names_are_unique_kafka_names():
    assert len(set(K.NAMES.values())) == len(K.NAMES)
    assert K.NAMES[K.PRODUCE] == "Produce" and K.NAMES[K.API_VERSIONS] == "ApiVersions"
    assert all(K.KEYS[name] == key for key, name in K.NAMES.items())


def test_every_defined_api_has_its_key_and_name():
    defined = {m.api_key: m.name[:-len("Request")] for m in load().values() if m.kind == "request"}
    assert defined, "no request in the definitions"
    for key, name in defined.items():
        assert K.NAMES.get(key) == name, (key, name)
        constant = "".join("_" + c if c.isupper() else c for c in name).lstrip("_").upper()
        assert getattr(K, constant, None) == key, constant
