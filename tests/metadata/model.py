"""Shared test helpers: hypothesis strategies for every metadata record, and a reference model.

``records()`` draws any record value (for the codec round trip). ``valid_sequences()``
draws record sequences that a correct controller could commit, generated against
:class:`Model`, a deliberately naive replayer on plain dicts that restates the
replay rules independently of :mod:`kraftlog.metadata.delta`; ``plain(image)``
puts an image in the model's shape so the two can be compared.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from kraftlog.ids import Uuid
from kraftlog.metadata import image as im
from kraftlog.metadata import records as r

INT32 = st.integers(min_value=-(2**31), max_value=2**31 - 1)
INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
UUIDS = st.binary(min_size=16, max_size=16).map(Uuid)
TEXT = st.text(max_size=12)
REPLICAS = st.lists(INT32, max_size=6).map(tuple)
OPT_REPLICAS = st.none() | REPLICAS
RECOVERY = st.sampled_from(r.LeaderRecoveryState)
RESOURCE_TYPES = st.sampled_from(r.ConfigResourceType)

ENDPOINTS = st.builds(r.Endpoint, listener_name=TEXT, host=TEXT, port=INT32,
                      security_protocol=TEXT)
FEATURES = st.builds(r.SupportedFeature, name=TEXT, min_supported_version=INT32,
                     max_supported_version=INT32)

RECORD_STRATEGIES: dict[type[Any], st.SearchStrategy[Any]] = {
    r.RegisterBrokerRecord: st.builds(
        r.RegisterBrokerRecord, broker_id=INT32, incarnation_id=UUIDS, broker_epoch=INT64,
        endpoints=st.lists(ENDPOINTS, max_size=3).map(tuple),
        features=st.lists(FEATURES, max_size=3).map(tuple), rack=TEXT, fenced=st.booleans(),
        in_controlled_shutdown=st.booleans(), log_dirs=st.lists(UUIDS, max_size=3).map(tuple)),
    r.UnregisterBrokerRecord: st.builds(r.UnregisterBrokerRecord, broker_id=INT32,
                                        broker_epoch=INT64),
    r.BrokerRegistrationChangeRecord: st.builds(
        r.BrokerRegistrationChangeRecord, broker_id=INT32, broker_epoch=INT64,
        fenced=st.none() | st.booleans(), in_controlled_shutdown=st.none() | st.booleans()),
    r.FenceBrokerRecord: st.builds(r.FenceBrokerRecord, broker_id=INT32, broker_epoch=INT64),
    r.UnfenceBrokerRecord: st.builds(r.UnfenceBrokerRecord, broker_id=INT32,
                                     broker_epoch=INT64),
    r.TopicRecord: st.builds(r.TopicRecord, name=TEXT, topic_id=UUIDS),
    r.RemoveTopicRecord: st.builds(r.RemoveTopicRecord, topic_id=UUIDS),
    r.PartitionRecord: st.builds(
        r.PartitionRecord, topic_id=UUIDS, partition_id=INT32, replicas=REPLICAS, isr=REPLICAS,
        leader=INT32, leader_epoch=INT32, partition_epoch=INT32, removing_replicas=REPLICAS,
        adding_replicas=REPLICAS, leader_recovery_state=RECOVERY,
        eligible_leader_replicas=REPLICAS, last_known_elr=REPLICAS),
    r.PartitionChangeRecord: st.builds(
        r.PartitionChangeRecord, topic_id=UUIDS, partition_id=INT32, leader=st.none() | INT32,
        isr=OPT_REPLICAS, replicas=OPT_REPLICAS, removing_replicas=OPT_REPLICAS,
        adding_replicas=OPT_REPLICAS, leader_recovery_state=st.none() | RECOVERY,
        eligible_leader_replicas=OPT_REPLICAS, last_known_elr=OPT_REPLICAS),
    r.ConfigRecord: st.builds(r.ConfigRecord, resource_type=RESOURCE_TYPES, resource_name=TEXT,
                              name=TEXT, value=st.none() | TEXT),
    r.FeatureLevelRecord: st.builds(r.FeatureLevelRecord, name=TEXT, feature_level=INT32),
    r.NoOpRecord: st.just(r.NoOpRecord()),
    r.ProducerIdsRecord: st.builds(r.ProducerIdsRecord, broker_id=INT32, broker_epoch=INT64,
                                   next_producer_id=INT64),
}
assert set(RECORD_STRATEGIES) == set(r.RECORD_TYPES)


def records() -> st.SearchStrategy[r.MetadataRecord]:
    return st.one_of(*RECORD_STRATEGIES.values())


# -- reference model -----------------------------------------------------------------------------

PARTITION_FIELDS = ("replicas", "isr", "leader", "leader_epoch", "partition_epoch",
                    "removing_replicas", "adding_replicas", "leader_recovery_state",
                    "eligible_leader_replicas", "last_known_elr")


class Model:
    """The replay rules restated on plain dicts (see the module docstring)."""

    def __init__(self) -> None:
        self.features: dict[str, int] = {}
        self.brokers: dict[int, dict[str, Any]] = {}
        self.topics: dict[Uuid, dict[str, Any]] = {}
        self.configs: dict[tuple[r.ConfigResourceType, str], dict[str, str]] = {}
        self.next_producer_id = -1
        self.used_topic_ids: set[Uuid] = set()  # topic ids are unique forever

    def apply(self, record: r.MetadataRecord) -> None:
        if isinstance(record, r.RegisterBrokerRecord):
            self.brokers[record.broker_id] = {
                "epoch": record.broker_epoch, "incarnation": record.incarnation_id,
                "endpoints": record.endpoints, "features": record.features,
                "rack": record.rack, "fenced": record.fenced,
                "shutdown": record.in_controlled_shutdown, "log_dirs": record.log_dirs}
        elif isinstance(record, r.UnregisterBrokerRecord):
            del self.brokers[record.broker_id]
        elif isinstance(record, r.FenceBrokerRecord):
            self.brokers[record.broker_id]["fenced"] = True
        elif isinstance(record, r.UnfenceBrokerRecord):
            self.brokers[record.broker_id]["fenced"] = False
        elif isinstance(record, r.BrokerRegistrationChangeRecord):
            if record.fenced is not None:
                self.brokers[record.broker_id]["fenced"] = record.fenced
            if record.in_controlled_shutdown is not None:
                self.brokers[record.broker_id]["shutdown"] = record.in_controlled_shutdown
        elif isinstance(record, r.TopicRecord):
            self.topics[record.topic_id] = {"name": record.name, "partitions": {}}
            self.used_topic_ids.add(record.topic_id)
        elif isinstance(record, r.RemoveTopicRecord):
            name = self.topics.pop(record.topic_id)["name"]
            self.configs.pop((r.ConfigResourceType.TOPIC, name), None)
        elif isinstance(record, r.PartitionRecord):
            self.topics[record.topic_id]["partitions"][record.partition_id] = {
                f: getattr(record, f) for f in PARTITION_FIELDS}
        elif isinstance(record, r.PartitionChangeRecord):
            p = self.topics[record.topic_id]["partitions"][record.partition_id]
            for f in PARTITION_FIELDS:
                value = getattr(record, f, None)
                if value is not None:
                    p[f] = value
            p["partition_epoch"] += 1
            if record.leader is not None:
                p["leader_epoch"] += 1
        elif isinstance(record, r.ConfigRecord):
            key = (record.resource_type, record.resource_name)
            if record.value is None:
                self.configs.get(key, {}).pop(record.name, None)
                if not self.configs.get(key, True):
                    del self.configs[key]
            else:
                self.configs.setdefault(key, {})[record.name] = record.value
        elif isinstance(record, r.FeatureLevelRecord):
            if record.feature_level == 0:
                self.features.pop(record.name, None)
            else:
                self.features[record.name] = record.feature_level
        elif isinstance(record, r.ProducerIdsRecord):
            self.next_producer_id = record.next_producer_id

    def plain(self) -> dict[str, Any]:
        return {
            "features": dict(self.features),
            "brokers": {k: dict(v) for k, v in self.brokers.items()},
            "topics": {k: {"name": v["name"],
                           "partitions": {p: dict(d) for p, d in v["partitions"].items()}}
                       for k, v in self.topics.items()},
            "names": {v["name"]: k for k, v in self.topics.items()},
            "configs": {k: dict(v) for k, v in self.configs.items()},
            "next_producer_id": self.next_producer_id,
        }


def plain(image: im.MetadataImage) -> dict[str, Any]:
    """``image`` in :meth:`Model.plain`'s shape."""
    return {
        "features": dict(image.features.levels),
        "brokers": {b.broker_id: {"epoch": b.broker_epoch, "incarnation": b.incarnation_id,
                                  "endpoints": b.endpoints, "features": b.features,
                                  "rack": b.rack, "fenced": b.fenced,
                                  "shutdown": b.in_controlled_shutdown, "log_dirs": b.log_dirs}
                    for b in image.cluster.brokers.values()},
        "topics": {t.topic_id: {"name": t.name, "partitions": {
            pid: {"replicas": p.replicas, "isr": p.isr, "leader": p.leader,
                  "leader_epoch": p.leader_epoch, "partition_epoch": p.partition_epoch,
                  "removing_replicas": p.removing_replicas,
                  "adding_replicas": p.adding_replicas,
                  "leader_recovery_state": p.leader_recovery_state,
                  "eligible_leader_replicas": p.elr, "last_known_elr": p.last_known_elr}
            for pid, p in t.partitions.items()}} for t in image.topics.topics.values()},
        "names": dict(image.topics.ids_by_name),
        "configs": {(res.resource_type, res.resource_name): dict(c)
                    for res, c in image.configs.resources.items()},
        "next_producer_id": image.producer_ids.next_producer_id,
    }


# -- valid sequences -----------------------------------------------------------------------------

BROKER_IDS = st.integers(min_value=0, max_value=4)
TOPIC_NAMES = ("a", "b", "c", "d")
SMALL_REPLICAS = st.lists(BROKER_IDS, max_size=4, unique=True).map(tuple)
OPT_SMALL = st.none() | SMALL_REPLICAS


@st.composite
def _next_record(draw: st.DrawFn, model: Model) -> r.MetadataRecord:
    kinds = ["register", "topic", "config", "feature", "producer_ids", "noop"]
    if model.brokers:
        kinds += ["unregister", "fence", "unfence", "change"]
    if model.topics:
        kinds += ["remove_topic", "partition", "partition", "change_partition"]
    if any(t["partitions"] for t in model.topics.values()):
        kinds += ["change_partition"] * 4
    kind = draw(st.sampled_from(kinds))
    if kind == "register":
        return r.RegisterBrokerRecord(
            broker_id=draw(BROKER_IDS), incarnation_id=draw(UUIDS),
            broker_epoch=draw(st.integers(0, 1000)),
            endpoints=draw(st.lists(ENDPOINTS, max_size=2).map(tuple)),
            rack=draw(st.sampled_from(["", "r1", "r2"])), fenced=draw(st.booleans()),
            in_controlled_shutdown=draw(st.booleans()),
            log_dirs=draw(st.lists(UUIDS, max_size=2).map(tuple)))
    if kind in ("unregister", "fence", "unfence", "change"):
        broker_id = draw(st.sampled_from(sorted(model.brokers)))
        epoch = model.brokers[broker_id]["epoch"]
        if kind == "unregister":
            return r.UnregisterBrokerRecord(broker_id=broker_id, broker_epoch=epoch)
        if kind == "fence":
            return r.FenceBrokerRecord(broker_id=broker_id, broker_epoch=epoch)
        if kind == "unfence":
            return r.UnfenceBrokerRecord(broker_id=broker_id, broker_epoch=epoch)
        return r.BrokerRegistrationChangeRecord(
            broker_id=broker_id, broker_epoch=epoch, fenced=draw(st.none() | st.booleans()),
            in_controlled_shutdown=draw(st.none() | st.booleans()))
    if kind == "topic":
        live = {t["name"] for t in model.topics.values()}
        free = [n for n in TOPIC_NAMES if n not in live]
        if not free:
            return r.NoOpRecord()
        topic_id = draw(UUIDS.filter(lambda u: u not in model.used_topic_ids))
        return r.TopicRecord(name=draw(st.sampled_from(free)), topic_id=topic_id)
    if kind == "remove_topic":
        return r.RemoveTopicRecord(topic_id=draw(st.sampled_from(sorted(model.topics))))
    if kind == "partition":
        topic_id = draw(st.sampled_from(sorted(model.topics)))
        replicas = draw(SMALL_REPLICAS)
        return r.PartitionRecord(
            topic_id=topic_id, partition_id=draw(st.integers(0, 3)), replicas=replicas,
            isr=replicas, leader=replicas[0] if replicas else r.NO_LEADER,
            leader_epoch=draw(st.integers(0, 5)), partition_epoch=draw(st.integers(0, 5)),
            leader_recovery_state=draw(RECOVERY),
            eligible_leader_replicas=draw(SMALL_REPLICAS))
    if kind == "change_partition":
        candidates = sorted((tid, pid) for tid, t in model.topics.items()
                            for pid in t["partitions"])
        if not candidates:
            return r.NoOpRecord()
        topic_id, partition_id = draw(st.sampled_from(candidates))
        return r.PartitionChangeRecord(
            topic_id=topic_id, partition_id=partition_id,
            leader=draw(st.none() | BROKER_IDS | st.just(r.NO_LEADER)), isr=draw(OPT_SMALL),
            replicas=draw(OPT_SMALL), removing_replicas=draw(OPT_SMALL),
            adding_replicas=draw(OPT_SMALL), leader_recovery_state=draw(st.none() | RECOVERY),
            eligible_leader_replicas=draw(OPT_SMALL), last_known_elr=draw(OPT_SMALL))
    if kind == "config":
        resource_type = draw(st.sampled_from([r.ConfigResourceType.TOPIC,
                                              r.ConfigResourceType.BROKER]))
        names = TOPIC_NAMES if resource_type is r.ConfigResourceType.TOPIC else ("", "1", "2")
        return r.ConfigRecord(resource_type=resource_type,
                              resource_name=draw(st.sampled_from(names)),
                              name=draw(st.sampled_from(["x.ms", "y.bytes"])),
                              value=draw(st.none() | st.sampled_from(["", "1", "2"])))
    if kind == "feature":
        return r.FeatureLevelRecord(name=draw(st.sampled_from(["metadata.version", "f"])),
                                    feature_level=draw(st.integers(0, 3)))
    if kind == "producer_ids":
        return r.ProducerIdsRecord(broker_id=draw(BROKER_IDS), broker_epoch=draw(INT64),
                                   next_producer_id=draw(st.integers(0, 10**6)))
    return r.NoOpRecord()


@st.composite
def valid_sequences(draw: st.DrawFn, max_size: int = 40) -> tuple[list[r.MetadataRecord], Model]:
    """A record sequence that replays without error, and the model after it."""
    model = Model()
    sequence: list[r.MetadataRecord] = []
    for _ in range(draw(st.integers(0, max_size))):
        record = draw(_next_record(model))
        model.apply(record)
        sequence.append(record)
    return sequence, model
