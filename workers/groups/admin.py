"""The admin APIs of the groups of one partition: ListGroups, DescribeGroups,
DeleteGroups, OffsetDelete. Multi-group requests return their per-group entries
synchronously for the caller to merge across coordinators.

A part of `GroupCoordinator` (coordinator.py), a mixin over `CoordinatorBase`
(base.py); removals write their tombstones through `Offsets._cleanup_group`.
"""
from __future__ import annotations

from typing import Callable, Iterable

from workers.groups import errors, responses
from workers.groups.base import LOADING, UNLOADED, CoordinatorBase
from workers.groups.consumer_metadata import PROTOCOL_TYPE as CONSUMER_PROTOCOL_TYPE
from workers.groups.consumer_group import GROUP_TYPE_CONSUMER, ConsumerGroup
from workers.groups.group import DEAD, EMPTY, STABLE

GROUP_TYPE_CLASSIC = "classic"


class Admin(CoordinatorBase):
    # =================================================================== admin APIs

    def list_groups(self, states_filter=None, types_filter=None) -> tuple[int, list[dict]]:
        """This partition's groups as ListGroups entries (all fields; the caller shapes and
        merges). Error COORDINATOR_LOAD_IN_PROGRESS while loading, with the groups so far."""
        if self.state == UNLOADED:
            return errors.NONE, []
        states = {s.lower() for s in states_filter or ()}
        types = {t.lower() for t in types_filter or ()}
        error = errors.COORDINATOR_LOAD_IN_PROGRESS if self.state == LOADING else errors.NONE
        out = []
        for g in self.groups.values():
            group_type = GROUP_TYPE_CONSUMER if isinstance(g, ConsumerGroup) else GROUP_TYPE_CLASSIC
            if (states and g.state.lower() not in states) or (types and group_type not in types):
                continue
            out.append({"group_id": g.group_id, "protocol_type": g.protocol_type or "",
                        "group_state": g.state, "group_type": group_type})
        return error, out

    def describe_groups(self, group_ids: Iterable[str], version: int) -> list[dict]:
        """DescribeGroups entries, shaped for ``version``, one per id in order."""
        return [responses.shape(version, responses.DESCRIBED_GROUP, self._describe(gid))
                for gid in group_ids]

    def _describe(self, group_id: str) -> dict:
        out = {"error_code": errors.NONE, "group_id": group_id, "group_state": "",
               "protocol_type": "", "protocol_data": "", "members": [],
               "authorized_operations": responses.NO_AUTHORIZED_OPERATIONS}
        error = self._check_status(group_id, "DescribeGroups")
        if error:
            out["error_code"] = error
            return out
        group = self.groups.get(group_id)
        if group is None:
            out["group_state"] = DEAD
            return out
        if isinstance(group, ConsumerGroup):
            out.update(self.consumer.describe_classic(group))
            return out
        out["group_state"] = group.state
        out["protocol_type"] = group.protocol_type or ""
        stable = group.is_(STABLE)
        if stable:
            out["protocol_data"] = group.protocol_name or ""
        # metadata and assignment are only meaningful (and only sent) when Stable
        out["members"] = [{
            "member_id": m.member_id, "group_instance_id": m.group_instance_id,
            "client_id": m.client_id, "client_host": m.client_host,
            "member_metadata": m.metadata(group.protocol_name) if stable else b"",
            "member_assignment": m.assignment if stable else b""}
            for m in group.members.values()]
        return out

    def delete_groups(self, group_ids: Iterable[str], version: int = 0) -> list[dict]:
        """DeleteGroups results ({group_id, error_code}), one per id in order.

        Tombstones are appended without waiting, as Kafka does: if they are lost the next
        expiry cycle removes the (then Empty, offset-less) group again."""
        results, eligible = [], []
        for group_id in group_ids:
            error = self._check_status(group_id, "DeleteGroups")
            group = self.groups.get(group_id) if not error else None
            if error:
                pass
            elif group is None or group.is_(DEAD):
                error = errors.GROUP_ID_NOT_FOUND
            elif group.is_(EMPTY):
                group.transition_to(DEAD, self.clock())
                eligible.append(group)
            else:
                error = errors.NON_EMPTY_GROUP
            results.append({"group_id": group_id, "error_code": error})
        for group in eligible:
            self._cleanup_group(group, group.remove_offsets(list(group.offsets)))
        return results

    def offset_delete(self, req: dict, version: int, respond: Callable[[dict], None]) -> None:
        tps = [(t["name"], p["partition_index"]) for t in req.get("topics", []) for p in t["partitions"]]
        group_id = req.get("group_id")
        error = self._check_status(group_id, "OffsetDelete")
        group = self.groups.get(group_id) if not error else None
        if not error and (group is None or group.is_(DEAD)):
            error = errors.GROUP_ID_NOT_FOUND
        if error:
            respond(responses.offset_delete(version, error, []))
            return
        codes = {}
        if group.is_(EMPTY):
            eligible = tps
        elif group.protocol_type == CONSUMER_PROTOCOL_TYPE:
            eligible = [tp for tp in tps if not group.is_subscribed_to_topic(tp[0])]
            codes = {tp: errors.GROUP_SUBSCRIBED_TO_TOPIC for tp in tps if group.is_subscribed_to_topic(tp[0])}
        else:
            respond(responses.offset_delete(version, errors.NON_EMPTY_GROUP, []))
            return
        if eligible:
            self._cleanup_group(group, group.remove_offsets(eligible))
        respond(responses.offset_delete(version, errors.NONE,
                                        [(t, p, codes.get((t, p), errors.NONE)) for t, p in tps]))
