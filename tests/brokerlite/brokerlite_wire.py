"""Wire-level helpers for the sans-IO broker tests: requests through the real codec
(``Core`` in conftest) and what the responses hold."""

from __future__ import annotations

from typing import Any

from trafka.codec.messages import k00_produce as produce
from trafka.codec.messages import k01_fetch as fetch
from trafka.codec.messages import k19_create_topics as create_topics
from trafka.codec.messages import k44_incremental_alter_configs as incremental
from trafka.codec.records import decode_batch, encode_batch, iter_batches


def create(core: Any, name: str, partitions: int = 1, **configs: str) -> None:
    body = create_topics.CreateTopicsRequest(
        topics=[
            create_topics.CreateTopicsRequest.CreatableTopic(
                name=name,
                num_partitions=partitions,
                replication_factor=1,
                configs=[
                    create_topics.CreateTopicsRequest.CreatableTopicConfig(name=k, value=v)
                    for k, v in configs.items()
                ],
            )
        ]
    )
    result = core.call(19, 7, body).topics[0]
    assert result.error_code == 0, result


def broker_config_request(broker: str, name: str, op: int, value: str | None) -> Any:
    """IncrementalAlterConfigs of one config (``op`` 0 SET, 1 DELETE) of broker
    resource ``broker`` (its id, or ``""`` for the cluster-wide default)."""
    req = incremental.IncrementalAlterConfigsRequest
    return req(
        resources=[
            req.AlterConfigsResource(
                resource_type=4,
                resource_name=broker,
                configs=[req.AlterableConfig(name=name, config_operation=op, value=value)],
            )
        ]
    )


def batch(
    core: Any,
    values: list[bytes],
    pid: int = -1,
    epoch: int = -1,
    seq: int = -1,
    *,
    txn: bool = False,
) -> bytes:
    return encode_batch(
        [(core.now, None, v, ()) for v in values],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=txn,
    )


def produce_request(
    topic: str,
    records: bytes | None,
    *,
    partition: int = 0,
    acks: int = -1,
    tid: str | None = None,
) -> produce.ProduceRequest:
    """A Produce request for one partition."""
    return produce.ProduceRequest(
        transactional_id=tid,
        acks=acks,
        timeout_ms=5000,
        topic_data=[
            produce.ProduceRequest.TopicProduceData(
                name=topic,
                partition_data=[
                    produce.ProduceRequest.PartitionProduceData(index=partition, records=records)
                ],
            )
        ],
    )


def produce_body(topic: str, values: list[bytes], *, acks: int = -1) -> produce.ProduceRequest:
    """A Produce request (acks=all) of one plain batch of ``values`` for partition 0."""
    records = encode_batch([(1_700_000_000_000 + i, None, v, ()) for i, v in enumerate(values)])
    return produce_request(topic, records, acks=acks)


def send(
    core: Any, topic: str, records: bytes, *, partition: int = 0, tid: str | None = None
) -> Any:
    body = produce_request(topic, records, partition=partition, tid=tid)
    return core.call(0, 9, body).responses[0].partition_responses[0]


def fetch_body(
    topic: str,
    offset: int = 0,
    *,
    partition: int = 0,
    isolation: int = 0,
    max_wait_ms: int = 0,
    max_bytes: int = 64 << 20,
) -> fetch.FetchRequest:
    """A Fetch of one partition from ``offset``, ``max_bytes`` for it and in all."""
    return fetch.FetchRequest(
        max_wait_ms=max_wait_ms,
        min_bytes=1,
        max_bytes=max_bytes,
        isolation_level=isolation,
        topics=[
            fetch.FetchRequest.FetchTopic(
                topic=topic,
                partitions=[
                    fetch.FetchRequest.FetchPartition(
                        partition=partition, fetch_offset=offset, partition_max_bytes=max_bytes
                    )
                ],
            )
        ],
    )


def read(core: Any, topic: str, *, offset: int = 0, isolation: int = 0, partition: int = 0) -> Any:
    body = fetch_body(topic, offset, partition=partition, isolation=isolation, max_bytes=1 << 20)
    return core.call(1, 12, body).responses[0].partitions[0]


def markers(records: bytes | None) -> list[tuple[int, bool]]:
    """(offset, commit?) of each control batch."""
    out = []
    for header, raw in iter_batches(records or b""):
        if header.is_control:
            key = decode_batch(raw).records[0].key or b""
            out.append((header.base_offset, key[2:4] == b"\x00\x01"))
    return out
