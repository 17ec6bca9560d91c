"""FeatureControlManager: finalized feature levels (KIP-584), ``metadata.version`` first.

Owns the finalized levels (FeatureLevelRecords replayed), the bootstrap record
an empty metadata log starts with, and the registration check that a broker
supports every finalized level. After Kafka's ``FeatureControlManager``.

kraftlog's ``metadata.version`` levels are its own (its records are not
Kafka's byte for byte): level 1 is the record set of
``protos/kraftlog/v1/metadata.proto`` as first released.

Called by ControllerState. Must not change state outside ``replay``.
"""

from __future__ import annotations

from collections.abc import Sequence

from kraftlog.controller import api
from kraftlog.error_codes import ErrorCode
from kraftlog.metadata.records import FeatureLevelRecord, SupportedFeature
from kraftlog.timeline import snapshot_registry, timeline_hash_map

LATEST_EPOCH = snapshot_registry.LATEST_EPOCH
METADATA_VERSION = "metadata.version"
METADATA_VERSION_MIN = 1
METADATA_VERSION_LATEST = 1


class FeatureControlManager:
    """Finalized feature levels by name; a level of 0 means not finalized."""

    def __init__(self, registry: snapshot_registry.SnapshotRegistry) -> None:
        self._levels: timeline_hash_map.TimelineHashMap[str, int] = (
            timeline_hash_map.TimelineHashMap(registry)
        )

    def replay(self, record: FeatureLevelRecord) -> None:
        if record.feature_level == 0:
            self._levels.pop(record.name, None)
        else:
            self._levels[record.name] = record.feature_level

    def finalized(self, epoch: int = LATEST_EPOCH) -> dict[str, int]:
        return dict(self._levels.items(epoch))

    def metadata_version(self, epoch: int = LATEST_EPOCH) -> int:
        """The finalized ``metadata.version``, 0 before bootstrap."""
        return self._levels.get(METADATA_VERSION, 0, epoch=epoch)

    @staticmethod
    def bootstrap_records() -> tuple[FeatureLevelRecord, ...]:
        """What the first active controller of a new cluster writes to an empty log."""
        return (FeatureLevelRecord(name=METADATA_VERSION, feature_level=METADATA_VERSION_LATEST),)

    def check_broker_supports(self, broker_id: int, features: Sequence[SupportedFeature]) -> None:
        """Raise UNSUPPORTED_VERSION unless the broker supports every finalized level.

        A feature the broker does not list counts as supporting only level 0, as in Kafka.
        """
        ranges = {f.name: (f.min_supported_version, f.max_supported_version) for f in features}
        for name, level in sorted(self._levels.items()):
            low, high = ranges.get(name, (0, 0))
            if not low <= level <= high:
                raise api.RequestError(
                    ErrorCode.UNSUPPORTED_VERSION,
                    f"Unable to register because the broker {broker_id} does not support "
                    f"finalized version {level} of {name}. The broker wants a version between "
                    f"{low} and {high}, inclusive.",
                )
