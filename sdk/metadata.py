"""The client's view of the cluster: brokers, topics, partitions and leaders.

Rules and invariants:

* The cache tracks the topics the client needs (:meth:`MetadataCache.add_topics`)
  and asks for exactly those, or for every topic while ``want_all`` is set (a
  pattern subscription, :meth:`MetadataCache.track_all_topics`). Topics asked
  for but absent from a response keep their previous state until a response
  names them, and a tracked topic missing from a response (added while the
  request was in flight) keeps a refresh due.
* Likewise, once every topic is wanted, a refresh is due until a response to a
  request for every topic arrives: turning ``want_all`` on asks for one, and a
  response to a request that went out before (it lists only some topics)
  neither drops the topics it leaves out nor ends the wait.
  ``all_topics_version`` is the ``version`` of the last response that listed
  every topic (0: none yet), what a pattern is matched against.
* A refresh is due when one was requested (:meth:`request_update`: an unknown
  topic, a partition without a leader, NOT_LEADER_OR_FOLLOWER, a stale leader
  epoch ...) or when the cache is older than ``metadata.max.age.ms``. Requests
  for a refresh are rate-limited by ``retry.backoff.ms`` after the previous
  attempt (success or failure), so an error storm cannot flood the brokers.
* Leader epochs only move forward (KIP-320): a response that carries an older
  epoch for a partition than the cache holds is stale (it came from a broker
  that lags); that partition keeps its cached state and another refresh is
  requested.
* ``version`` increases on every applied response; drivers wait for it to
  change instead of polling.

Nothing here does I/O; ``now`` is the driver's monotonic clock in seconds.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from trafka.codec import ErrorCode
from trafka.codec.messages import k03_metadata as md

__all__ = [
    "REFRESH_ERRORS",
    "BrokerInfo",
    "MetadataCache",
    "PartitionInfo",
    "TopicInfo",
]

#: Partition- or topic-level errors after which the cache refreshes.
REFRESH_ERRORS = frozenset(
    {
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.UNKNOWN_TOPIC_ID,
        ErrorCode.INCONSISTENT_TOPIC_ID,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.KAFKA_STORAGE_ERROR,
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.BROKER_NOT_AVAILABLE,
        ErrorCode.REPLICA_NOT_AVAILABLE,
        ErrorCode.OFFSET_NOT_AVAILABLE,
    }
)


@dataclasses.dataclass(frozen=True, slots=True)
class BrokerInfo:
    """A broker: id and address."""

    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class PartitionInfo:
    """One partition's leadership and replicas."""

    topic: str
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()
    offline_replicas: tuple[int, ...] = ()
    error: ErrorCode = ErrorCode.NONE


@dataclasses.dataclass(frozen=True, slots=True)
class TopicInfo:
    """One topic: its partitions (indexed by partition number) or its error."""

    name: str
    topic_id: uuid.UUID
    is_internal: bool
    partitions: tuple[PartitionInfo, ...]
    error: ErrorCode = ErrorCode.NONE
    # Computed once: the producer asks for it on every send.
    available_partitions: tuple[int, ...] = dataclasses.field(init=False, default=())

    def __post_init__(self) -> None:
        available = tuple(p.partition for p in self.partitions if p.leader >= 0)
        object.__setattr__(self, "available_partitions", available)


def _only_names(names: set[Any]) -> None:
    """Refuse what is not a topic name before it joins the tracked topics: every
    refresh (in a background task) sends them, and sorts them."""
    for name in names:
        if type(name) is not str:
            raise TypeError(f"a topic name must be a str, got {name!r}")


class MetadataCache:
    """Cached metadata with refresh rules.

    Args:
        max_age: seconds after which the cache is refreshed anyway.
        backoff: minimum seconds between two refresh attempts.
        auto_create: ask brokers to create tracked topics that do not exist
            (``allow.auto.create.topics``; producers always may).
    """

    def __init__(
        self, *, max_age: float = 300.0, backoff: float = 0.1, auto_create: bool = True
    ) -> None:
        self.max_age = max_age
        self.backoff = backoff
        #: Whether tracked-topic requests let the broker create missing topics.
        self.auto_create = auto_create
        self.brokers: dict[int, BrokerInfo] = {}
        self.topics: dict[str, TopicInfo] = {}
        self.topic_errors: dict[str, ErrorCode] = {}
        self.cluster_id: str | None = None
        self.controller_id: int = -1
        self.version = 0
        #: Called with a topic's name when its partition count changes (the topic
        #: appears, grows, or goes): for caches indexed by partition.
        self.resize_listeners: list[Callable[[str], None]] = []
        # Called after every update (the producer's per-record path drops the
        # timed sticky partitions it keeps: their availability may have changed).
        self.update_listeners: list[Callable[[], None]] = []
        self.want_all = False
        #: ``version`` of the last applied response that listed every topic (0: none).
        self.all_topics_version = 0
        # Whether the request in flight asks for every topic (None: not built here).
        self._asked_all: bool | None = None
        self._wanted: set[str] = set()
        self._need_update = True
        self._last_attempt = float("-inf")
        self._last_success = float("-inf")

    # -- what to ask for -------------------------------------------------------------

    @property
    def wanted_topics(self) -> frozenset[str]:
        return frozenset(self._wanted)

    def add_topics(self, names: Iterable[str]) -> bool:
        """Start tracking topics. Returns True (and requests a refresh) if any is new."""
        new = set(names) - self._wanted
        if new:
            _only_names(new)
            self._wanted |= new
            self._need_update = True
        return bool(new)

    def set_topics(self, names: Iterable[str]) -> None:
        """Track exactly these topics (a consumer's subscription)."""
        names = set(names)
        if names - self._wanted:
            _only_names(names - self._wanted)
            self._need_update = True
        self._wanted = names

    def track_all_topics(self, on: bool) -> None:
        """Ask for every topic (a pattern subscription) or only the tracked ones; turning
        it on makes a refresh due, since no response so far need list every topic."""
        if on and not self.want_all:
            self._need_update = True
        self.want_all = on

    def request_update(self) -> None:
        """Ask for a refresh as soon as the backoff allows."""
        self._need_update = True

    @property
    def update_requested(self) -> bool:
        """Whether a refresh was asked for (:meth:`request_update`, or an error
        that calls for one) and has not started yet."""
        return self._need_update

    def needs_update(self, now: float) -> bool:
        """Whether a refresh is due, ignoring the backoff."""
        return self._need_update or now - self._last_success >= self.max_age

    def next_update_at(self, now: float) -> float:
        """When the next refresh may start (``<= now``: start it now)."""
        if self._need_update:
            return max(now, self._last_attempt + self.backoff)
        return max(self._last_success + self.max_age, self._last_attempt + self.backoff)

    def build_request(self, version: int) -> Any:
        """The MetadataRequest for the tracked topics, at ``version``."""
        topics: list[Any] | None
        if self.want_all:
            topics = None
        else:
            topics = [md.MetadataRequest.MetadataRequestTopic(name=t) for t in sorted(self._wanted)]
        self._asked_all = topics is None
        kwargs: dict[str, Any] = {"topics": topics}
        if version >= 4:
            kwargs["allow_auto_topic_creation"] = self.auto_create
        return md.MetadataRequest(**kwargs)

    def build_request_for(
        self, version: int, topics: Iterable[str] | None, *, auto_create: bool = True
    ) -> Any:
        """A MetadataRequest for given topics (``None``: all), without touching the tracked set."""
        entries = (
            None
            if topics is None
            else [md.MetadataRequest.MetadataRequestTopic(name=t) for t in topics]
        )
        self._asked_all = entries is None
        kwargs: dict[str, Any] = {"topics": entries}
        if version >= 4:
            kwargs["allow_auto_topic_creation"] = auto_create
        return md.MetadataRequest(**kwargs)

    # -- applying responses ----------------------------------------------------------

    def attempt_started(self, now: float) -> None:
        """A refresh request is going out."""
        self._last_attempt = now
        self._need_update = False

    def failed(self, now: float) -> None:
        """The refresh failed (no broker answered); retry after the backoff."""
        self._need_update = True

    def update(self, response: Any, now: float) -> None:
        """Apply a MetadataResponse."""
        self.brokers = {
            b.node_id: BrokerInfo(b.node_id, b.host, b.port, b.rack) for b in response.brokers
        }
        self.cluster_id = response.cluster_id
        self.controller_id = response.controller_id
        again = False
        before = (
            {name: len(info.partitions) for name, info in self.topics.items()}
            if self.resize_listeners
            else {}
        )
        for t in response.topics:
            name = t.name
            if name is None:
                continue
            code = _code(t.error_code)
            if code != ErrorCode.NONE:
                self.topic_errors[name] = code
                if code in (ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION):
                    again = again or name in self._wanted
                # The topic may still exist with partitions (e.g. LEADER_NOT_AVAILABLE
                # during creation); without partitions there is nothing to keep.
                if not t.partitions:
                    self.topics.pop(name, None)
                    continue
            else:
                self.topic_errors.pop(name, None)
            old = self.topics.get(name)
            parts: dict[int, PartitionInfo] = {}
            for p in t.partitions:
                if p.partition_index < 0:
                    again = True  # not a partition: ask again rather than keep it
                    continue
                pcode = _code(p.error_code)
                info = PartitionInfo(
                    name,
                    p.partition_index,
                    p.leader_id if p.leader_id is not None else -1,
                    p.leader_epoch,
                    tuple(p.replica_nodes),
                    tuple(p.isr_nodes),
                    tuple(p.offline_replicas),
                    pcode,
                )
                if old is not None and p.partition_index < len(old.partitions):
                    prev = old.partitions[p.partition_index]
                    if 0 <= info.leader_epoch < prev.leader_epoch:
                        info = prev  # stale response (KIP-320)
                        again = True
                if info.leader < 0:
                    again = True
                parts[p.partition_index] = info
            ordered = tuple(parts[i] for i in sorted(parts))
            if [p.partition for p in ordered] != list(range(len(ordered))):
                again = True  # a gap: a partition is missing from the response
                ordered = tuple(p for i, p in enumerate(ordered) if p.partition == i)
            self.topics[name] = TopicInfo(name, t.topic_id, t.is_internal, ordered, code)
        returned = {t.name for t in response.topics if t.name is not None}
        asked_all = self.want_all if self._asked_all is None else self._asked_all
        self._asked_all = None
        if self.want_all and not asked_all:
            # Asked before every topic was wanted: it lists only some of them.
            again = True
        elif self.want_all:
            for gone in set(self.topics) - returned:
                del self.topics[gone]
        elif self._wanted - returned:
            # Brokers answer for every topic asked for, so a tracked topic missing
            # here was added while this request was in flight: ask again for it.
            again = True
        self._last_success = now
        self._need_update = again
        self.version += 1
        if self.want_all and asked_all:
            self.all_topics_version = self.version
        if self.resize_listeners:
            after = {name: len(info.partitions) for name, info in self.topics.items()}
            for name in before.keys() | after.keys():
                if before.get(name) != after.get(name):
                    self._resized(name)
        for listener in self.update_listeners:
            listener()

    def _resized(self, name: str) -> None:
        for listener in self.resize_listeners:
            listener(name)

    def forget_topic(self, name: str) -> None:
        """Stop tracking a topic and drop its cached state."""
        self._wanted.discard(name)
        gone = self.topics.pop(name, None)
        self.topic_errors.pop(name, None)
        if gone is not None:
            self._resized(name)

    # -- queries ---------------------------------------------------------------------

    def partition_count(self, topic: str) -> int | None:
        info = self.topics.get(topic)
        return len(info.partitions) if info is not None and info.partitions else None

    def leader_for(self, topic: str, partition: int) -> int | None:
        """The leader's node id, or ``None`` when unknown."""
        info = self.topics.get(topic)
        if info is None or partition >= len(info.partitions):
            return None
        leader = info.partitions[partition].leader
        return leader if leader >= 0 else None

    def topic_id(self, topic: str) -> uuid.UUID | None:
        """The topic's id (Metadata v10+), or ``None`` when unknown."""
        info = self.topics.get(topic)
        if info is None or info.topic_id.int == 0:
            return None
        return info.topic_id

    def leader_epoch(self, topic: str, partition: int) -> int:
        info = self.topics.get(topic)
        if info is None or partition >= len(info.partitions):
            return -1
        return info.partitions[partition].leader_epoch

    def broker(self, node_id: int) -> BrokerInfo | None:
        return self.brokers.get(node_id)

    def on_partition_error(
        self, code: int, topic: str | None = None, partition: int | None = None
    ) -> bool:
        """Note an error from a Produce/Fetch/... response; True if it triggered a refresh."""
        if _code(code) in REFRESH_ERRORS:
            self._need_update = True
            return True
        return False

    def learn_endpoints(self, endpoints: Iterable[Any]) -> None:
        """Take the brokers an answer's ``node_endpoints`` names (KIP-951: Produce
        v10+, Fetch v16+, ShareFetch, ShareAcknowledge), so a leader hint naming a
        broker this client has not met yet moves the partition at once, as
        Java's client merges them into its metadata, instead of waiting for a
        refresh. The next Metadata answer replaces them all."""
        for e in endpoints:
            info = BrokerInfo(e.node_id, e.host, e.port, e.rack)
            if e.node_id >= 0 and self.brokers.get(e.node_id) != info:
                self.brokers = {**self.brokers, e.node_id: info}

    def on_leader_hint(self, topic: str, partition: int, leader: int, epoch: int) -> bool:
        """Apply a new leader a broker reported (KIP-951 ``current_leader``), if
        newer than the cached one and its broker's endpoint is known; True if it
        moved the partition. A hint that does not apply asks for a refresh (an
        applied one does not, but its caller still asks for one, as KIP-951 says
        the client does)."""
        info = self.topics.get(topic)
        if info is None or partition >= len(info.partitions) or leader < 0:
            return False
        prev = info.partitions[partition]
        if epoch <= prev.leader_epoch or leader not in self.brokers:
            self._need_update = True
            return False
        parts = list(info.partitions)
        parts[partition] = dataclasses.replace(prev, leader=leader, leader_epoch=epoch)
        self.topics[topic] = dataclasses.replace(info, partitions=tuple(parts))
        self.version += 1
        return True


def _code(raw: int) -> ErrorCode:
    try:
        return ErrorCode(raw)
    except ValueError:
        return ErrorCode.UNKNOWN_SERVER_ERROR
