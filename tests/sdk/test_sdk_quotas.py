"""Client quotas through the admin API (DescribeClientQuotas, AlterClientQuotas, KIP-546).

The types on their own; the requests and the handling of every answer against
the scripted fake broker (what goes on the wire, errors per entity and for the
whole request, retries); and against brokerlite: a round trip through filters,
``validate_only``, the broker's refusals, the authorizer, and a producer that a
quota set through the API really throttles.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from sdk_brokers import fresh, module_broker
from sdk_fakebroker import FakeBroker

from trafka.brokerlite import RunningBroker
from trafka.brokerlite.server import broker_in_thread
from trafka.codec import ErrorCode, KafkaError, UnsupportedVersionError
from trafka.codec.messages import k18_api_versions as av
from trafka.codec.messages import k48_describe_client_quotas as dcq
from trafka.codec.messages import k49_alter_client_quotas as acq
from trafka.sdk import (
    ClientQuotaAlteration,
    ClientQuotaEntity,
    ClientQuotaFilterComponent,
    NewTopic,
    TopicPartition,
    open_admin,
    open_consumer,
    open_producer,
)

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

Entity = ClientQuotaEntity
Filter = ClientQuotaFilterComponent
Alter = ClientQuotaAlteration

# -- the types ---------------------------------------------------------------------------------


def test_entities_from_keywords_and_mappings_are_the_same() -> None:
    a = Entity(user="alice", client_id=None)
    b = Entity({"client-id": None, "user": "alice"})
    c = Entity([("user", "alice"), ("client-id", None)])
    assert a == b == c and hash(a) == hash(b) and len({a, b, c}) == 1
    assert a.entries == (("user", "alice"), ("client-id", None))
    assert a.as_dict() == {"user": "alice", "client-id": None}
    assert repr(a) == "ClientQuotaEntity(user='alice', client_id=None)"
    assert str(a) == "user=alice, client-id=<default>"
    assert eval(repr(a), {"ClientQuotaEntity": Entity}) == a
    assert Entity(user="alice") != a and Entity(user=None) != Entity(user="alice")
    assert Entity(ip="10.0.0.1").entries == (("ip", "10.0.0.1"),)
    assert repr(Entity({"tenant": "x"})) == "ClientQuotaEntity({'tenant': 'x'})"
    assert Entity.USER == "user" and Entity.CLIENT_ID == "client-id" and Entity.IP == "ip"


def test_entity_mistakes_are_refused() -> None:
    with pytest.raises(ValueError, match="twice"):
        Entity({"user": "a"}, user="b")
    with pytest.raises(ValueError, match=r"entries\[0\] entity type must not be empty"):
        Entity({"": "a"})
    with pytest.raises(TypeError, match="user must be a str or None"):
        Entity(user=7)  # type: ignore[arg-type]


def test_entities_sort_defaults_first() -> None:
    entities = [Entity(user="b"), Entity(client_id="c"), Entity(user=None), Entity(user="a")]
    assert sorted(entities, key=Entity.sort_key) == [
        Entity(user=None),
        Entity(user="a"),
        Entity(user="b"),
        Entity(client_id="c"),
    ]


def test_filter_components() -> None:
    assert Filter.of_entity("user", "alice") == Filter("user", 0, "alice")
    assert Filter.of_default_entity("client-id") == Filter("client-id", 1)
    assert Filter.of_entity_type("ip") == Filter("ip", 2)
    for bad in (("user", 0, None), ("user", 1, "x"), ("user", 2, "x"), ("user", 3), ("", 2)):
        with pytest.raises(ValueError):
            Filter(*bad)  # type: ignore[arg-type]


def test_alterations_check_their_ops() -> None:
    alt = Alter(Entity(user="a"), {"producer_byte_rate": 1024, "request_percentage": None})
    assert alt.ops == {"producer_byte_rate": 1024.0, "request_percentage": None}
    assert isinstance(alt.ops["producer_byte_rate"], float)
    with pytest.raises(TypeError):
        Alter(Entity(user="a"), {"producer_byte_rate": "1024"})  # type: ignore[dict-item]
    with pytest.raises(TypeError):
        Alter(Entity(user="a"), {"producer_byte_rate": True})
    with pytest.raises(ValueError, match="finite"):
        Alter(Entity(user="a"), {"producer_byte_rate": float("nan")})
    with pytest.raises(ValueError, match="key"):
        Alter(Entity(user="a"), {"": 1.0})


# -- against the scripted fake broker ------------------------------------------------------------

R48 = dcq.DescribeClientQuotasResponse
R49 = acq.AlterClientQuotasResponse


def _entity_pairs(entity_data: Any) -> list[tuple[str, str | None]]:
    return [(e.entity_type, e.entity_name) for e in entity_data]


async def test_describe_sends_the_filter_and_reads_the_entries(fake_broker: FakeBroker) -> None:
    asked: list[Any] = []

    def describe(header: Any, body: Any) -> Any:
        asked.append(body)
        return R48(
            entries=[
                R48.EntryData(
                    entity=[R48.EntityData(entity_type="user", entity_name="bob")],
                    values=[R48.ValueData(key="producer_byte_rate", value=2048.0)],
                ),
                R48.EntryData(
                    entity=[
                        R48.EntityData(entity_type="client-id", entity_name=None),
                        R48.EntityData(entity_type="user", entity_name=None),
                    ],
                    values=[
                        R48.ValueData(key="request_percentage", value=25.0),
                        R48.ValueData(key="consumer_byte_rate", value=1e6),
                    ],
                ),
            ]
        )

    fake_broker.handlers[48] = describe
    with anyio.fail_after(20):
        async with open_admin(bootstrap_servers=fake_broker.bootstrap) as admin:
            found = await admin.describe_client_quotas(
                [Filter.of_entity("user", "bob"), Filter.of_default_entity("client-id")],
                strict=True,
            )
            everything = await admin.describe_client_quotas()
    assert [
        [(c.entity_type, c.match_type, c.match) for c in body.components] for body in asked
    ] == [[("user", 0, "bob"), ("client-id", 1, None)], []]
    assert [body.strict for body in asked] == [True, False]
    assert list(found) == [Entity(user=None, client_id=None), Entity(user="bob")]
    assert found[Entity(user=None, client_id=None)] == {
        "consumer_byte_rate": 1e6,
        "request_percentage": 25.0,
    }
    assert found[Entity(user="bob")] == {"producer_byte_rate": 2048.0}
    assert everything == found


@pytest.mark.parametrize(
    "code", [ErrorCode.CLUSTER_AUTHORIZATION_FAILED, ErrorCode.INVALID_REQUEST]
)
async def test_a_refused_describe_raises_the_brokers_error(
    fake_broker: FakeBroker, code: ErrorCode
) -> None:
    fake_broker.handlers[48] = lambda h, b: R48(
        error_code=code, error_message="said the broker", entries=None
    )
    with anyio.fail_after(20):
        async with open_admin(bootstrap_servers=fake_broker.bootstrap) as admin:
            with pytest.raises(KafkaError) as info:
                await admin.describe_client_quotas([Filter.of_entity_type("user")])
    assert info.value.code == code and "said the broker" in str(info.value)


async def test_a_transient_describe_error_is_retried(fake_broker: FakeBroker) -> None:
    calls = 0

    def describe(header: Any, body: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 1:
            return R48(error_code=ErrorCode.REQUEST_TIMED_OUT, entries=None)
        return R48(entries=[])

    fake_broker.handlers[48] = describe
    with anyio.fail_after(20):
        async with open_admin(
            bootstrap_servers=fake_broker.bootstrap, retry_backoff_ms=10
        ) as admin:
            assert await admin.describe_client_quotas() == {}
    assert calls == 2


def _answer_alter(
    results: dict[tuple[tuple[str, str | None], ...], int],
) -> Any:
    """A handler answering each entity with the code ``results`` gives it (default
    0), entries in reverse order (Kafka's order is undefined); it keeps the bodies."""
    bodies: list[Any] = []

    def alter(header: Any, body: Any) -> Any:
        bodies.append(body)
        entries = []
        for entry in reversed(body.entries):
            pairs = tuple(_entity_pairs(entry.entity))
            code = results.get(tuple(sorted(pairs)), 0)
            entries.append(
                R49.EntryData(
                    error_code=code,
                    error_message="nope" if code else None,
                    entity=[R49.EntityData(entity_type=t, entity_name=n) for t, n in pairs],
                )
            )
        return R49(entries=entries)

    alter.bodies = bodies  # type: ignore[attr-defined]
    return alter


async def test_alter_sends_sets_removals_and_validate_only(fake_broker: FakeBroker) -> None:
    handler = _answer_alter({})
    fake_broker.handlers[49] = handler
    with anyio.fail_after(20):
        async with open_admin(bootstrap_servers=fake_broker.bootstrap) as admin:
            await admin.alter_client_quotas(
                [
                    Alter(Entity(user="alice", client_id=None), {"producer_byte_rate": 1024}),
                    Alter(Entity(ip="10.1.2.3"), {"connection_creation_rate": None}),
                ],
                validate_only=True,
            )
            await admin.alter_client_quotas([])  # nothing to send
    (body,) = handler.bodies
    assert body.validate_only is True
    assert [_entity_pairs(e.entity) for e in body.entries] == [
        [("user", "alice"), ("client-id", None)],
        [("ip", "10.1.2.3")],
    ]
    assert [[(o.key, o.value, o.remove) for o in e.ops] for e in body.entries] == [
        [("producer_byte_rate", 1024.0, False)],
        [("connection_creation_rate", 0.0, True)],
    ]


async def test_alter_raises_the_first_failure_in_the_order_given(fake_broker: FakeBroker) -> None:
    bad_ip = (("ip", "nowhere"),)
    bad_user = (("user", "x"),)
    handler = _answer_alter(
        {bad_ip: ErrorCode.INVALID_REQUEST, bad_user: ErrorCode.CLUSTER_AUTHORIZATION_FAILED}
    )
    fake_broker.handlers[49] = handler
    with anyio.fail_after(20):
        async with open_admin(bootstrap_servers=fake_broker.bootstrap) as admin:
            with pytest.raises(KafkaError) as info:
                await admin.alter_client_quotas(
                    [
                        Alter(Entity(user="ok"), {"request_percentage": 10}),
                        Alter(Entity(ip="nowhere"), {"connection_creation_rate": 5}),
                        Alter(Entity(user="x"), {"request_percentage": 10}),
                    ]
                )
    assert info.value.code == ErrorCode.INVALID_REQUEST
    assert "ip=nowhere" in str(info.value) and "nope" in str(info.value)
    assert len(handler.bodies) == 1  # answers, not retried


async def test_alter_retries_only_entities_refused_for_a_passing_reason(
    fake_broker: FakeBroker,
) -> None:
    first = {(("user", "later"),): ErrorCode.NOT_CONTROLLER}
    handler = _answer_alter(first)
    inner = handler

    def alter(header: Any, body: Any) -> Any:
        answer = inner(header, body)
        first.clear()  # the next attempt succeeds
        return answer

    fake_broker.handlers[49] = alter
    with anyio.fail_after(20):
        async with open_admin(
            bootstrap_servers=fake_broker.bootstrap, retry_backoff_ms=10
        ) as admin:
            await admin.alter_client_quotas(
                [
                    Alter(Entity(user="now"), {"request_percentage": 10}),
                    Alter(Entity(user="later"), {"request_percentage": 20}),
                ]
            )
    assert [[_entity_pairs(e.entity) for e in b.entries] for b in handler.bodies] == [
        [[("user", "now")], [("user", "later")]],
        [[("user", "later")]],
    ]


async def test_an_entity_the_broker_does_not_answer_for_fails(fake_broker: FakeBroker) -> None:
    fake_broker.handlers[49] = lambda h, b: R49(entries=[])
    with anyio.fail_after(20):
        async with open_admin(bootstrap_servers=fake_broker.bootstrap) as admin:
            with pytest.raises(KafkaError, match="no answer") as info:
                await admin.alter_client_quotas([Alter(Entity(user="a"), {"x": 1})])
    assert info.value.code == ErrorCode.UNKNOWN_SERVER_ERROR


async def test_an_entity_twice_is_refused_before_sending(fake_broker: FakeBroker) -> None:
    handler = _answer_alter({})
    fake_broker.handlers[49] = handler
    with anyio.fail_after(20):
        async with open_admin(bootstrap_servers=fake_broker.bootstrap) as admin:
            with pytest.raises(ValueError, match="twice"):
                await admin.alter_client_quotas(
                    [
                        Alter(Entity(user="a"), {"producer_byte_rate": 1}),
                        Alter(Entity({"user": "a"}), {"consumer_byte_rate": 1}),
                    ]
                )
    assert handler.bodies == []


async def test_a_broker_without_the_apis(fake_broker: FakeBroker) -> None:
    plain = fake_broker.api_versions

    def without_quotas(header: Any, body: Any) -> Any:
        answer = plain(header, body)
        keys = [k for k in answer.api_keys if k.api_key not in (48, 49)]
        return dataclasses.replace(answer, api_keys=keys)

    fake_broker.handlers[18] = without_quotas
    assert isinstance(plain(None, None), av.ApiVersionsResponse)
    with anyio.fail_after(20):
        async with open_admin(bootstrap_servers=fake_broker.bootstrap) as admin:
            with pytest.raises(UnsupportedVersionError, match="DescribeClientQuotas"):
                await admin.describe_client_quotas()
            with pytest.raises(UnsupportedVersionError, match="AlterClientQuotas"):
                await admin.alter_client_quotas([Alter(Entity(user="a"), {"x": 1})])


# -- against brokerlite --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    yield from module_broker(tmp_path_factory, "quotas")


async def test_round_trip_through_filters(broker: RunningBroker) -> None:
    u = fresh("quser")
    alice, alice_default = Entity(user=u), Entity(user=u, client_id=None)
    alice_app = Entity(user=u, client_id="app")
    with anyio.fail_after(30):
        async with open_admin(bootstrap_servers=broker.bootstrap_servers) as admin:
            await admin.alter_client_quotas(
                [
                    Alter(alice, {"producer_byte_rate": 1048576, "consumer_byte_rate": 2097152}),
                    Alter(alice_default, {"request_percentage": 50}),
                    Alter(alice_app, {"controller_mutation_rate": 10}),
                ]
            )
            mine = await admin.describe_client_quotas([Filter.of_entity("user", u)])
            assert mine == {
                alice: {"consumer_byte_rate": 2097152.0, "producer_byte_rate": 1048576.0},
                alice_default: {"request_percentage": 50.0},
                alice_app: {"controller_mutation_rate": 10.0},
            }
            assert list(mine) == [alice, alice_default, alice_app]
            only_user = await admin.describe_client_quotas(
                [Filter.of_entity("user", u)], strict=True
            )
            assert list(only_user) == [alice]
            defaults = await admin.describe_client_quotas(
                [Filter.of_entity("user", u), Filter.of_default_entity("client-id")]
            )
            assert list(defaults) == [alice_default]
            named = await admin.describe_client_quotas(
                [Filter.of_entity("user", u), Filter.of_entity_type("client-id")]
            )
            assert list(named) == [alice_default, alice_app]
            # Removing one key keeps the rest; removing the last forgets the entity.
            await admin.alter_client_quotas(
                [
                    Alter(alice, {"consumer_byte_rate": None}),
                    Alter(alice_default, {"request_percentage": None}),
                ]
            )
            after = await admin.describe_client_quotas([Filter.of_entity("user", u)])
            assert after == {
                alice: {"producer_byte_rate": 1048576.0},
                alice_app: {"controller_mutation_rate": 10.0},
            }


async def test_validate_only_changes_nothing(broker: RunningBroker) -> None:
    client = fresh("qclient")
    entity = Entity(client_id=client)
    with anyio.fail_after(30):
        async with open_admin(bootstrap_servers=broker.bootstrap_servers) as admin:
            await admin.alter_client_quotas(
                [Alter(entity, {"producer_byte_rate": 4096})], validate_only=True
            )
            mine = [Filter.of_entity("client-id", client)]
            assert await admin.describe_client_quotas(mine) == {}
            with pytest.raises(KafkaError) as info:
                await admin.alter_client_quotas(
                    [Alter(entity, {"no_such_quota": 1})], validate_only=True
                )
            assert info.value.code == ErrorCode.INVALID_REQUEST
            await admin.alter_client_quotas([Alter(entity, {"producer_byte_rate": 4096})])
            assert await admin.describe_client_quotas(mine) == {
                entity: {"producer_byte_rate": 4096.0}
            }


async def test_the_brokers_refusals(broker: RunningBroker) -> None:
    user = fresh("quser")
    good = Entity(user=user)
    with anyio.fail_after(30):
        async with open_admin(bootstrap_servers=broker.bootstrap_servers) as admin:
            with pytest.raises(KafkaError) as info:
                await admin.alter_client_quotas(
                    [
                        Alter(good, {"request_percentage": 30}),
                        Alter(Entity(ip="10.0.0.1"), {"producer_byte_rate": 5}),
                    ]
                )
            assert info.value.code == ErrorCode.INVALID_REQUEST
            assert "ip=10.0.0.1" in str(info.value)
            # The valid entity of the same call was altered.
            assert await admin.describe_client_quotas([Filter.of_entity("user", user)]) == {
                good: {"request_percentage": 30.0}
            }
            with pytest.raises(KafkaError) as info:
                await admin.describe_client_quotas(
                    [Filter.of_entity_type("ip"), Filter.of_entity_type("user")]
                )
            assert info.value.code == ErrorCode.INVALID_REQUEST


async def test_a_quota_set_through_the_api_throttles_a_producer(broker: RunningBroker) -> None:
    topic, client_id = fresh("qtopic"), fresh("throttled")
    value = b"x" * 1000
    with anyio.fail_after(60):
        async with open_admin(bootstrap_servers=broker.bootstrap_servers) as admin:
            await admin.alter_client_quotas(
                [Alter(Entity(client_id=client_id), {"producer_byte_rate": 1024})]
            )
        async with open_producer(
            bootstrap_servers=broker.bootstrap_servers, client_id=client_id, linger_ms=0
        ) as producer:
            # The quota's windows absorb about ten seconds' worth first; stop at
            # the first throttled answer, then send once more (it waits it out).
            sent = 0
            while not any(b.throttle.count for b in producer.statistics().brokers.values()):
                assert sent < 100, "never throttled"
                await producer.send_and_wait(topic, value)
                sent += 1
            (node,) = [n for n, b in producer.statistics().brokers.items() if b.throttle.count]
            conn = producer.cluster.ready_connection(node)
            assert conn is not None
            until = conn.throttled_until
            last = await producer.send_and_wait(topic, value)
            # It could not have been written, so not answered, before the throttle ended.
            assert anyio.current_time() >= until
            stats = producer.statistics()
    assert last.offset == sent
    (throttle,) = [b.throttle for b in stats.brokers.values() if b.throttle.count]
    assert throttle.max_ms is not None and throttle.max_ms > 0
    assert stats.records_sent == sent + 1 and stats.records_failed == 0


def test_a_consumer_under_a_byte_rate_reads_everything_once(tmp_path: Path) -> None:
    """brokerlite answers a Fetch over ``consumer_byte_rate`` empty, with a
    throttle time: the consumer waits it out and still reads each record once."""
    topic, client_id = "metered", "metered-reader"
    values = [b"%04d" % i + b"y" * 996 for i in range(24)]

    async def main(bootstrap: str) -> None:
        with anyio.fail_after(60):
            async with open_admin(bootstrap_servers=bootstrap) as admin:
                await admin.create_topics([NewTopic(topic, 1)])
                await admin.alter_client_quotas(
                    [Alter(Entity(client_id=client_id), {"consumer_byte_rate": 6000})]
                )
            # One batch a record: a Fetch answer always holds at least one whole
            # batch, and one bigger than the quota allows could never be answered.
            async with open_producer(bootstrap_servers=bootstrap, linger_ms=0) as producer:
                for v in values:
                    await producer.send_and_wait(topic, v)
            seen: list[bytes] = []
            async with open_consumer(
                bootstrap_servers=bootstrap,
                client_id=client_id,
                auto_offset_reset="earliest",
                fetch_max_bytes=1 << 20,
            ) as consumer:
                consumer.assign([TopicPartition(topic, 0)])
                while len(seen) < len(values):
                    got = await consumer.getmany(timeout_ms=2000)
                    seen += [r.value for recs in got.values() for r in recs]
                stats = consumer.statistics()
            assert seen == values
            throttles = [b.throttle for b in stats.brokers.values() if b.throttle.count]
            assert throttles and throttles[0].max_ms is not None and throttles[0].max_ms > 0

    # Two 1 s windows: an answer holds at most 6,000 bytes, and the rate is
    # measured over about a second, so reading 24,000 bytes must be throttled.
    with broker_in_thread(
        port=0, data_dir=tmp_path / "data", quota_window_num=2, quota_window_size_seconds=1
    ) as running:
        anyio.run(main, running.bootstrap_servers, backend="trio")


STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


def test_without_cluster_permissions_both_calls_are_refused(tmp_path: Path) -> None:
    async def main(bootstrap: str) -> None:
        with anyio.fail_after(30):
            async with open_admin(bootstrap_servers=bootstrap) as admin:
                with pytest.raises(KafkaError) as info:
                    await admin.describe_client_quotas()
                assert info.value.code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
                with pytest.raises(KafkaError) as info:
                    await admin.alter_client_quotas([Alter(Entity(user="a"), {"x": 1})])
                assert info.value.code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED

    with broker_in_thread(
        port=0, host="127.0.0.1", data_dir=tmp_path, authorizer_class_name=STANDARD
    ) as running:
        anyio.run(main, running.bootstrap_servers)


def test_the_blocking_admin_has_the_calls_too(broker: RunningBroker) -> None:
    from trafka.sdk.blocking import Admin

    user = fresh("blocking")
    entity = Entity(user=user, client_id=None)
    with Admin(bootstrap_servers=broker.bootstrap_servers) as admin:
        admin.alter_client_quotas([Alter(entity, {"consumer_byte_rate": 65536})])
        found = admin.describe_client_quotas([Filter.of_entity("user", user)])
    assert found == {entity: {"consumer_byte_rate": 65536.0}}
