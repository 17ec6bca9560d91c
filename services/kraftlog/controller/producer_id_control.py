"""ProducerIdControlManager: hands out blocks of producer ids to brokers (KIP-730).

Owns the next unallocated producer id (a TimelineInteger, so it reverts with
everything else). A broker with a current registration gets the next block of
:data:`PRODUCER_ID_BLOCK_SIZE`; the ProducerIdsRecord moves the counter. After
Kafka's ``ProducerIdControlManager``.

Called by ControllerState. Must not change state outside ``replay``.
"""

from __future__ import annotations

from kraftlog.controller import api
from kraftlog.controller.controller_config import PRODUCER_ID_BLOCK_SIZE
from kraftlog.controller.result import ControllerResult
from kraftlog.error_codes import ErrorCode
from kraftlog.errors import InvariantViolation
from kraftlog.metadata.records import ProducerIdsRecord
from kraftlog.timeline import snapshot_registry, timeline_value

_LONG_MAX = 2**63 - 1


class ProducerIdControlManager:
    def __init__(self, registry: snapshot_registry.SnapshotRegistry) -> None:
        self._next_producer_id = timeline_value.TimelineInteger(registry, 0)

    def next_producer_id(self, epoch: int = snapshot_registry.LATEST_EPOCH) -> int:
        return self._next_producer_id.get(epoch)

    def generate_next_block(
        self, broker_id: int, broker_epoch: int
    ) -> ControllerResult[api.AllocateProducerIdsResponse]:
        """The next block for a broker whose epoch the caller has already checked."""
        start = self._next_producer_id.get()
        if start > _LONG_MAX - PRODUCER_ID_BLOCK_SIZE:
            return ControllerResult(
                records=(),
                response=api.AllocateProducerIdsResponse(
                    error=api.ApiError(
                        code=ErrorCode.UNKNOWN_SERVER_ERROR,
                        message="Exhausted all producerIds as the next block's end would exceed "
                        "the maximum long value",
                    )
                ),
            )
        record = ProducerIdsRecord(
            broker_id=broker_id,
            broker_epoch=broker_epoch,
            next_producer_id=start + PRODUCER_ID_BLOCK_SIZE,
        )
        return ControllerResult(
            records=(record,),
            response=api.AllocateProducerIdsResponse(
                producer_id_start=start, producer_id_len=PRODUCER_ID_BLOCK_SIZE
            ),
        )

    def replay(self, record: ProducerIdsRecord) -> None:
        current = self._next_producer_id.get()
        if record.next_producer_id <= current:
            raise InvariantViolation(
                f"next producer id {record.next_producer_id} from ProducerIdsRecord of broker "
                f"{record.broker_id} is not above the current next producer id {current}"
            )
        self._next_producer_id.set(record.next_producer_id)
