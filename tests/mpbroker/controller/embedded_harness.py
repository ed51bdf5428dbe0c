"""An EmbeddedController of broker 1 (data under `tmp_path/d`, registered at
127.0.0.1:9092) and a worker stand-in that keeps the last metadata pushed to it: what the
embedded controller's unit tests share."""
from mpbroker import config as configmod
from mpbroker.controller.embedded import EmbeddedController


def make(tmp_path) -> EmbeddedController:
    cfg = configmod.BrokerConfig({"broker.id": "1", "log.dirs": str(tmp_path / "d"),
                                  "listeners": "PLAINTEXT://127.0.0.1:0"})
    ctl = EmbeddedController(cfg)
    ctl.register_broker(1, "127.0.0.1", 9092)
    return ctl


class Worker:
    """Keeps the metadata the controller pushes (`attach_worker`)."""

    def __init__(self):
        self.md = None

    def apply_metadata(self, md):
        self.md = md
