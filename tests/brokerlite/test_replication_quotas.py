"""Replication throttles (:mod:`trafka.brokerlite.cluster.replication_quotas`), no sockets.

What is checked is Kafka's design (KIP-73, "Replication Quotas", and Kafka's ops
documentation, "Limiting Bandwidth Usage during Data Migration") as its 3.9
broker implements it (``ReplicationQuotaManager``, ``ReplicaManager
.shouldLeaderThrottle``, ``RemoteLeaderEndPoint.shouldFollowerThrottle``,
``ConfigHandler``, ``ThrottledReplicaListValidator``):

* the throttled-replicas topic configs are ``partition:broker`` lists or ``*``;
  a broker applies the pairs that name it;
* the rate is a ``SimpleRate`` over 11 one-second samples, measured over at
  least one window; the quota is exceeded while it is strictly above the bound;
* every byte of a throttled partition counts, in sync or not; only out-of-sync
  replicas are held back, and only while the quota is exceeded.

Time is an injected clock: every figure is bytes per window of that clock.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from brokerlite_wire import broker_config_request

from trafka.brokerlite.cluster.replication_quotas import (
    FOLLOWER_THROTTLED_RATE,
    LEADER_THROTTLED_RATE,
    ReplicationQuota,
    ReplicationQuotas,
    check_broker_config,
)
from trafka.brokerlite.config import BrokerConfig, ConfigError
from trafka.brokerlite.errors import InvalidConfigError
from trafka.brokerlite.storage.topic_configs import (
    ALL_REPLICAS,
    FOLLOWER_THROTTLED_REPLICAS,
    LEADER_THROTTLED_REPLICAS,
    normalise_configs,
    throttled_replicas,
)
from trafka.codec.errors import ErrorCode

T0 = 1_700_000_000_000


class Clock:
    """Milliseconds that move only when the test says so."""

    def __init__(self, now: int = T0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


# -- the topic configs -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "pairs"),
    [
        ("0:101,1:102", {(0, 101), (1, 102)}),
        (" 0:101 , 1:102 ", {(0, 101), (1, 102)}),
        ("0:101,,1:102", {(0, 101), (1, 102)}),  # Kafka's pattern allows an empty item
        ("", set()),
        ("*", ALL_REPLICAS),
        (" * ", ALL_REPLICAS),
    ],
)
def test_throttled_replicas_lists_as_kafka_reads_them(value: str, pairs: object) -> None:
    replicas = throttled_replicas(LEADER_THROTTLED_REPLICAS, value)
    assert replicas == (pairs if pairs == ALL_REPLICAS else frozenset(pairs))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "value",
    ["0", "0:", ":1", "a:1", "0:b", "0:1:2", "-1:1", "*,0:1", "**", "0;1", "2147483648:1"],
)
def test_bad_throttled_replicas_lists_are_invalid_configs(value: str) -> None:
    # ThrottledReplicaListValidator: every item [0-9]+:[0-9]+ (or empty), or "*" alone.
    with pytest.raises(InvalidConfigError, match=FOLLOWER_THROTTLED_REPLICAS):
        normalise_configs({FOLLOWER_THROTTLED_REPLICAS: value})


def test_throttled_replicas_are_stored_normalised() -> None:
    assert normalise_configs(
        {LEADER_THROTTLED_REPLICAS: " 0:1 ,, 1:2 ", FOLLOWER_THROTTLED_REPLICAS: " * "}
    ) == {LEADER_THROTTLED_REPLICAS: "0:1,1:2", FOLLOWER_THROTTLED_REPLICAS: "*"}


# -- the broker configs ----------------------------------------------------------------------


def test_broker_rates_are_whole_numbers_of_bytes() -> None:
    assert check_broker_config(LEADER_THROTTLED_RATE, " 1048576 ") == "1048576"
    assert check_broker_config(FOLLOWER_THROTTLED_RATE, "0") == "0"
    assert check_broker_config(FOLLOWER_THROTTLED_RATE, str(2**63 - 1)) == str(2**63 - 1)
    for bad in ("-1", "1.5", "ten", "", str(2**63)):
        with pytest.raises(InvalidConfigError, match=LEADER_THROTTLED_RATE):
            check_broker_config(LEADER_THROTTLED_RATE, bad)
    with pytest.raises(InvalidConfigError, match="cannot be updated dynamically"):
        check_broker_config("log.retention.ms", "1")


def test_a_brokers_own_rate_wins_over_the_default() -> None:
    quotas = ReplicationQuotas(1, clock=Clock())
    assert quotas.leader.bound is None and quotas.follower.bound is None  # unbounded
    quotas.use_broker_configs({}, {LEADER_THROTTLED_RATE: "500", FOLLOWER_THROTTLED_RATE: "600"})
    assert (quotas.leader.bound, quotas.follower.bound) == (500, 600)
    quotas.use_broker_configs({LEADER_THROTTLED_RATE: "100"}, {LEADER_THROTTLED_RATE: "500"})
    assert (quotas.leader.bound, quotas.follower.bound) == (100, None)
    # Kafka's Long.MAX_VALUE is its "no quota"; other keys are not ours.
    quotas.use_broker_configs({LEADER_THROTTLED_RATE: str(2**63 - 1), "x": "1"}, {})
    assert quotas.leader.bound is None
    assert quotas.own_configs == {LEADER_THROTTLED_RATE: str(2**63 - 1)}


# -- which replicas ----------------------------------------------------------------------------


def test_only_the_pairs_naming_this_broker_are_throttled_here() -> None:
    quotas = ReplicationQuotas(2, clock=Clock())
    quotas.use_topic_configs(
        {
            "t": {LEADER_THROTTLED_REPLICAS: "0:1,1:2", FOLLOWER_THROTTLED_REPLICAS: "0:2,2:3"},
            "u": {FOLLOWER_THROTTLED_REPLICAS: "*"},
            "v": {"retention.ms": "1000"},
        }
    )
    assert [quotas.leader.is_throttled("t", p) for p in range(3)] == [False, True, False]
    assert [quotas.follower.is_throttled("t", p) for p in range(3)] == [True, False, False]
    assert all(quotas.follower.is_throttled("u", p) for p in range(10))  # "*": every partition
    assert not any(quotas.leader.is_throttled("u", p) for p in range(10))
    assert not quotas.follower.is_throttled("v", 0)
    # The configs removed (as kafka-reassign-partitions --verify does): nothing is throttled.
    quotas.use_topic_configs({"t": {}, "u": {FOLLOWER_THROTTLED_REPLICAS: ""}})
    assert not any(
        q.is_throttled(t, p)
        for q in (quotas.leader, quotas.follower)
        for t in ("t", "u")
        for p in range(3)
    )


def test_in_sync_replicas_are_counted_but_never_held_back() -> None:
    clock = Clock()
    quota = ReplicationQuota(clock)
    quota.bound = 1000.0
    quota.cover("t", frozenset({0}))
    quota.record(5000)  # an in-sync replica's traffic made the rate exceed the bound
    assert quota.exceeded()
    assert not quota.holds_back("t", 0, in_sync=True)
    assert quota.holds_back("t", 0, in_sync=False)
    assert not quota.holds_back("t", 1, in_sync=False)  # not a throttled partition
    quota.bound = None  # the rate removed: nothing is held back any more
    assert not quota.holds_back("t", 0, in_sync=False)


# -- bytes per window --------------------------------------------------------------------------


def test_the_quota_is_exceeded_strictly_above_the_bound_over_at_least_one_window() -> None:
    clock = Clock()
    quota = ReplicationQuota(clock)
    quota.bound = 1000.0
    assert not quota.exceeded()  # nothing measured yet
    quota.record(1000)
    assert quota.rate() == 1000.0  # 1000 bytes over one window (SimpleRate: at least one)
    assert not quota.exceeded()
    quota.record(1)
    assert quota.exceeded()
    clock.now += 1000
    assert quota.exceeded()  # 1001 bytes over 1.000 s
    clock.now += 1
    assert not quota.exceeded()  # 1001 bytes over 1.001 s
    # A bound of 0 lets nothing through once anything was counted.
    quota.bound = 0.0
    assert quota.exceeded()


def _replicate(
    quota: ReplicationQuota, clock: Clock, *, chunk: int, step_ms: int, until_ms: int
) -> list[int]:
    """A follower out of sync fetching ``chunk`` bytes every ``step_ms`` of the clock
    whenever the quota does not hold it back; the bytes moved in each window."""
    per_window: list[int] = []
    start = clock.now
    while clock.now - start < until_ms:
        window = (clock.now - start) // 1000
        while len(per_window) <= window:
            per_window.append(0)
        if not quota.holds_back("t", 0, in_sync=False):
            quota.record(chunk)
            per_window[window] += chunk
        clock.now += step_ms
    return per_window


def test_bytes_moved_per_window_follow_the_rate() -> None:
    clock = Clock()
    quota = ReplicationQuota(clock)
    quota.cover("t", ALL_REPLICAS)
    quota.bound = 10_000.0
    chunk = 1_000
    per_window = _replicate(quota, clock, chunk=chunk, step_ms=10, until_ms=30_000)
    # Throttled, the follower would fetch 100 chunks a window; it fetches about ten.
    assert len(per_window) == 30
    for moved in per_window:
        assert 10_000 - chunk <= moved <= 10_000 + chunk, per_window
    # Over the whole run the average is the bound, within one fetch.
    assert abs(sum(per_window) - 30 * 10_000) <= chunk
    # The rate lifted (the broker config deleted): every fetch goes through.
    quota.bound = None
    assert _replicate(quota, clock, chunk=chunk, step_ms=10, until_ms=2_000) == [100_000] * 2


def test_a_rate_change_keeps_what_was_measured() -> None:
    clock = Clock()
    quota = ReplicationQuota(clock)
    quota.cover("t", ALL_REPLICAS)
    quota.bound = 10_000.0
    _replicate(quota, clock, chunk=1_000, step_ms=10, until_ms=5_000)
    quota.bound = 5_000.0  # halved: held back until the measured rate falls below it
    assert quota.exceeded()
    per_window = _replicate(quota, clock, chunk=1_000, step_ms=10, until_ms=10_000)
    # 50 000 B measured over 5 s is 10 000 B/s: nothing moves until the same bytes
    # over the time since they began (the samples kept) come to 5 000 B/s.
    assert per_window[:5] == [0] * 5, per_window
    assert sum(per_window[5:]) > 0, per_window


# -- a single node -----------------------------------------------------------------------------


def _alter_broker(core: Any, node: str, op: int, value: str | None) -> Any:
    body = broker_config_request(node, LEADER_THROTTLED_RATE, op, value)
    [result] = core.call(44, 1, body).responses
    return result


def test_a_single_node_has_no_throttles_but_deleting_them_succeeds(core: Any) -> None:
    """Without replication there is nothing to throttle: setting a rate is refused
    (INVALID_REQUEST, as brokerlite's static broker configs), deleting one, which is
    never set, is done, so that kafka-reassign-partitions --verify, which deletes
    the throttles of every broker, works against a single node too."""
    node = str(core.broker.node_id)
    refused = _alter_broker(core, node, 0, "1000")
    assert refused.error_code == ErrorCode.INVALID_REQUEST
    assert "cluster mode" in refused.error_message
    for name in (node, ""):
        assert _alter_broker(core, name, 1, None).error_code == ErrorCode.NONE


def test_deleting_the_log_dir_move_throttle_is_done_setting_it_refused(core: Any) -> None:
    """Kafka 4's kafka-reassign-partitions --verify deletes
    replica.alter.log.dirs.io.max.bytes.per.second with the replication rates
    (its clearBrokerLevelThrottles); brokerlite cannot set it, so deleting it is
    done, as deleting an unset config is in Kafka, and setting it is refused
    (tests/brokerlite/test_kafka_scripts_cluster.py runs the tool on three nodes)."""
    name = "replica.alter.log.dirs.io.max.bytes.per.second"
    node = str(core.broker.node_id)
    for broker in (node, ""):
        [deleted] = core.call(44, 1, broker_config_request(broker, name, 1, None)).responses
        assert deleted.error_code == ErrorCode.NONE, deleted
    [refused] = core.call(44, 1, broker_config_request(node, name, 0, "1000")).responses
    assert refused.error_code == ErrorCode.INVALID_REQUEST


def test_the_windows_are_broker_settings_under_kafkas_names(tmp_path: Path) -> None:
    config = BrokerConfig(data_dir=tmp_path).with_overrides(
        {"replication.quota.window.num": "3", "replication.quota.window.size.seconds": "2"}
    )
    assert (config.replication_quota_window_num, config.replication_quota_window_size_seconds) == (
        3,
        2,
    )
    with pytest.raises(ConfigError, match="replication_quota_window_num"):
        BrokerConfig(data_dir=tmp_path).with_overrides({"replication.quota.window.num": "0"})
    # Three samples of 2 s: after 6 s of silence what was counted is forgotten.
    clock = Clock()
    quotas = ReplicationQuotas(1, clock=clock, window_num=3, window_size_ms=2_000)
    quotas.use_broker_configs({LEADER_THROTTLED_RATE: "100"}, {})
    quotas.leader.record(1_000)
    assert quotas.leader.rate() == 500.0  # over one window of 2 s
    clock.now += 6_000
    assert not quotas.leader.exceeded()
