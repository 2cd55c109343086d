"""Records and their offsets by partition leader: ListOffsets (built and read by
:mod:`trafka.sdk.fetcher`, shared with the consumer) and DeleteRecords.
No I/O; :class:`~trafka.sdk.admin.Admin` sends the requests to each leader.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from trafka.codec import KafkaError
from trafka.codec.messages import k21_delete_records as dr

from ..errors import ArgumentValueError
from ..fetcher import EARLIEST, LATEST, TopicPartition, build_list_offsets, parse_list_offsets
from ._common import by_topic

__all__ = [
    "delete_records_request",
    "list_offsets_request",
    "offset_targets",
    "read_delete_records",
    "read_list_offsets",
]


def offset_targets(specs: Mapping[TopicPartition, str | int]) -> dict[TopicPartition, int]:
    """ListOffsets' target per partition: ``"earliest"``, ``"latest"`` or a timestamp.

    Raises:
        ValueError: any other spec.
    """
    targets: dict[TopicPartition, int] = {}
    for tp, spec in specs.items():
        if spec == "earliest":
            targets[TopicPartition(*tp)] = EARLIEST
        elif spec == "latest":
            targets[TopicPartition(*tp)] = LATEST
        elif isinstance(spec, int) and spec >= 0:
            targets[TopicPartition(*tp)] = spec
        else:
            raise ArgumentValueError(
                f"offset spec must be 'earliest', 'latest' or a timestamp >= 0, got {spec!r}"
            )
    return targets


def list_offsets_request(version: int, targets: Mapping[TopicPartition, int]) -> Any:
    """ListOffsets at ``version`` for one leader's partitions."""
    return build_list_offsets(dict(targets), version)


def read_list_offsets(resp: Any) -> dict[TopicPartition, tuple[int, int] | KafkaError | None]:
    """Per partition ``(offset, timestamp)``, None when there is no such offset
    (a timestamp past the last record), or its error."""
    return {
        tp: res if isinstance(res, KafkaError) or res[0] >= 0 else None
        for tp, res in parse_list_offsets(resp).items()
    }


def delete_records_request(
    offsets: Mapping[TopicPartition, int], partitions: Iterable[TopicPartition], *, timeout_ms: int
) -> Any:
    """DeleteRecords before ``offsets`` (-1: the high watermark) of ``partitions``."""
    req = dr.DeleteRecordsRequest
    return req(
        topics=[
            req.DeleteRecordsTopic(
                name=t,
                partitions=[
                    req.DeleteRecordsPartition(
                        partition_index=p, offset=offsets[TopicPartition(t, p)]
                    )
                    for p in ps
                ],
            )
            for t, ps in by_topic(partitions).items()
        ],
        timeout_ms=timeout_ms,
    )


def read_delete_records(resp: Any) -> dict[TopicPartition, int | KafkaError]:
    """Per partition its new low watermark, or its error."""
    return {
        TopicPartition(t.name, p.partition_index): (
            KafkaError(p.error_code, f"deleting records of {t.name}-{p.partition_index}")
            if p.error_code
            else p.low_watermark
        )
        for t in resp.topics
        for p in t.partitions
    }
