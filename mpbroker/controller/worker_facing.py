"""`WorkerFacing`: the part of the worker-facing controller API that both controllers
(`embedded.EmbeddedController`, `zk.controller.ZkController`) answer alike: the attached
workers, the metadata view, and the broker config (the static layer, server.properties,
under the dynamic layers of `config_ops.DynamicBrokerConfigs`).

A mixin: the controller sets `workers`, `md`, `cfg`, `dynamic` and `_broker_cfg` itself.
"""
from __future__ import annotations

from mpbroker import config as configmod
from mpbroker.metadata import model


class WorkerFacing:
    workers: list
    md: model.ClusterMetadata

    def attach_worker(self, worker) -> None:
        self.workers.append(worker)

    def metadata(self) -> model.ClusterMetadata:
        return self.md

    def broker_config(self) -> configmod.BrokerConfig:
        return self._broker_cfg

    def reload(self, cfg: configmod.BrokerConfig) -> None:
        """SIGHUP: a new static layer (server.properties) under the same dynamic layers."""
        self.cfg = cfg
        self._broker_cfg = self.dynamic.over(cfg)
