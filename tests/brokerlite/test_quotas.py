"""Client quotas in brokerlite (:mod:`trafka.brokerlite.quotas`) through the sans-IO core.

DescribeClientQuotas and AlterClientQuotas as Kafka answers them (validation,
filters, authorization, durability across a restart); KIP-55's order of
precedence and which connections share a rate; the sampled rate against a plain
model of Kafka's rules; and the throttling of Produce, Fetch, the request
quota and the controller mutation quota, on a clock the test controls. Real
clients and sockets are in ``test_quotas_interop`` and ``test_quotas_server``.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from brokerlite_wire import create, fetch_body, produce_request
from hypothesis import given, settings
from hypothesis import strategies as st

from trafka.brokerlite.outcomes import NoResponse, Reply
from trafka.brokerlite.quotas import (
    QuotaError,
    Quotas,
    QuotaStore,
    QuotaStoreError,
    Rate,
    TokenBucket,
    entity_of,
)
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k19_create_topics as create_topics
from trafka.codec.messages import k20_delete_topics as delete_topics
from trafka.codec.messages import k37_create_partitions as create_partitions
from trafka.codec.messages import k48_describe_client_quotas as describe
from trafka.codec.messages import k49_alter_client_quotas as alter

pytestmark = pytest.mark.timeout(120)

A = alter.AlterClientQuotasRequest
D = describe.DescribeClientQuotasRequest
INVALID = ErrorCode.INVALID_REQUEST


def _entry(entity: dict[str, str | None], **ops: float | None) -> Any:
    return A.EntryData(
        entity=[A.EntityData(entity_type=t, entity_name=n) for t, n in entity.items()],
        ops=[
            A.OpData(key=k, value=0.0 if v is None else v, remove=v is None) for k, v in ops.items()
        ],
    )


def _alter(core: Any, *entries: Any, validate_only: bool = False, version: int = 1) -> list[Any]:
    response = core.call(49, version, A(entries=list(entries), validate_only=validate_only))
    return [(e.error_code, e.error_message) for e in response.entries]


def _describe(core: Any, *components: tuple[str, int, str | None], strict: bool = False) -> Any:
    return core.call(
        48,
        1,
        D(
            components=[
                D.ComponentData(entity_type=t, match_type=m, match=n) for t, m, n in components
            ],
            strict=strict,
        ),
    )


def _found(response: Any) -> dict[tuple[tuple[str, str | None], ...], dict[str, float]]:
    assert response.error_code == ErrorCode.NONE, response
    return {
        tuple((e.entity_type, e.entity_name) for e in entry.entity): {
            v.key: v.value for v in entry.values
        }
        for entry in response.entries
    }


# -- AlterClientQuotas and DescribeClientQuotas ------------------------------------------------


@pytest.mark.parametrize("version", [0, 1])
def test_alter_then_describe(core: Any, version: int) -> None:
    assert (
        _alter(
            core,
            _entry({"user": "alice"}, producer_byte_rate=1024, request_percentage=12.5),
            _entry({"user": None, "client-id": "app"}, consumer_byte_rate=2048),
            _entry({"client-id": None}, controller_mutation_rate=0.5),
            _entry({"ip": "10.0.0.1"}, connection_creation_rate=20),
            version=version,
        )
        == [(ErrorCode.NONE, None)] * 4
    )
    everything = _found(_describe(core))
    assert everything == {
        (("user", "alice"),): {"producer_byte_rate": 1024.0, "request_percentage": 12.5},
        (("client-id", "app"), ("user", None)): {"consumer_byte_rate": 2048.0},
        (("client-id", None),): {"controller_mutation_rate": 0.5},
        (("ip", "10.0.0.1"),): {"connection_creation_rate": 20.0},
    }
    # Remove one key, change another: the entity keeps the rest.
    assert _alter(
        core, _entry({"user": "alice"}, producer_byte_rate=None, request_percentage=50)
    ) == [(ErrorCode.NONE, None)]
    assert _found(_describe(core, ("user", 0, "alice")))[(("user", "alice"),)] == {
        "request_percentage": 50.0
    }
    # Removing its last key forgets the entity.
    _alter(core, _entry({"user": "alice"}, request_percentage=None))
    assert (("user", "alice"),) not in _found(_describe(core))


def test_filters_match_as_kafka(core: Any) -> None:
    entities: list[dict[str, str | None]] = [
        {"user": "alice"},
        {"user": None},
        {"user": "alice", "client-id": "app"},
        {"user": None, "client-id": None},
        {"client-id": "app"},
        {"ip": "127.0.0.1"},
        {"ip": None},
    ]
    for i, entity in enumerate(entities):
        key = "connection_creation_rate" if "ip" in entity else "producer_byte_rate"
        assert _alter(core, _entry(entity, **{key: 100 + i})) == [(ErrorCode.NONE, None)]

    def found(*components: tuple[str, int, str | None], strict: bool = False) -> set[Any]:
        return set(_found(_describe(core, *components, strict=strict)))

    alice = (("user", "alice"),)
    default_user = (("user", None),)
    alice_app = (("client-id", "app"), ("user", "alice"))
    defaults = (("client-id", None), ("user", None))
    app = (("client-id", "app"),)
    ip, default_ip = (("ip", "127.0.0.1"),), (("ip", None),)
    assert found() == {alice, default_user, alice_app, defaults, app, ip, default_ip}
    assert found(strict=True) == set()
    assert found(("user", 0, "alice")) == {alice, alice_app}
    assert found(("user", 0, "alice"), strict=True) == {alice}
    assert found(("user", 1, None)) == {default_user, defaults}
    assert found(("user", 2, None)) == {alice, default_user, alice_app, defaults}  # default too
    assert found(("user", 2, None), strict=True) == {alice, default_user}
    assert found(("user", 2, None), ("client-id", 0, "app")) == {alice_app}
    assert found(("client-id", 2, None), strict=True) == {app}
    assert found(("ip", 2, None)) == {ip, default_ip}
    assert found(("ip", 1, None)) == {default_ip}
    assert found(("user", 0, "nobody")) == set()


@pytest.mark.parametrize(
    ("components", "code"),
    [
        ([("user", 0, None)], INVALID),  # exact without a name
        ([("user", 1, "alice")], INVALID),  # default with a name
        ([("user", 2, "alice")], INVALID),  # any with a name
        ([("user", 3, None)], INVALID),  # no such match type
        ([("user", 2, None), ("user", 1, None)], INVALID),  # a type twice
        ([("ip", 2, None), ("client-id", 2, None)], INVALID),  # ip with another type
        ([("", 2, None)], INVALID),
        ([("group", 2, None)], ErrorCode.UNSUPPORTED_VERSION),  # as Kafka answers it
    ],
)
def test_invalid_filters_fail_the_whole_describe(core: Any, components: Any, code: int) -> None:
    _alter(core, _entry({"user": "alice"}, producer_byte_rate=1))
    response = _describe(core, *components)
    assert response.error_code == code
    assert response.error_message
    assert response.entries is None


@pytest.mark.parametrize(
    ("entity", "ops", "reason"),
    [
        ({}, {"producer_byte_rate": 1}, "at least one"),
        ({"group": "g"}, {"producer_byte_rate": 1}, "entity type"),
        ({"user": ""}, {"producer_byte_rate": 1}, "empty"),
        ({"ip": "10.0.0.1", "user": "a"}, {"connection_creation_rate": 1}, "combined"),
        ({"ip": "not-an-ip"}, {"connection_creation_rate": 1}, "not an IP"),
        ({"ip": "10.0.0.1"}, {"producer_byte_rate": 1}, "not a quota of ip"),
        ({"user": "a"}, {"connection_creation_rate": 1}, "not a quota of user"),
        ({"user": "a"}, {"bytes_per_fortnight": 1}, "unknown quota key"),
        ({"user": "a"}, {"producer_byte_rate": 1.5}, "whole number"),
        ({"user": "a"}, {"producer_byte_rate": -5}, "whole number"),
        ({"ip": "10.0.0.1"}, {"connection_creation_rate": 2.5}, "whole number"),
        ({"user": "a"}, {"request_percentage": math.inf}, "finite"),
    ],
)
def test_invalid_entries_are_refused_with_a_reason(
    core: Any, entity: dict[str, str | None], ops: dict[str, float], reason: str
) -> None:
    results = _alter(core, _entry(entity, **ops), _entry({"user": "ok"}, producer_byte_rate=7))
    (code, message), second = results
    assert code == INVALID
    assert reason in message
    assert second == (ErrorCode.NONE, None)  # the other entry is not held back
    assert set(_found(_describe(core))) == {(("user", "ok"),)}


def test_values_are_checked_by_type_only_as_in_kafka(core: Any) -> None:
    # Kafka accepts 0 for a byte rate and any number for the percentages.
    assert (
        _alter(
            core,
            _entry({"user": "a"}, producer_byte_rate=0, request_percentage=-3.5),
            _entry({"user": "b"}, consumer_byte_rate=1e12),
        )
        == [(ErrorCode.NONE, None)] * 2
    )
    # Removing what is not set, even a key no entity takes, does nothing.
    assert _alter(core, _entry({"user": "c"}, producer_byte_rate=None, nonsense=None)) == [
        (ErrorCode.NONE, None)
    ]
    assert set(_found(_describe(core))) == {(("user", "a"),), (("user", "b"),)}


def test_a_key_or_entity_twice(core: Any) -> None:
    twice = A.EntryData(
        entity=[A.EntityData(entity_type="user", entity_name="a")],
        ops=[
            A.OpData(key="producer_byte_rate", value=1),
            A.OpData(key="producer_byte_rate", value=2),
        ],
    )
    [(code, message)] = _alter(core, twice)
    assert code == INVALID and "more than once" in message
    # The same entity again in one request: the first entry applies, the later is refused.
    first, again = _alter(
        core,
        _entry({"user": "b"}, producer_byte_rate=10),
        _entry({"user": "b"}, producer_byte_rate=20),
    )
    assert first == (ErrorCode.NONE, None)
    assert again[0] == INVALID
    assert _found(_describe(core)) == {(("user", "b"),): {"producer_byte_rate": 10.0}}


def test_validate_only_changes_nothing(core: Any) -> None:
    results = _alter(
        core,
        _entry({"user": "a"}, producer_byte_rate=10),
        _entry({"user": "b"}, producer_byte_rate=1.5),
        validate_only=True,
    )
    assert results[0] == (ErrorCode.NONE, None) and results[1][0] == INVALID
    assert _found(_describe(core)) == {}
    assert not core.broker.quotas.active


def test_quotas_survive_a_restart(open_core: Any) -> None:
    first = open_core()
    _alter(first, _entry({"user": "a", "client-id": None}, producer_byte_rate=10))
    _alter(first, _entry({"ip": "::1"}, connection_creation_rate=3))
    _alter(first, _entry({"user": "a", "client-id": None}, request_percentage=5))
    first.broker.close()
    second = open_core()
    assert _found(_describe(second)) == {
        (("client-id", None), ("user", "a")): {
            "producer_byte_rate": 10.0,
            "request_percentage": 5.0,
        },
        (("ip", "::1"),): {"connection_creation_rate": 3.0},
    }
    assert second.broker.quotas.active and second.broker.quotas.connections_active


def test_a_damaged_journal_stops_the_start(tmp_path: Any) -> None:
    path = tmp_path / "q.journal"
    with QuotaStore(path) as store:
        store.alter(entity_of([("user", "a")]), {"producer_byte_rate": 1.0}, [])
    data = bytearray(path.read_bytes())
    data[2] ^= 0xFF  # inside the header: not a torn tail
    path.write_bytes(bytes(data))
    with pytest.raises(QuotaStoreError):
        QuotaStore(path)


def test_quota_apis_need_cluster_configs_permissions(open_core: Any) -> None:
    core = open_core(
        security_protocol="SASL_PLAINTEXT",
        sasl_users={"admin": "pw", "bob": "pw"},
        authorizer_class_name="org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        super_users=("User:admin",),
    )
    core.login("bob", "pw", conn_id=2)
    response = core.call(48, 1, D(components=[]), conn_id=2)
    assert response.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert response.entries is None
    answer = core.call(
        49,
        1,
        A(entries=[_entry({"user": "bob"}, producer_byte_rate=1)] * 2),
        conn_id=2,
    )
    assert [e.error_code for e in answer.entries] == [ErrorCode.CLUSTER_AUTHORIZATION_FAILED] * 2
    assert not core.broker.quotas.quotas()
    core.login("admin", "pw", conn_id=3)
    answer = core.call(49, 1, A(entries=[_entry({"user": "bob"}, producer_byte_rate=1)]), conn_id=3)
    assert [e.error_code for e in answer.entries] == [ErrorCode.NONE]
    assert core.call(48, 1, D(components=[]), conn_id=3).entries


# -- precedence and shared rates ------------------------------------------------------------

LEVELS: list[dict[str, str | None]] = [
    {"user": "u", "client-id": "c"},
    {"user": "u", "client-id": None},
    {"user": "u"},
    {"user": None, "client-id": "c"},
    {"user": None, "client-id": None},
    {"user": None},
    {"client-id": "c"},
    {"client-id": None},
]


def test_the_most_specific_quota_applies_key_by_key() -> None:
    quotas = Quotas(None)
    for i, entity in enumerate(LEVELS):
        quotas.alter(entity_of(entity.items()), [("producer_byte_rate", 100 + i)])
    quotas.alter(entity_of([("client-id", None)]), [("consumer_byte_rate", 5)])
    for i in range(len(LEVELS)):
        found = quotas.resolve("producer_byte_rate", "u", "c")
        assert found is not None and found[1] == 100 + i, LEVELS[i]
        # consumer_byte_rate is resolved on its own: only the last level sets it.
        assert quotas.resolve("consumer_byte_rate", "u", "c") == (("", "c"), 5)
        quotas.alter(entity_of(LEVELS[i].items()), [("producer_byte_rate", None)])
    assert quotas.resolve("producer_byte_rate", "u", "c") is None


@pytest.mark.parametrize(
    ("entity", "shared", "separate"),
    [
        # A user's own quota is shared by all its client ids.
        ({"user": "u"}, [("u", "c1"), ("u", "c2")], [("u", "c1"), ("v", "c1")]),
        # The default user's quota gives each user its own rate.
        ({"user": None}, [("u", "c1"), ("u", "c2")], [("u", "c1"), ("v", "c1")]),
        # A client id's quota is shared by all users of that client id.
        ({"client-id": "c1"}, [("u", "c1"), ("v", "c1")], []),
        # The default client id's quota: one rate per client id, whoever uses it.
        ({"client-id": None}, [("u", "c1"), ("v", "c1")], [("u", "c1"), ("u", "c2")]),
        # A user and client id pair, defaults included, is one rate per pair.
        ({"user": None, "client-id": None}, [("u", "c1"), ("u", "c1")], [("u", "c1"), ("u", "c2")]),
    ],
)
def test_which_connections_share_a_rate(
    entity: dict[str, str | None],
    shared: list[tuple[str, str]],
    separate: list[tuple[str, str]],
) -> None:
    quotas = Quotas(None, window_num=2, window_size_ms=1000)
    quotas.alter(entity_of(entity.items()), [("producer_byte_rate", 1000)])
    now = 1_000_000
    # The window counts as one second at first: 1000 bytes is the whole allowance.
    (u1, c1), (u2, c2) = shared
    assert quotas.record("producer_byte_rate", u1, c1, 1000, now) == 0
    assert quotas.record("producer_byte_rate", u2, c2, 1000, now) > 0
    if not separate:
        return
    quotas = Quotas(None, window_num=2, window_size_ms=1000)
    quotas.alter(entity_of(entity.items()), [("producer_byte_rate", 1000)])
    (u1, c1), (u2, c2) = separate
    assert quotas.record("producer_byte_rate", u1, c1, 1000, now) == 0
    assert quotas.record("producer_byte_rate", u2, c2, 1000, now) == 0


# -- the sampled rate --------------------------------------------------------------------------


class _ModelRate:
    """Kafka's rules, restated as plainly as possible (a list of samples)."""

    def __init__(self, samples: int, window_ms: int) -> None:
        self.n, self.w = samples, window_ms
        self.samples: list[list[float]] = []  # [start, last, value]
        self.cur = 0

    def record(self, value: float, now: int) -> None:
        if not self.samples:
            self.samples.append([now, now, 0.0])
        elif now - self.samples[self.cur][0] >= self.w:
            self.cur = (self.cur + 1) % self.n
            if self.cur == len(self.samples):
                self.samples.append([now, now, 0.0])
            else:
                self.samples[self.cur] = [now, now, 0.0]
        self.samples[self.cur][2] += value
        self.samples[self.cur][1] = now

    def measure(self, now: int) -> float:
        for s in self.samples:
            if now - s[1] >= self.n * self.w:
                s[:] = [now, now, 0.0]
        oldest = min((s[0] for s in self.samples), default=now)
        elapsed = now - oldest
        if elapsed // self.w < self.n - 1:
            elapsed += (self.n - 1 - elapsed // self.w) * self.w
        return sum(s[2] for s in self.samples) * 1000 / max(elapsed, 1)


@settings(max_examples=200, deadline=None)
@given(
    samples=st.integers(1, 5),
    window=st.integers(1, 2000),
    events=st.lists(st.tuples(st.integers(0, 3000), st.integers(0, 10_000)), max_size=40),
)
def test_the_rate_follows_kafkas_sampled_rate(
    samples: int, window: int, events: list[tuple[int, int]]
) -> None:
    rate, model = Rate(samples, window), _ModelRate(samples, window)
    now = 10_000
    for gap, value in events:
        now += gap
        rate.record(value, now)
        model.record(value, now)
        assert rate.measure(now) == pytest.approx(model.measure(now))


def test_throttle_time_is_kafkas_formula() -> None:
    rate = Rate(11, 1000)
    rate.record(20_000, 0)
    # 20,000 bytes over the ten windows a new rate counts: 2,000/s against 1,000/s.
    assert rate.measure(0) == 2000
    assert rate.throttle(1000, 0) == 10_000  # (2000 - 1000) / 1000 * 10 s
    assert rate.throttle(2000, 0) == 0  # only strictly above the bound
    # Half up, as Java's Math.round: 1.5 ms rounds to 2 (Python's round() gives 2
    # too, but 2.5 to 2, and int() 1).
    for value, expected in ((1001.5, 2), (1002.5, 3), (1000.4, 0)):
        half = Rate(2, 1000)
        half.record(value, 0)
        assert half.throttle(1000, 0) == expected, value


def test_a_zero_quota_throttles_for_the_whole_window() -> None:
    rate = Rate(3, 1000)
    rate.record(1, 0)
    assert rate.throttle(0, 0) == 3000


def test_token_bucket() -> None:
    bucket = TokenBucket(2.0, 10.0, now_ms=0)  # 2 per second, 20 at most, full
    bucket.take(25, 0)
    assert bucket.throttle(0) == 2500  # 5 below zero at 2/s
    assert bucket.throttle(1000) == 1500
    assert bucket.throttle(10_000) == 0
    assert bucket.refill(1_000_000) == 20  # never above its capacity


# -- throttling through the core -------------------------------------------------------------


def test_produce_over_its_byte_rate_is_throttled(open_core: Any, make_batch: Any) -> None:
    core = open_core(quota_window_num=2, quota_window_size_seconds=1)
    create(core, "t")
    _alter(core, _entry({"client-id": "slow"}, producer_byte_rate=1000))
    batch = make_batch([b"x" * 800])
    first = core.send(0, 9, produce_request("t", batch, acks=1), client_id="slow")
    assert isinstance(first, Reply) and first.throttle_ms == 0
    second = core.send(0, 9, produce_request("t", batch, acks=1), client_id="slow")
    assert isinstance(second, Reply) and second.throttle_ms > 0
    body = core.decode(second)
    assert body.throttle_time_ms == second.throttle_ms
    # Throttled, not refused: both batches are written, as in Kafka.
    assert [p.error_code for t in body.responses for p in t.partition_responses] == [0]
    assert core.broker.logs.partition("t", 0).log_end_offset == 2
    # Another client id has no quota.
    other = core.send(0, 9, produce_request("t", batch, acks=1), client_id="fast")
    assert isinstance(other, Reply) and other.throttle_ms == 0
    # Expected from Kafka's formula: the request frames' bytes over one second.
    rate = core.broker.quotas._rates[("producer_byte_rate", ("", "slow"))]
    observed = rate.measure(core.now)
    assert second.throttle_ms == math.floor((observed - 1000) / 1000 * 1000 + 0.5)
    # An old version is throttled the same way (the driver mutes the connection).
    old = core.send(0, 3, produce_request("t", batch, acks=1), client_id="slow")
    assert isinstance(old, Reply) and old.throttle_ms > 0
    # acks=0 has no answer to carry it: the connection is muted all the same.
    silent = core.send(0, 9, produce_request("t", batch, acks=0), client_id="slow")
    assert isinstance(silent, NoResponse) and silent.throttle_ms > 0
    # After the windows pass, the rate is back under the bound.
    core.now += 10_000
    later = core.send(0, 9, produce_request("t", make_batch([b"y"]), acks=1), client_id="slow")
    assert isinstance(later, Reply) and later.throttle_ms == 0


def test_a_throttled_fetch_is_answered_empty_and_loses_nothing(
    open_core: Any, make_batch: Any
) -> None:
    core = open_core(quota_window_num=2, quota_window_size_seconds=1)
    create(core, "t")
    for i in range(4):
        core.call(0, 9, produce_request("t", make_batch([bytes([i]) * 600]), acks=1))
    _alter(core, _entry({"client-id": "test-client"}, consumer_byte_rate=1000))
    seen: list[int] = []
    offset, throttled = 0, 0
    while offset < 4:
        outcome = core.send(1, 12, fetch_body("t", offset, max_bytes=1 << 20))
        assert isinstance(outcome, Reply)
        body = core.decode(outcome)
        if outcome.throttle_ms:
            throttled += 1
            assert body.throttle_time_ms == outcome.throttle_ms
            assert body.responses == []  # Kafka's throttled answer: no partitions at all
            core.now += outcome.throttle_ms
            continue
        from trafka.codec.records import decode_records

        records = list(decode_records(body.responses[0].partitions[0].records or b""))
        seen += [r.offset for r in records]
        offset = records[-1].offset + 1
    assert seen == [0, 1, 2, 3]
    assert throttled > 0


def test_fetch_max_bytes_is_capped_by_the_quota(open_core: Any, make_batch: Any) -> None:
    core = open_core(quota_window_num=3, quota_window_size_seconds=1)
    create(core, "t")
    for i in range(10):
        core.call(0, 9, produce_request("t", make_batch([bytes([i]) * 500]), acks=1))
    # 400 B/s over the 2 windows counted: at most 800 bytes an answer, and the
    # first batch is always returned whole.
    _alter(core, _entry({"client-id": None}, consumer_byte_rate=400))
    body = core.call(1, 12, fetch_body("t", 0, max_bytes=1 << 20))
    from trafka.codec.records import decode_records

    assert len(list(decode_records(body.responses[0].partitions[0].records))) == 1


def test_the_request_quota_counts_handling_time(open_core: Any) -> None:
    core = open_core(quota_window_num=2, quota_window_size_seconds=1)
    # A tiny percentage: any request's handling time is over it.
    _alter(core, _entry({"user": "ANONYMOUS"}, request_percentage=1e-9))
    from trafka.codec.messages import k03_metadata as metadata

    outcome = core.send(3, 12, metadata.MetadataRequest(topics=[]))
    assert isinstance(outcome, Reply)
    # Capped at one window, as Kafka caps the request quota's throttle.
    assert 0 < outcome.throttle_ms <= 1000
    assert core.decode(outcome).throttle_time_ms == outcome.throttle_ms


@pytest.mark.parametrize(
    ("version", "strict"), [(5, False), (6, True), (7, True)], ids=["v5", "v6", "v7"]
)
def test_create_topics_and_the_mutation_quota(open_core: Any, version: int, strict: bool) -> None:
    core = open_core(quota_window_num=2, quota_window_size_seconds=1)
    # 2 partitions a second, 4 at most in the bucket.
    _alter(core, _entry({"client-id": "test-client"}, controller_mutation_rate=2))
    topics = [
        create_topics.CreateTopicsRequest.CreatableTopic(
            name=f"t{i}", num_partitions=3, replication_factor=1
        )
        for i in range(3)
    ]
    response = core.call(19, version, create_topics.CreateTopicsRequest(topics=topics))
    codes = [t.error_code for t in response.topics]
    if strict:
        # t0 takes 3 (1 left), t1 takes 3 (2 below zero), t2 is refused.
        assert codes == [0, 0, ErrorCode.THROTTLING_QUOTA_EXCEEDED]
        assert core.broker.logs.topic("t2") is None
        assert response.throttle_time_ms == 1000  # 2 below zero at 2 a second
    else:
        assert codes == [0, 0, 0]
        assert response.throttle_time_ms == 2500  # 5 below zero
    # Partitions added and topics deleted count too.
    core.now += 100_000
    grown = core.call(
        37,
        3 if strict else 2,
        create_partitions.CreatePartitionsRequest(
            topics=[
                create_partitions.CreatePartitionsRequest.CreatePartitionsTopic(
                    name="t0", count=10, assignments=None
                ),
                create_partitions.CreatePartitionsRequest.CreatePartitionsTopic(
                    name="t1", count=4, assignments=None
                ),
            ],
            timeout_ms=1000,
        ),
    )
    assert [r.error_code for r in grown.results] == (
        [0, ErrorCode.THROTTLING_QUOTA_EXCEEDED] if strict else [0, 0]
    )
    core.now += 100_000
    deleted = core.call(
        20, 5 if strict else 4, delete_topics.DeleteTopicsRequest(topic_names=["t0", "t1"])
    )
    assert [r.error_code for r in deleted.responses] == (
        [0, ErrorCode.THROTTLING_QUOTA_EXCEEDED] if strict else [0, 0]
    )
    assert deleted.throttle_time_ms > 0


def test_the_quota_path_is_off_without_quotas(core: Any) -> None:
    assert not core.broker.quotas.active
    _alter(core, _entry({"client-id": "x"}, producer_byte_rate=1))
    assert core.broker.quotas.active
    _alter(core, _entry({"client-id": "x"}, producer_byte_rate=None))
    assert not core.broker.quotas.active


def test_connection_creation_rate_counts_per_ip(open_core: Any) -> None:
    core = open_core(quota_window_num=2, quota_window_size_seconds=1)
    broker = core.broker
    _alter(core, _entry({"ip": "127.0.0.1"}, connection_creation_rate=2))
    assert [broker.connection_throttle("127.0.0.1:5000", core.now) for _ in range(2)] == [0, 0]
    held = broker.connection_throttle("127.0.0.1:5001", core.now)
    assert 0 < held <= 1000
    assert broker.connection_throttle("10.1.1.1:5000", core.now) == 0  # no quota for it
    # The default IP quota applies to every other address, each on its own.
    _alter(core, _entry({"ip": None}, connection_creation_rate=1))
    assert broker.connection_throttle("10.1.1.1:5000", core.now) == 0
    assert broker.connection_throttle("10.1.1.1:5001", core.now) > 0
    assert broker.connection_throttle("10.2.2.2:5000", core.now) == 0
    # An IPv6 quota matches however the address is written.
    _alter(core, _entry({"ip": "0:0:0:0:0:0:0:1"}, connection_creation_rate=1))
    assert broker.connection_throttle("[::1]:5000", core.now) == 0
    assert broker.connection_throttle("[::1]:5001", core.now) > 0


def test_entity_of_sorts_and_validates() -> None:
    assert entity_of([("user", "a"), ("client-id", None)]) == (("client-id", None), ("user", "a"))
    with pytest.raises(QuotaError):
        entity_of([("user", "a"), ("user", "b")])
