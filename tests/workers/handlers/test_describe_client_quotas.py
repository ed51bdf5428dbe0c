"""workers/handlers/describe_client_quotas.py: answered from the worker's metadata."""
from mpbroker.protocol.errors import ErrorCode
from workers.handlers import describe_client_quotas


class Broker:
    class metadata:
        client_quotas = {(("client-id", "app"),): {"producer_byte_rate": 1024.0},
                         (("user", None),): {"consumer_byte_rate": 5.0}}


def test_entries_matching_the_filter():
    req = {"components": [{"entity_type": "client-id", "match_type": 0, "match": "app"}],
           "strict": True}
    resp = describe_client_quotas.handle(Broker, None, req)
    assert resp["error_code"] == 0
    assert resp["entries"] == [{"entity": [{"entity_type": "client-id", "entity_name": "app"}],
                                "values": [{"key": "producer_byte_rate", "value": 1024.0}]}]
    resp = describe_client_quotas.handle(Broker, None, {"components": [], "strict": False})
    assert len(resp["entries"]) == 2


def test_a_bad_filter_is_invalid_request():
    req = {"components": [{"entity_type": "ip", "match_type": 0, "match": "x"}], "strict": False}
    resp = describe_client_quotas.handle(Broker, None, req)
    assert resp["error_code"] == ErrorCode.INVALID_REQUEST and resp["entries"] is None
    assert "ip" in resp["error_message"]
