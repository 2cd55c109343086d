"""ListOffsets on a leader whose high watermark is behind the start of its
epoch (KIP-207): what a client is answered.

Kafka (``Partition.fetchOffsetForTimestamp``, ``ReplicaManager.fetchOffset``):
for a client's request (replica id -1), while the leader's high watermark is
below the offset its epoch began at, the latest offset, and a lookup by time
that finds nothing before the last fetchable offset, are answered
OFFSET_NOT_AVAILABLE (ListOffsets v5+; LEADER_NOT_AVAILABLE before), a
retriable error, instead of an end that would go back; the earliest offset,
and a lookup that finds an offset below the high watermark, are answered.
A found offset at or past the last fetchable one is none (-1) otherwise.

The lag lasts until the followers fetch from the new leader, too short to
catch on a real cluster reliably: the handler is given a leader in that state
(what it reads of the cluster and the log, with these values).
"""

from __future__ import annotations

import types
from typing import Any

import pytest

from trafka.brokerlite.handlers import k02_list_offsets as k02
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k02_list_offsets as m

TS = 1_700_000_000_000


class _Log:
    """A leader's log of offsets 0-9: high watermark 6, log end 10 (the new
    leader's epoch began at 10); record i has timestamp TS + i."""

    log_start_offset = 0
    high_watermark = 6
    log_end_offset = 10

    def offset_for_timestamp(self, ts: int) -> tuple[int, int] | None:
        first = max(ts - TS, 0)
        return (first, TS + first) if first < self.log_end_offset else None

    def offset_of_max_timestamp(self) -> tuple[int, int]:
        return 9, TS + 9


def _ctx(version: int, epoch_start: int) -> Any:
    log = _Log()
    replica = types.SimpleNamespace(epoch_start_offset=epoch_start, leader_epoch=3)
    replicas = types.SimpleNamespace(
        leader_log=lambda topic, partition, epoch: log,
        replica=lambda topic, partition: replica,
    )
    topic = types.SimpleNamespace(num_partitions=1)
    return types.SimpleNamespace(
        version=version,
        authorizer=None,
        cluster=types.SimpleNamespace(replicas=replicas),
        logs=types.SimpleNamespace(topic=lambda name: topic),
        producers=types.SimpleNamespace(last_stable_offset=lambda topic, partition: 6),
    )


def _ask(version: int, timestamp: int, epoch_start: int, replica_id: int = -1) -> tuple[int, int]:
    req = m.ListOffsetsRequest
    body = req(
        replica_id=replica_id,
        topics=[
            req.ListOffsetsTopic(
                name="t",
                partitions=[req.ListOffsetsPartition(partition_index=0, timestamp=timestamp)],
            )
        ],
    )
    (part,) = k02.handle(_ctx(version, epoch_start), body).topics[0].partitions
    return part.error_code, part.offset


@pytest.mark.parametrize(
    ("version", "code"), [(5, ErrorCode.OFFSET_NOT_AVAILABLE), (4, ErrorCode.LEADER_NOT_AVAILABLE)]
)
def test_a_lagging_new_leader_refuses_what_could_go_back(version: int, code: ErrorCode) -> None:
    assert _ask(version, -1, epoch_start=10) == (code, -1)  # latest
    assert _ask(version, TS + 8, epoch_start=10) == (code, -1)  # found at 8: past the HW
    assert _ask(version, TS + 20, epoch_start=10) == (code, -1)  # nothing found
    assert _ask(version, -2, epoch_start=10) == (ErrorCode.NONE, 0)  # earliest
    assert _ask(version, TS + 2, epoch_start=10) == (ErrorCode.NONE, 2)  # below the HW


def test_a_leader_not_lagging_answers_up_to_what_may_be_fetched() -> None:
    assert _ask(7, -1, epoch_start=6) == (ErrorCode.NONE, 6)  # the high watermark
    assert _ask(7, TS + 8, epoch_start=6) == (ErrorCode.NONE, -1)  # past it: none
    assert _ask(7, -3, epoch_start=6) == (ErrorCode.NONE, -1)  # max timestamp at 9: none
    assert _ask(7, TS + 5, epoch_start=6) == (ErrorCode.NONE, 5)


def test_another_replicas_request_is_answered_to_the_log_end() -> None:
    """Kafka: no isolation level for a request that is not a client's, so the
    last fetchable offset is the log end and nothing is refused."""
    assert _ask(7, -1, epoch_start=10, replica_id=2) == (ErrorCode.NONE, 10)
    assert _ask(7, TS + 8, epoch_start=10, replica_id=2) == (ErrorCode.NONE, 8)
