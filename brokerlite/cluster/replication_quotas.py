"""Replication throttles (KIP-73): how much a broker sends and fetches for throttled
replicas. I/O-free; the fetch handler (leader side) and the replica fetcher
(follower side) ask it, the cluster view and driver feed it the configs.

This is what ``kafka-reassign-partitions --throttle`` sets up: broker configs
``leader.replication.throttled.rate`` and ``follower.replication.throttled.rate``
(bytes per second, dynamic, in ``/config/brokers/<id>`` or ``<default>``), and
topic configs ``leader.replication.throttled.replicas`` and
``follower.replication.throttled.replicas`` (``partition:broker`` pairs, or
``*``), as Kafka's ``ReplicationQuotaManager`` applies them.

Rules (Kafka 3.9's, ZooKeeper mode):

* Two quotas per broker: the leader quota bounds what it sends in answer to
  followers' fetches, the follower quota what it fetches as a follower. Each
  has its broker's rate: the broker's own dynamic config, else the
  ``<default>`` broker's, else none (unbounded, Kafka's ``Long.MAX_VALUE``).
* Which partitions a quota covers: a topic's ``leader...`` list for the leader
  quota, its ``follower...`` list for the follower quota, keeping the pairs
  whose broker is this one (a partition listed for another broker is not
  throttled here); ``*`` covers every partition of the topic. An empty or
  absent list covers none.
* The rate is Kafka's ``SimpleRate`` over ``replication.quota.window.num``
  (11) samples of ``replication.quota.window.size.seconds`` (1 s): the bytes of
  the samples kept divided by the time since the oldest sample began, counted
  as at least one window. The quota is exceeded while that rate is strictly
  above the bound.
* Recording: every byte sent (leader) or fetched (follower) for a covered
  partition counts, whether its replica is in sync or not, so that the total
  replication traffic stays within the bound.
* Throttling, "to avoid ISR thrashing", only ever holds back a covered
  partition whose replica is *not in sync* and only while the quota is
  exceeded: a leader answers that follower's fetch of the partition with no
  records (its long poll does not count the partition's new bytes either); a
  follower leaves the partition out of its fetch. The leader judges "in sync"
  by its ISR; the follower by its lag at its leader's last answer (the
  leader's high watermark minus its log end, in sync at 0; unknown before the
  first answer: not in sync).
* Changing a rate keeps what was measured; changing the lists does too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from ..clock import now_ms as wall_clock_ms
from ..errors import InvalidConfigError
from ..quotas import Rate
from ..storage.topic_configs import (
    ALL_REPLICAS,
    FOLLOWER_THROTTLED_REPLICAS,
    LEADER_THROTTLED_REPLICAS,
    throttled_replicas,
)

__all__ = [
    "DYNAMIC_BROKER_CONFIGS",
    "WINDOW_NUM",
    "WINDOW_SIZE_MS",
    "FOLLOWER_THROTTLED_RATE",
    "LEADER_THROTTLED_RATE",
    "ReplicationQuota",
    "ReplicationQuotas",
    "check_broker_config",
]

LEADER_THROTTLED_RATE = "leader.replication.throttled.rate"
FOLLOWER_THROTTLED_RATE = "follower.replication.throttled.rate"
#: The broker configs brokerlite changes at run time (Kafka's are many more).
DYNAMIC_BROKER_CONFIGS = (LEADER_THROTTLED_RATE, FOLLOWER_THROTTLED_RATE)

_LONG_MAX = 2**63 - 1
#: Kafka's defaults for ``replication.quota.window.num`` and ``...window.size.seconds``.
WINDOW_NUM = 11
WINDOW_SIZE_MS = 1000


def check_broker_config(name: str, value: str) -> str:
    """Check a dynamic broker config's value as Kafka does (a LONG, at least 0);
    returns it as Kafka prints it.

    Raises:
        InvalidConfigError: an unknown name, or a value that is not a whole
            number from 0 to 2^63-1.
    """
    if name not in DYNAMIC_BROKER_CONFIGS:
        raise InvalidConfigError(
            f"{name} cannot be updated dynamically (brokerlite's dynamic broker configs are "
            f"{', '.join(DYNAMIC_BROKER_CONFIGS)})"
        )
    text = value.strip()
    try:
        number = int(text)
    except ValueError:
        raise InvalidConfigError(f"{name}: {value!r} is not a whole number of bytes/s") from None
    if not 0 <= number <= _LONG_MAX:
        raise InvalidConfigError(f"{name}: {value!r} must be from 0 to {_LONG_MAX}")
    return str(number)


class ReplicationQuota:
    """One side's quota (see the module rules).

    Args:
        clock: milliseconds (the broker's wall clock; tests inject their own).
        window_num, window_size_ms: the rate's samples.
    """

    def __init__(
        self,
        clock: Callable[[], int],
        *,
        window_num: int = WINDOW_NUM,
        window_size_ms: int = WINDOW_SIZE_MS,
    ) -> None:
        self.clock = clock
        self._rate = Rate(window_num, window_size_ms, simple=True)
        #: Bytes per second; None: unbounded.
        self.bound: float | None = None
        # topic -> the partitions covered here (ALL_REPLICAS: all of them).
        self._covered: dict[str, frozenset[int] | str] = {}

    def cover(self, topic: str, partitions: frozenset[int] | str) -> None:
        """Cover ``partitions`` of ``topic`` (:data:`ALL_REPLICAS`: all); an empty set
        covers none."""
        if partitions:
            self._covered[topic] = partitions
        else:
            self._covered.pop(topic, None)

    def covered_topics(self) -> dict[str, frozenset[int] | str]:
        return dict(self._covered)

    def is_throttled(self, topic: str, partition: int) -> bool:
        """Whether the partition's traffic counts against this quota (Kafka's
        ``isThrottled``)."""
        covered = self._covered.get(topic)
        if covered is None:
            return False
        return covered == ALL_REPLICAS or (isinstance(covered, frozenset) and partition in covered)

    def exceeded(self) -> bool:
        """Whether the measured rate is above the bound now."""
        bound = self.bound
        if bound is None:
            return False
        return self._rate.measure(self.clock()) > bound

    def record(self, nbytes: int) -> None:
        """Count ``nbytes`` sent or fetched for a covered partition."""
        if nbytes:
            self._rate.record(nbytes, self.clock())

    def rate(self) -> float:
        """The measured rate now, bytes per second."""
        return self._rate.measure(self.clock())

    def holds_back(self, topic: str, partition: int, *, in_sync: bool) -> bool:
        """Whether a replica's traffic for the partition must wait: covered, out of
        sync and the quota exceeded (Kafka's ``shouldLeaderThrottle`` and
        ``shouldFollowerThrottle``)."""
        return not in_sync and self.is_throttled(topic, partition) and self.exceeded()


class ReplicationQuotas:
    """A broker's leader and follower quotas, fed from the cluster's configs.

    Args:
        node_id: this broker's id (the lists' pairs that name it apply here).
        clock: milliseconds (the broker's wall clock by default; tests inject theirs).
        window_num, window_size_ms: the rates' samples (``replication.quota.window.num``,
            ``replication.quota.window.size.seconds``).
    """

    def __init__(
        self,
        node_id: int,
        *,
        clock: Callable[[], int] = wall_clock_ms,
        window_num: int = WINDOW_NUM,
        window_size_ms: int = WINDOW_SIZE_MS,
    ) -> None:
        self.node_id = node_id
        self.leader = ReplicationQuota(clock, window_num=window_num, window_size_ms=window_size_ms)
        self.follower = ReplicationQuota(
            clock, window_num=window_num, window_size_ms=window_size_ms
        )
        #: The dynamic configs of this broker and of the ``<default>`` broker, as
        #: ZooKeeper has them (DescribeConfigs reports them).
        self.own_configs: dict[str, str] = {}
        self.default_configs: dict[str, str] = {}

    def set_clock(self, clock: Callable[[], int]) -> None:
        """Measure both quotas on ``clock`` from now on (tests)."""
        self.leader.clock = self.follower.clock = clock

    def use_broker_configs(self, own: Mapping[str, str], default: Mapping[str, str]) -> None:
        """Take the dynamic configs of this broker and of ``<default>``; the rates
        are this broker's, else the default's, else none. A value ZooKeeper holds
        that is not a rate is ignored (as if unset)."""
        self.own_configs = {k: v for k, v in own.items() if k in DYNAMIC_BROKER_CONFIGS}
        self.default_configs = {k: v for k, v in default.items() if k in DYNAMIC_BROKER_CONFIGS}
        for name, quota in (
            (LEADER_THROTTLED_RATE, self.leader),
            (FOLLOWER_THROTTLED_RATE, self.follower),
        ):
            quota.bound = _bound(self.own_configs.get(name), self.default_configs.get(name))

    def use_topic_configs(self, configs: Mapping[str, Mapping[str, str]]) -> None:
        """Take every topic's config overrides: the throttled-replicas lists."""
        for name, quota in (
            (LEADER_THROTTLED_REPLICAS, self.leader),
            (FOLLOWER_THROTTLED_REPLICAS, self.follower),
        ):
            wanted = {
                topic: self._covered_here(name, overrides.get(name, ""))
                for topic, overrides in configs.items()
            }
            for topic in quota.covered_topics():
                if topic not in wanted:
                    quota.cover(topic, frozenset())
            for topic, partitions in wanted.items():
                quota.cover(topic, partitions)

    def _covered_here(self, name: str, value: str) -> frozenset[int] | str:
        try:
            replicas = throttled_replicas(name, value)
        except InvalidConfigError:
            return frozenset()  # validated when set; what else ZooKeeper holds is ignored
        if replicas == ALL_REPLICAS:
            return ALL_REPLICAS
        assert not isinstance(replicas, str)
        return frozenset(p for p, broker in replicas if broker == self.node_id)


def _bound(own: str | None, default: str | None) -> float | None:
    for text in (own, default):
        if text is None:
            continue
        try:
            value = int(text.strip())
        except ValueError:
            continue
        if value >= 0:
            return None if value >= _LONG_MAX else float(value)
    return None
