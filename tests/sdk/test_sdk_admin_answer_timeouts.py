"""CreateTopics, DeleteTopics and CreatePartitions against a controller that takes
the whole ``timeout_ms`` the request gives it.

Kafka's controller answers these at the latest at the request's ``timeout_ms``,
with REQUEST_TIMED_OUT for each topic it has not seen done by then (the change
goes on: Kafka's protocol guide and the CreateTopics/DeleteTopics/CreatePartitions
request schemas, ``timeoutMs``). The SDK asks for that answer a little before it
stops waiting, so the call reports the controller's REQUEST_TIMED_OUT (a fact
about the topic) instead of giving up with no answer at all."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from sdk_fakebroker import FakeBroker

from trafka.codec import ErrorCode, KafkaError
from trafka.codec.messages import k19_create_topics as ct
from trafka.codec.messages import k20_delete_topics as dt
from trafka.codec.messages import k37_create_partitions as cp
from trafka.sdk import NewTopic, open_admin
from trafka.sdk.admin._common import answer_timeout_ms

pytestmark = pytest.mark.timeout(60)

TIMED_OUT = ErrorCode.REQUEST_TIMED_OUT


def _late(asked: list[int], answer: Any) -> Any:
    async def handler(header: Any, body: Any) -> Any:
        asked.append(body.timeout_ms)
        await anyio.sleep(body.timeout_ms / 1000)
        return answer(body)

    return handler


@pytest.mark.anyio
@pytest.mark.parametrize("call", ["create_topics", "delete_topics", "create_partitions"])
async def test_the_controllers_answer_at_its_timeout_is_the_result(
    fake_broker: FakeBroker, call: str
) -> None:
    asked: list[int] = []
    fake_broker.handlers[19] = _late(
        asked,
        lambda body: ct.CreateTopicsResponse(
            topics=[
                ct.CreateTopicsResponse.CreatableTopicResult(name=t.name, error_code=TIMED_OUT)
                for t in body.topics
            ]
        ),
    )
    fake_broker.handlers[20] = _late(
        asked,
        lambda body: dt.DeleteTopicsResponse(
            responses=[
                dt.DeleteTopicsResponse.DeletableTopicResult(name=n, error_code=TIMED_OUT)
                for n in (body.topic_names or [t.name for t in body.topics])
            ]
        ),
    )
    fake_broker.handlers[37] = _late(
        asked,
        lambda body: cp.CreatePartitionsResponse(
            results=[
                cp.CreatePartitionsResponse.CreatePartitionsTopicResult(
                    name=t.name, error_code=TIMED_OUT
                )
                for t in body.topics
            ]
        ),
    )
    async with open_admin(bootstrap_servers=fake_broker.bootstrap) as admin:
        with pytest.raises(KafkaError) as info:
            if call == "create_topics":
                await admin.create_topics([NewTopic("t", 1, 1)], timeout_ms=4000)
            elif call == "delete_topics":
                await admin.delete_topics(["t"], timeout_ms=4000)
            else:
                await admin.create_partitions({"t": 2}, timeout_ms=4000)
    # The broker's own answer, not the client giving up (ApiTimeoutError is no
    # KafkaError with a code).
    assert info.value.code == TIMED_OUT
    # One request, told to answer half the time left sooner (the time left is
    # the 4 s less what finding the controller took).
    [sent] = asked
    assert 0 < sent <= 2000


def test_the_timeout_sent() -> None:
    """5 s less than the wait, or half the wait when that is shorter."""
    assert answer_timeout_ms(60.0) == 55_000
    assert answer_timeout_ms(8.0) == 4_000
    assert answer_timeout_ms(0.0) == 0
