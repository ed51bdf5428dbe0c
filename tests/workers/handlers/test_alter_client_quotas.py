"""workers/handlers/alter_client_quotas.py: the request as the controller takes it."""
import asyncio

from workers.handlers import alter_client_quotas


class Controller:
    def __init__(self):
        self.calls = []

    async def alter_client_quotas(self, entries, validate_only):
        self.calls.append((entries, validate_only))
        return [(pairs, 0, None) for pairs, _ in entries]


class Broker:
    controller = Controller()


def test_entries_go_to_the_controller_and_results_come_back():
    req = {"validate_only": True, "entries": [{
        "entity": [{"entity_type": "user", "entity_name": None}],
        "ops": [{"key": "producer_byte_rate", "value": 10.0, "remove": False}]}]}
    resp = asyncio.run(alter_client_quotas.handle(Broker, None, req))
    assert Broker.controller.calls == [([([("user", None)], [("producer_byte_rate", 10.0, False)])],
                                        True)]
    assert resp["entries"] == [{"error_code": 0, "error_message": None,
                                "entity": [{"entity_type": "user", "entity_name": None}]}]
