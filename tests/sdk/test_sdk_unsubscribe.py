"""``unsubscribe()``: the consumer gives up its subscription and assignment.

The rule is Java's ``KafkaConsumer.unsubscribe`` (its javadoc): "Unsubscribe
from topics currently subscribed with subscribe(Collection) or
subscribe(Pattern). This also clears any partitions directly assigned through
assign(Collection)", and with group management the member leaves its group,
after its rebalance listener hears the partitions revoked. The tests run the
blocking consumer against an in-process brokerlite, with both group protocols,
and check the group on the broker (DescribeGroups / ConsumerGroupDescribe).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sdk_brokers import fresh, module_broker

from trafka.brokerlite import RunningBroker
from trafka.sdk import UsageError
from trafka.sdk.blocking import Admin, Producer
from trafka.sdk.blocking import Consumer as BlockingConsumer
from trafka.sdk.fetcher import TopicPartition

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    yield from module_broker(tmp_path_factory, "unsubscribe")


def _topic(bs: str, n: int) -> str:
    topic = fresh("unsub")
    with Producer(config={"bootstrap.servers": bs}) as producer:
        for i in range(n):
            producer.send(topic, f"v{i}".encode(), partition=0)
        producer.flush()
    return topic


def _take(consumer: BlockingConsumer[Any, Any], n: int) -> list[Any]:
    """Up to ``n`` records, waiting up to 30 s for them (and the group's assignment)."""
    got: list[Any] = []
    for _ in range(30):
        got += consumer.take(n - len(got), timeout_ms=1_000)
        if len(got) >= n or (consumer.assignment() and n == 1 and not got):
            break
    return got


class _Heard:
    def __init__(self) -> None:
        self.revoked: list[set[TopicPartition]] = []
        self.assigned: list[set[TopicPartition]] = []

    def on_partitions_revoked(self, tps: Any) -> None:
        self.revoked.append(set(tps))

    def on_partitions_assigned(self, tps: Any) -> None:
        self.assigned.append(set(tps))


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_unsubscribe_leaves_the_group_and_may_subscribe_again(
    broker: RunningBroker, protocol: str
) -> None:
    bs = broker.bootstrap_servers
    topic = _topic(bs, 3)
    group = fresh("unsub-g")
    heard = _Heard()
    conf = {
        "bootstrap.servers": bs,
        "group.id": group,
        "group.protocol": protocol,
        "auto.offset.reset": "earliest",
    }
    with BlockingConsumer(config=conf) as consumer, Admin(bootstrap_servers=bs) as admin:
        consumer.subscribe([topic], listener=heard)
        assert len(_take(consumer, 3)) == 3
        assert admin.describe_groups([group])[group].members

        consumer.unsubscribe()

        tp = TopicPartition(topic, 0)
        assert heard.revoked and tp in heard.revoked[-1]
        assert consumer.assignment() == set()
        # The member left: the broker's group has none (auto-commit kept the position).
        assert admin.describe_groups([group])[group].members == ()
        assert admin.list_consumer_group_offsets(group)[tp] == 3

        # Neither subscribed nor assigned: assign() is allowed now, as Java's.
        consumer.assign([tp])
        assert consumer.assignment() == {tp}
        consumer.unsubscribe()
        assert consumer.assignment() == set()
        consumer.subscribe([topic], listener=heard)
        _take(consumer, 1)  # (nothing new: the group's position is at the end)
        assert consumer.assignment() == {tp}


def test_unsubscribe_clears_a_manual_assignment(broker: RunningBroker) -> None:
    bs = broker.bootstrap_servers
    topic = _topic(bs, 2)
    tp = TopicPartition(topic, 0)
    with BlockingConsumer(config={"bootstrap.servers": bs, "auto.offset.reset": "earliest"}) as c:
        c.assign([tp])
        assert len(_take(c, 2)) == 2
        c.unsubscribe()
        assert c.assignment() == set()
        assert c.take(10, timeout_ms=100) == []
        with pytest.raises(UsageError):
            c.subscribe([topic])  # no group.id: subscribing needs one, unsubscribed or not
