"""Client quotas through brokerlite's trio driver, on real sockets: a throttled
connection is muted (not read) for its throttle time after the answer, as Kafka
mutes it (KIP-219), while other connections are served."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from brokerlite_wire import produce_request

from trafka.brokerlite.server import RunningBroker, broker_in_thread
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k18_api_versions as api_versions
from trafka.codec.messages import k19_create_topics as create_topics
from trafka.codec.messages import k49_alter_client_quotas as alter
from trafka.codec.protocol import decode_response

pytestmark = pytest.mark.timeout(60)

A = alter.AlterClientQuotasRequest


@pytest.fixture
def quota_broker(data_dir: Path) -> Iterator[RunningBroker]:
    with broker_in_thread(
        port=0, data_dir=data_dir, quota_window_num=2, quota_window_size_seconds=1
    ) as running:
        yield running


def _set_quota(client: Any, client_id: str, **values: float) -> None:
    entry = A.EntryData(
        entity=[A.EntityData(entity_type="client-id", entity_name=client_id)],
        ops=[A.OpData(key=k, value=v) for k, v in values.items()],
    )
    answer = client.request(49, 1, A(entries=[entry]))
    assert [e.error_code for e in answer.entries] == [ErrorCode.NONE]


def _topic_with_a_producer_quota(admin: Any) -> None:
    """Topic ``t``, and 10,000 bytes a second for client id ``raw``."""
    topic = create_topics.CreateTopicsRequest.CreatableTopic(
        name="t", num_partitions=1, replication_factor=1
    )
    created = admin.request(19, 7, create_topics.CreateTopicsRequest(topics=[topic]))
    assert created.topics[0].error_code == ErrorCode.NONE
    _set_quota(admin, "raw", producer_byte_rate=10_000)


def test_a_throttled_connection_is_muted_after_its_answer(
    quota_broker: RunningBroker, raw_client: Any, make_batch: Any
) -> None:
    _topic_with_a_producer_quota(raw_client(quota_broker.address))

    client = raw_client(quota_broker.address)
    body = produce_request("t", make_batch([b"x" * 15_000]), acks=1)
    sent_at = time.monotonic()
    first = client.send(0, 9, body)
    second = client.send(18, 3, api_versions.ApiVersionsRequest())  # pipelined behind it
    header, answer = decode_response(client.read_frame(), 0, 9)
    assert header.correlation_id == first
    throttle_ms = answer.throttle_time_ms
    assert throttle_ms > 0
    assert answer.responses[0].partition_responses[0].error_code == ErrorCode.NONE

    # Meanwhile another client id is served on its own connection.
    other = raw_client(quota_broker.address)
    assert other.request(18, 3, api_versions.ApiVersionsRequest()).error_code == ErrorCode.NONE

    header, _ = decode_response(client.read_frame(), 18, 3)
    answered_at = time.monotonic()
    assert header.correlation_id == second
    # The muted connection's next request was read no earlier than the throttle
    # time after the first answer was sent, which was after it was asked.
    assert answered_at - sent_at >= throttle_ms / 1000


def test_an_acks_0_producer_over_its_quota_is_muted(
    quota_broker: RunningBroker, raw_client: Any, make_batch: Any
) -> None:
    _topic_with_a_producer_quota(raw_client(quota_broker.address))
    client = raw_client(quota_broker.address)
    body = produce_request("t", make_batch([b"x" * 15_000]), acks=0)
    sent_at = time.monotonic()
    client.send(0, 9, body)  # no answer, but over 15,000 bytes in the 1 s counted
    answer = client.request(18, 3, api_versions.ApiVersionsRequest())
    assert answer.error_code == ErrorCode.NONE
    # (rate - bound) / bound * window: at least (15,000 - 10,000) / 10,000 * 1 s.
    assert time.monotonic() - sent_at >= 0.5
    assert quota_broker.config.quota_window_num == 2
