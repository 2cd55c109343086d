"""Admin.elect_leaders (ElectLeaders, KIP-460): what the controller says per
partition, against a scripted broker (an election that happens, a request-level
refusal, v0's preferred-only rule) and against brokerlite (one node: no election
is ever needed)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from sdk_brokers import fresh, module_broker
from sdk_fakebroker import FakeBroker

from trafka.brokerlite import RunningBroker
from trafka.codec import ErrorCode, KafkaError
from trafka.codec.messages import k43_elect_leaders as el
from trafka.sdk import NewTopic, TopicPartition, open_admin
from trafka.sdk.admin.partitions import election_wait

pytestmark = pytest.mark.timeout(60)

R = el.ElectLeadersResponse


def _serve_elections(broker: FakeBroker, *, top_level: int = 0, max_version: int = 2) -> None:
    """ElectLeaders on the scripted broker: t-0 elected, t-1 not needed, others unknown."""
    base = broker.api_versions

    def versions(header: Any, body: Any) -> Any:
        answer = base(header, body)
        answer.api_keys.append(
            type(answer.api_keys[0])(api_key=43, min_version=0, max_version=max_version)
        )
        return answer

    def elect(header: Any, body: Any) -> Any:
        results = []
        for topic in body.topic_partitions or []:
            parts = []
            for p in topic.partitions:
                if topic.topic == "t" and p == 0:
                    code = 0
                elif topic.topic == "t":
                    code = ErrorCode.ELECTION_NOT_NEEDED
                else:
                    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                parts.append(R.PartitionResult(partition_id=p, error_code=code))
            results.append(R.ReplicaElectionResult(topic=topic.topic, partition_result=parts))
        return R(error_code=top_level, replica_election_results=results)

    broker.handlers[18] = versions
    broker.handlers[43] = elect


@pytest.mark.anyio
async def test_per_partition_outcomes(fake_broker: FakeBroker) -> None:
    _serve_elections(fake_broker)
    async with open_admin(bootstrap_servers=fake_broker.bootstrap) as admin:
        found = await admin.elect_leaders([("t", 0), ("t", 1), ("gone", 3)])
        sent = [body for key, _, body in fake_broker.requests if key == 43]
    assert found[TopicPartition("t", 0)] is None
    not_needed = found[TopicPartition("t", 1)]
    assert isinstance(not_needed, KafkaError) and not_needed.code == ErrorCode.ELECTION_NOT_NEEDED
    unknown = found[TopicPartition("gone", 3)]
    assert isinstance(unknown, KafkaError)
    assert unknown.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert sent[0].election_type == 0
    assert [(t.topic, t.partitions) for t in sent[0].topic_partitions] == [
        ("t", [0, 1]),
        ("gone", [3]),
    ]


@pytest.mark.anyio
async def test_refusals(fake_broker: FakeBroker) -> None:
    _serve_elections(fake_broker, top_level=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    async with open_admin(bootstrap_servers=fake_broker.bootstrap) as admin:
        with pytest.raises(KafkaError) as info:
            await admin.elect_leaders([("t", 0)])
        assert info.value.code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        with pytest.raises(ValueError, match="preferred or unclean"):
            await admin.elect_leaders(election_type="random")


@pytest.mark.anyio
async def test_version_0_elects_preferred_leaders_only(fake_broker: FakeBroker) -> None:
    _serve_elections(fake_broker, max_version=0)
    async with open_admin(bootstrap_servers=fake_broker.bootstrap) as admin:
        assert (await admin.elect_leaders([("t", 0)]))[TopicPartition("t", 0)] is None
        with pytest.raises(KafkaError) as info:
            await admin.elect_leaders([("t", 0)], election_type="unclean")
        assert info.value.code == ErrorCode.UNSUPPORTED_VERSION


@pytest.mark.anyio
async def test_the_controller_is_told_to_answer_before_the_client_stops_waiting(
    fake_broker: FakeBroker,
) -> None:
    """A controller that answers an election only at the request's ``timeout_ms``,
    with the election done (Kafka 3.9's ZooKeeper controller, when the wake-up of
    its waiting ElectLeaders is lost): that answer is the result. Had the client
    stopped waiting first, it would have asked again and read ELECTION_NOT_NEEDED."""
    _serve_elections(fake_broker)
    asked: list[int] = []

    async def late(header: Any, body: Any) -> Any:
        asked.append(body.timeout_ms)
        if len(asked) > 1:  # the election is done: nothing left to elect
            return R(
                error_code=0,
                replica_election_results=[
                    R.ReplicaElectionResult(
                        topic="t",
                        partition_result=[
                            R.PartitionResult(
                                partition_id=0, error_code=ErrorCode.ELECTION_NOT_NEEDED
                            )
                        ],
                    )
                ],
            )
        await anyio.sleep(body.timeout_ms / 1000)
        return R(
            error_code=0,
            replica_election_results=[
                R.ReplicaElectionResult(
                    topic="t", partition_result=[R.PartitionResult(partition_id=0, error_code=0)]
                )
            ],
        )

    fake_broker.handlers[43] = late
    async with open_admin(
        bootstrap_servers=fake_broker.bootstrap,
        request_timeout_ms=4000,
        default_api_timeout_ms=20000,
    ) as admin:
        found = await admin.elect_leaders([("t", 0)])
    assert found == {TopicPartition("t", 0): None}
    # One request, told to answer half the 4 s wait sooner (the margin is at
    # most half the wait).
    assert asked == [2000]


def test_the_wait_and_the_timeout_sent() -> None:
    """Each attempt waits request.timeout.ms, at most the time the call has left,
    and asks the controller to answer 5 s sooner, or half the wait when shorter."""
    assert election_wait(30_000, 60.0) == (30.0, 25_000)
    assert election_wait(30_000, 12.0) == (12.0, 7_000)
    assert election_wait(30_000, 4.0) == (4.0, 2_000)
    assert election_wait(30_000, -1.0) == (0.0, 0)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    yield from module_broker(tmp_path_factory, "elect")


def test_against_brokerlite(broker: RunningBroker) -> None:
    topic = fresh("elect")

    async def main() -> None:
        async with open_admin(bootstrap_servers=broker.bootstrap_servers) as admin:
            await admin.create_topics([NewTopic(topic, 2)])
            for kind in ("preferred", "unclean"):
                found = await admin.elect_leaders(
                    [(topic, 0), (topic, 1), (topic, 9)], election_type=kind
                )
                codes = {tp.partition: e.code if e else 0 for tp, e in found.items()}
                assert codes == {
                    0: ErrorCode.ELECTION_NOT_NEEDED,
                    1: ErrorCode.ELECTION_NOT_NEEDED,
                    9: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                }
            # Every partition: nothing needed one, so nothing to report.
            assert await admin.elect_leaders() == {}

    anyio.run(main)
