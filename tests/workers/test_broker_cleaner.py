"""workers/housekeeping.py: how the worker schedules compaction (storage/cleaner.py)."""
from mpbroker import config as configmod
from storage.cleaner import map_entries_for
from workers import housekeeping


def cfg(tmp_path, **overrides):
    text = f"broker.id=1\nlog.dirs={tmp_path}\nlisteners=PLAINTEXT://127.0.0.1:9092\n"
    return configmod.BrokerConfig.from_text(text, [f"{k}={v}" for k, v in overrides.items()])


def test_cleaner_settings_come_from_the_broker_config(tmp_path):
    m = housekeeping.cleaner_manager(cfg(tmp_path, **{"num.workers": 4,
                                                 "log.cleaner.dedupe.buffer.size": 64 << 20,
                                                 "log.cleaner.backoff.ms": 700}))
    # the dedupe buffer is shared by the workers, as Kafka shares it by cleaner threads
    assert m.max_map_entries == map_entries_for(16 << 20, 0.9)
    assert m.backoff_ms == 700 and m.enabled
    off = housekeeping.cleaner_manager(cfg(tmp_path, **{"log.cleaner.enable": "false"}))
    assert not off.enabled
