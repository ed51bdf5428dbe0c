"""Shared by the config package's tests."""
from mpbroker.config import BrokerConfig


def cfg(**props):
    """A BrokerConfig of `props` (underscores for dots) on a fixed machine: 4 CPUs, cwd /cwd."""
    base = {"log.dirs": "/d"}
    base.update({k.replace("_", "."): v for k, v in props.items()})
    return BrokerConfig(base, cpu_count=4, cwd="/cwd")
