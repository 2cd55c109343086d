"""Share groups (KIP-932, "queues"): the group coordinator's side, sans-IO.

A share group's members consume the same partitions together: each record is
handed to one member at a time (that bookkeeping, ShareFetch and
ShareAcknowledge, lives with the share partitions, which listen to this module
through :class:`ShareGroupListener`). This module keeps the groups themselves:
who is a member, what it subscribes to, which partitions it is assigned, and
the per-group configs (``share.*``, Kafka's ConfigResource type GROUP).
:class:`ShareGroups` holds every share group of the broker; the classic
coordinator (:mod:`trafka.brokerlite.groups.coordinator`) routes ListGroups, DeleteGroups
and the group-id namespace to it.

Rules and invariants:

* Namespace. A group id is a classic group, a consumer group (KIP-848) or a
  share group, never two of them. A ShareGroupHeartbeat naming a group of
  another type gets GROUP_ID_NOT_FOUND saying it is not a share group (Kafka
  converts nothing between share groups and other types); the group
  coordinator refuses the other protocols on a share group id.
* Member ids come from the client (KIP-1082): a heartbeat without one is
  INVALID_REQUEST. Epoch 0 joins and must name a non-empty
  SubscribedTopicNames; -1 leaves (answered with epoch -1); any other epoch
  must be the member's current one or its previous one (the answer that moved
  it on was lost), else FENCED_MEMBER_EPOCH. A join repeated with epoch 0 by a
  member already in the group is such a lost answer only while its previous
  epoch is 0; otherwise it is fenced too, as in Kafka. An unknown member is
  UNKNOWN_MEMBER_ID; a heartbeat other than a join for a group that does not
  exist is GROUP_ID_NOT_FOUND. Fields left null (RackId, SubscribedTopicNames)
  keep their last value.
* Epochs. The *group epoch* is bumped whenever something that decides the
  assignment changes: a member joins, leaves or is fenced, a subscription
  changes, or a subscribed topic appears, vanishes, is recreated or gains
  partitions (seen at the next heartbeat, as Kafka refreshes the metadata). The
  *target assignment* is recomputed for every new group epoch by the ``simple``
  assignor and carries that epoch (the assignment epoch). There is no
  revocation in a share group: a member moves straight to the assignment epoch
  and its target partitions at its next heartbeat. The answer carries the
  assignment when the member joins or when it differs from what the member
  was last sent; otherwise it is null.
* The ``simple`` assignor gives every subscribed partition to at least one
  member that subscribes to its topic, and balances per topic: with at least
  as many partitions as subscribers, each partition has exactly one member and
  the subscribers' counts differ by at most one (the extra partitions go to the
  members with the fewest partitions so far); with fewer partitions than
  subscribers, each subscriber gets exactly one partition of the topic and the
  partitions' numbers of members differ by at most one (partitions are
  shared). Members keep what they have where the balance allows (sticky).
* Liveness. A member that does not heartbeat within the group's session
  timeout (``share.session.timeout.ms``, default ``group.share.session.timeout.ms``)
  is fenced and removed at the next :meth:`ShareGroups.tick`, which bumps the
  group epoch. A group whose last member went stays, Empty, until DeleteGroups
  deletes it (Kafka does not expire share groups).
* Offsets admin. AlterShareGroupOffsets and DeleteShareGroupOffsets change a
  group's share state only while it has no members (NON_EMPTY_GROUP); a group
  of another type is GROUP_ID_NOT_FOUND. An alter naming no group creates it,
  empty (Kafka's "get or create"); a delete does not (GROUP_ID_NOT_FOUND).
* Listeners. Each :class:`ShareGroupListener` hears of every new target
  assignment (with all of its partitions, also when empty), of every member
  that leaves, is fenced or expires, and of every deleted group. A listener that
  raises is logged and does not stop the others or the coordinator.
* Configs. Group configs are overrides of the broker's ``group.share.*``
  defaults, with rules of their own (:mod:`.group_configs`); they exist
  independently of the group (they may be set before it exists and outlive its
  deletion, as in Kafka). :meth:`ShareGroups.config` gives the effective values.
* Durability. Each change to a group's epochs, members, subscriptions or
  assignments, and each change of a group's configs, is written to the
  :class:`ShareGroupStore` journal before the answer (Kafka writes share group
  records to ``__consumer_offsets`` and group configs to the metadata log). After
  a restart the groups come back as they were, members included: they carry on
  heartbeating with their epochs, without a rebalance, and their session timers
  start afresh, as on a Kafka coordinator failover. A member's first heartbeat
  after the restart makes the listeners hear of its group's target assignment
  again (listeners are registered after the groups are loaded). A failed write
  of group state is logged and the live group goes on; a failed write of
  configs fails the request.
* Timers fire only in :meth:`ShareGroups.tick`.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, ClassVar, Protocol

from trafka.brokerlite.clock import mono_ms
from trafka.brokerlite.errors import BrokerError
from trafka.brokerlite.groups.consumer_groups import (
    TopicMeta,
    group_core_json,
    load_group_core,
    tps_from_json,
    tps_json,
)
from trafka.brokerlite.groups.group_configs import (
    GROUP_CONFIGS,
    ConsumerGroupSettings,
    GroupConfigEntry,
    GroupConfigs,
    InvalidGroupConfigError,
    InvalidGroupResourceError,
    ShareGroupConfig,
    ShareGroupSettings,
    duration_ms,
)
from trafka.brokerlite.storage.journal import CrcJournal, JournalStore
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k76_share_group_heartbeat as _hb
from trafka.codec.messages import k77_share_group_describe as _sd

__all__ = [
    "ASSIGNOR",
    "GROUP_CONFIGS",
    "SHARE_GROUPS_JOURNAL",
    "GroupConfigEntry",
    "InvalidGroupConfigError",
    "InvalidGroupResourceError",
    "ShareGroup",
    "ShareGroupConfig",
    "ShareGroupListener",
    "ShareGroupSettings",
    "ShareGroupStore",
    "ShareGroupStoreError",
    "ShareGroups",
    "ShareMember",
    "duration_ms",
    "simple_assign",
]

log = logging.getLogger("trafka.brokerlite")

SHARE_GROUPS_JOURNAL = "trafka-share-groups.journal"
ASSIGNOR = "simple"
LEAVE_EPOCH = -1
_NO_OPERATIONS = -(2**31)

# (topic id, partition)
TP = tuple[uuid.UUID, int]


# -- the interface the share partitions use -------------------------------------------------


class ShareGroupListener(Protocol):
    """What the share partitions hear from the coordinator (see the module rules)."""

    def partitions_assigned(
        self, group_id: str, partitions: set[tuple[str, int]], now_ms: int
    ) -> None:
        """A new target assignment of ``group_id``: all its ``(topic, partition)`` pairs."""
        ...

    def member_removed(self, group_id: str, member_id: str, now_ms: int) -> None:
        """``member_id`` left ``group_id``, was fenced or expired."""
        ...

    def group_deleted(self, group_id: str) -> None:
        """``group_id`` was deleted (DeleteGroups)."""
        ...


class ShareGroupStoreError(BrokerError):
    """The share-group journal cannot be read or written."""

    code: ClassVar[ErrorCode] = ErrorCode.KAFKA_STORAGE_ERROR


#: The group configs brokerlite serves (Kafka's ``share.*`` group configs).


# -- groups ----------------------------------------------------------------------------------


@dataclasses.dataclass(slots=True)
class ShareMember:
    """One member of a share group (see the module rules)."""

    member_id: str
    client_id: str = ""
    client_host: str = ""
    rack_id: str | None = None
    subscribed_names: tuple[str, ...] = ()
    epoch: int = 0
    previous_epoch: int = 0
    assigned: frozenset[TP] = frozenset()
    #: What the member was last sent (None: nothing yet).
    last_sent: frozenset[TP] | None = None
    session_deadline_ms: int = 0


@dataclasses.dataclass(slots=True)
class ShareGroup:
    """A share group: its members, epochs and target assignment."""

    group_id: str
    epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ShareMember] = dataclasses.field(default_factory=dict)
    target: dict[str, frozenset[TP]] = dataclasses.field(default_factory=dict)
    #: The subscribed topics that exist, as of the last metadata refresh.
    subscribed: dict[str, TopicMeta] = dataclasses.field(default_factory=dict)
    #: Every (topic, partition) that may have share state: ever assigned or
    #: altered, not deleted since (Kafka's share-group state partition metadata).
    initialized: set[tuple[str, int]] = dataclasses.field(default_factory=set)

    @property
    def state(self) -> str:
        """``Empty`` or ``Stable`` (Kafka's share group states)."""
        return "Stable" if self.members else "Empty"

    def topic_names(self) -> dict[uuid.UUID, str]:
        return {meta.topic_id: name for name, meta in self.subscribed.items()}

    def target_partitions(self) -> set[tuple[str, int]]:
        """Every ``(topic, partition)`` of the target assignment."""
        names = self.topic_names()
        return {(names[t], p) for tps in self.target.values() for t, p in tps if t in names}


def _tp_key(tp: TP) -> tuple[str, int]:
    return (str(tp[0]), tp[1])


def _spread(
    subs: list[str],
    parts: list[TP],
    current: Mapping[str, frozenset[TP]],
    load: Mapping[str, int],
    out: dict[str, set[TP]],
) -> None:
    """At least as many partitions as subscribers: one member per partition, balanced."""
    held = {m: sorted(current.get(m, frozenset()) & set(parts), key=_tp_key) for m in subs}
    base, extra = divmod(len(parts), len(subs))
    # The extra partitions go to the least loaded members, then to those holding more.
    ranked = sorted(subs, key=lambda m: (load[m], -len(held[m]), m))
    quota = {m: base + (1 if i < extra else 0) for i, m in enumerate(ranked)}
    owner: dict[TP, str] = {}
    filled = dict.fromkeys(subs, 0)
    for m in subs:
        for tp in held[m]:
            if filled[m] >= quota[m]:
                break
            if tp not in owner:
                owner[tp] = m
                filled[m] += 1
    for tp in parts:
        if tp in owner:
            continue
        m = min((m for m in subs if filled[m] < quota[m]), key=lambda m: (filled[m], m))
        owner[tp] = m
        filled[m] += 1
    for tp, m in owner.items():
        out[m].add(tp)


def _share(
    subs: list[str],
    parts: list[TP],
    current: Mapping[str, frozenset[TP]],
    out: dict[str, set[TP]],
) -> None:
    """Fewer partitions than subscribers: one partition per member, partitions shared evenly."""
    base, extra = divmod(len(subs), len(parts))
    holders = {tp: sum(1 for m in subs if tp in current.get(m, ())) for tp in parts}
    # The partitions shared by one more member: those most shared already, then by index.
    ranked = sorted(parts, key=lambda tp: (-holders[tp], tp[1]))
    quota = {tp: base + (1 if i < extra else 0) for i, tp in enumerate(ranked)}
    count = dict.fromkeys(parts, 0)
    placed: dict[str, TP] = {}
    for m in subs:
        for tp in sorted(current.get(m, frozenset()) & set(parts), key=_tp_key):
            if count[tp] < quota[tp]:
                placed[m] = tp
                count[tp] += 1
                break
    for m in subs:
        if m in placed:
            continue
        tp = min((tp for tp in parts if count[tp] < quota[tp]), key=lambda tp: (count[tp], tp[1]))
        placed[m] = tp
        count[tp] += 1
    for m, tp in placed.items():
        out[m].add(tp)


def simple_assign(
    subscriptions: Mapping[str, Iterable[str]],
    topics: Mapping[str, TopicMeta],
    current: Mapping[str, frozenset[TP]],
) -> dict[str, frozenset[TP]]:
    """The ``simple`` share assignor (see the module rules).

    Args:
        subscriptions: member id -> the topic names it subscribes to.
        topics: the subscribed topics that exist, by name.
        current: member id -> its current target partitions (for stickiness).

    Returns:
        member id -> its partitions, for every member of ``subscriptions``.
    """
    members = sorted(subscriptions)
    subscribed = {m: frozenset(subscriptions[m]) for m in members}
    out: dict[str, set[TP]] = {m: set() for m in members}
    load = dict.fromkeys(members, 0)
    for name in sorted(topics):
        meta = topics[name]
        subs = [m for m in members if name in subscribed[m]]
        if not subs or meta.partitions <= 0:
            continue
        parts = [(meta.topic_id, p) for p in range(meta.partitions)]
        before = {m: len(out[m]) for m in subs}
        if len(subs) <= len(parts):
            _spread(subs, parts, current, load, out)
        else:
            _share(subs, parts, current, out)
        for m in subs:
            load[m] += len(out[m]) - before[m]
    return {m: frozenset(tps) for m, tps in out.items()}


def _by_topic(tps: Iterable[TP]) -> dict[uuid.UUID, list[int]]:
    out: dict[uuid.UUID, list[int]] = {}
    for topic_id, p in sorted(tps, key=_tp_key):
        out.setdefault(topic_id, []).append(p)
    return out


def _snapshot(group: ShareGroup) -> dict[str, Any]:
    tps = tps_json
    return {
        **group_core_json(group),
        "members": [
            {
                "member_id": m.member_id,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "rack_id": m.rack_id,
                "subscribed_names": list(m.subscribed_names),
                "epoch": m.epoch,
                "previous_epoch": m.previous_epoch,
                "assigned": tps(m.assigned),
            }
            for m in sorted(group.members.values(), key=lambda m: m.member_id)
        ],
        "initialized": [[t, p] for t, p in sorted(group.initialized)],
    }


def _from_snapshot(group_id: str, data: Mapping[str, Any]) -> ShareGroup:
    group = ShareGroup(
        group_id, epoch=int(data["epoch"]), assignment_epoch=int(data["assignment_epoch"])
    )
    load_group_core(group, data)
    group.target = {mid: frozenset(tps) for mid, tps in group.target.items()}
    group.initialized = {(str(t), int(p)) for t, p in data.get("initialized", ())}
    for m in data["members"]:
        assigned = frozenset(tps_from_json(m["assigned"]))
        member = ShareMember(
            member_id=str(m["member_id"]),
            client_id=str(m["client_id"]),
            client_host=str(m["client_host"]),
            rack_id=None if m["rack_id"] is None else str(m["rack_id"]),
            subscribed_names=tuple(str(n) for n in m["subscribed_names"]),
            epoch=int(m["epoch"]),
            previous_epoch=int(m["previous_epoch"]),
            assigned=assigned,
            last_sent=assigned,
        )
        group.members[member.member_id] = member
    return group


# -- the journal -----------------------------------------------------------------------------


class ShareGroupsPort(Protocol):
    """Where share groups and their configs are kept: the journal
    (:class:`ShareGroupStore`), or in a cluster ``__consumer_offsets`` (groups)
    and ZooKeeper (configs), :class:`~.replicated_offsets.ReplicatedShareGroups`."""

    @property
    def path(self) -> Path: ...

    def share_groups(self) -> dict[str, dict[str, Any]]: ...

    def group_configs(self) -> dict[str, dict[str, str]]: ...

    def store_group(self, group_id: str, snapshot: Mapping[str, Any] | None) -> None: ...

    def store_configs(self, group_id: str, configs: Mapping[str, str]) -> None: ...

    def close(self) -> None: ...


class ShareGroupStore(JournalStore):
    """Share groups and group configs, kept in a CRC-checked journal (:mod:`..storage.journal`).

    Entry kinds: ``share_group`` (a full snapshot of one share group, or its
    removal when the snapshot is null) and ``group_configs`` (the whole set of
    one group's config overrides; an empty set removes them). State is
    last-writer-wins per group; a mutating method returns only once its entry
    is written (and fsynced with ``fsync=True``). An entry of an unknown kind is
    an error, never skipped.

    Raises:
        ShareGroupStoreError: the journal cannot be read or written, or holds a
            malformed entry.
    """

    def __init__(self, path: Path, *, fsync: bool = True, compact_min_bytes: int = 1 << 20) -> None:
        journal = CrcJournal(
            Path(path),
            format_name="share-groups",
            version=1,
            fsync=fsync,
            error=ShareGroupStoreError,
        )
        super().__init__(journal, compact_min_bytes=compact_min_bytes, name="share-group journal")
        self._groups: dict[str, dict[str, Any]] = {}
        self._configs: dict[str, dict[str, str]] = {}
        self._load()

    def share_groups(self) -> dict[str, dict[str, Any]]:
        """The stored snapshot of every share group (a copy)."""
        return dict(self._groups)

    def group_configs(self) -> dict[str, dict[str, str]]:
        """The stored config overrides of every group that has some (a copy)."""
        return {g: dict(c) for g, c in self._configs.items()}

    def store_group(self, group_id: str, snapshot: Mapping[str, Any] | None) -> None:
        """Durably record a share group's snapshot (None: the group is gone)."""
        if snapshot is None and group_id not in self._groups:
            return
        self._write({"kind": "share_group", "group": group_id, "snapshot": snapshot})

    def store_configs(self, group_id: str, configs: Mapping[str, str]) -> None:
        """Durably record the whole set of ``group_id``'s config overrides."""
        if not configs and group_id not in self._configs:
            return
        self._write({"kind": "group_configs", "group": group_id, "configs": dict(configs)})

    def _apply(self, entry: dict[str, Any]) -> None:
        kind = entry.get("kind")
        try:
            if kind == "share_group":
                if entry["snapshot"] is None:
                    self._groups.pop(entry["group"], None)
                else:
                    self._groups[str(entry["group"])] = dict(entry["snapshot"])
            elif kind == "group_configs":
                configs = {str(k): str(v) for k, v in entry["configs"].items()}
                if configs:
                    self._configs[str(entry["group"])] = configs
                else:
                    self._configs.pop(entry["group"], None)
            else:
                raise ShareGroupStoreError(
                    f"share-group journal {self.path}: unknown entry kind {kind!r} "
                    "(written by a newer brokerlite?)"
                )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ShareGroupStoreError(
                f"share-group journal {self.path}: malformed {kind!r} entry: {exc!r}"
            ) from exc

    def _live_entries(self) -> list[dict[str, Any]]:
        entries = [
            {"kind": "share_group", "group": g, "snapshot": s} for g, s in self._groups.items()
        ]
        entries.extend(
            {"kind": "group_configs", "group": g, "configs": c} for g, c in self._configs.items()
        )
        return entries


# -- the coordinator -------------------------------------------------------------------------


def _no_other_group(_group_id: str) -> str | None:
    return None


class _Refused(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class ShareGroups:
    """Every share group of the broker, and the group configs, without I/O.

    Args:
        topics: ``() -> {name: TopicMeta}``, the broker's topics now.
        settings: the broker's ``group.share.*`` settings.
        store: where groups and configs are kept; what it holds is loaded (None:
            nothing survives the process).
        now_ms: the current time: the session timers of loaded members start here.
        consumer_settings: the broker's ``group.consumer.*`` settings, the defaults
            of the consumer groups' configs kept beside the share groups' (:attr:`configs`).

    Attributes:
        listeners: told of new target assignments, removed members and deleted
            groups (see the module rules).
        other_group_type: ``group_id -> "classic" | "consumer" | None``, set by the
            group coordinator that owns the group-id namespace.
    """

    def __init__(
        self,
        topics: Callable[[], Mapping[str, TopicMeta]],
        *,
        settings: ShareGroupSettings | None = None,
        store: ShareGroupsPort | None = None,
        now_ms: int = 0,
        consumer_settings: ConsumerGroupSettings | None = None,
    ) -> None:
        self._topics = topics
        self.settings = settings or ShareGroupSettings()
        self.store = store
        self.listeners: list[ShareGroupListener] = []
        self.other_group_type: Callable[[str], str | None] = _no_other_group
        self.groups: dict[str, ShareGroup] = {}
        #: The group configs (overrides of ``settings``), kept in ``store``.
        self.configs = GroupConfigs(
            self.settings,
            {} if store is None else store.group_configs(),
            None if store is None else store.store_configs,
            consumer_settings,
        )
        self._saved: dict[str, dict[str, Any]] = {}
        # Loaded groups whose target assignment the listeners have not heard of yet.
        self._unannounced: set[str] = set()
        if store is not None:
            self.load_groups(store.share_groups(), now_ms)

    def load_groups(self, snapshots: Mapping[str, Mapping[str, Any]], now_ms: int) -> None:
        """Bring stored groups into memory (at start; in a cluster, when their
        ``__consumer_offsets`` partition comes to be led here), replacing any in
        memory; their members' session timers start at ``now_ms``.

        Raises:
            ShareGroupStoreError: a snapshot is malformed (the groups before it are loaded).
        """
        where = "share groups" if self.store is None else self.store.path
        for group_id, data in snapshots.items():
            try:
                group = _from_snapshot(group_id, data)
            except (KeyError, TypeError, ValueError) as exc:
                raise ShareGroupStoreError(
                    f"{where}: share group {group_id!r}: bad snapshot: {exc!r}"
                ) from exc
            timeout = self._session_timeout_ms(group_id)
            for member in group.members.values():
                member.session_deadline_ms = mono_ms(now_ms) + timeout
            self.groups[group_id] = group
            self._saved[group_id] = _snapshot(group)
            self._unannounced.add(group_id)

    def unload_groups(self, group_ids: Iterable[str]) -> None:
        """Forget groups (cluster mode: their ``__consumer_offsets`` partition is no
        longer led here; their members find the new coordinator)."""
        for group_id in group_ids:
            self.groups.pop(group_id, None)
            self._saved.pop(group_id, None)
            self._unannounced.discard(group_id)

    # -- the interface the share partitions use -------------------------------------------------

    def config(self, group_id: str) -> ShareGroupConfig:
        """``group_id``'s effective settings: its overrides over the broker defaults,
        clamped into the broker's current bounds."""
        return self.configs.effective(group_id)

    def is_member(self, group_id: str, member_id: str) -> bool:
        """Whether ``member_id`` is a member of share group ``group_id`` now."""
        group = self.groups.get(group_id)
        return group is not None and member_id in group.members

    def target_partitions(self, group_id: str) -> set[tuple[str, int]]:
        """Every ``(topic, partition)`` of ``group_id``'s target assignment (empty if none)."""
        group = self.groups.get(group_id)
        return set() if group is None else group.target_partitions()

    def initialized(self, group_id: str) -> set[tuple[str, int]]:
        """Every ``(topic, partition)`` of which ``group_id`` may have share state."""
        group = self.groups.get(group_id)
        return set() if group is None else set(group.initialized)

    def note_initialized(
        self, group_id: str, added: Iterable[tuple[str, int]], removed_topics: Iterable[str] = ()
    ) -> None:
        """Record share state created (AlterShareGroupOffsets) or deleted
        (DeleteShareGroupOffsets) by the offsets admin."""
        group = self.groups.get(group_id)
        if group is None:
            return
        gone = set(removed_topics)
        group.initialized = {tp for tp in group.initialized if tp[0] not in gone} | set(added)
        self._save(group)

    def is_share_group(self, group_id: str) -> bool:
        """Whether ``group_id`` names a share group."""
        return group_id in self.groups

    # -- ShareGroupHeartbeat --------------------------------------------------------------------

    def heartbeat(
        self,
        request: _hb.ShareGroupHeartbeatRequest,
        now_ms: int,
        *,
        client_id: str = "",
        client_host: str = "",
    ) -> _hb.ShareGroupHeartbeatResponse:
        """Handle a ShareGroupHeartbeat (version 1; see the module rules)."""
        try:
            self._check(request)
            if request.member_epoch == LEAVE_EPOCH:
                return self._leave(request, now_ms)
            return self._heartbeat(request, now_ms, client_id, client_host)
        except _Refused as refused:
            return _hb.ShareGroupHeartbeatResponse(
                error_code=refused.code, error_message=str(refused)
            )

    def _check(self, request: _hb.ShareGroupHeartbeatRequest) -> None:
        if not request.member_id.strip():
            raise _Refused(ErrorCode.INVALID_REQUEST, "MemberId can't be empty")
        if not request.group_id.strip():
            raise _Refused(ErrorCode.INVALID_REQUEST, "GroupId can't be empty")
        if request.rack_id is not None and not request.rack_id.strip():
            raise _Refused(ErrorCode.INVALID_REQUEST, "RackId can't be empty")
        if request.member_epoch == 0:
            if not request.subscribed_topic_names:
                raise _Refused(
                    ErrorCode.INVALID_REQUEST, "SubscribedTopicNames must be given when joining"
                )
        elif request.member_epoch < LEAVE_EPOCH:
            raise _Refused(ErrorCode.INVALID_REQUEST, f"invalid MemberEpoch {request.member_epoch}")
        other = self.other_group_type(request.group_id)
        if other is not None:
            raise _Refused(
                ErrorCode.GROUP_ID_NOT_FOUND,
                f"group {request.group_id} is not a share group (it is a {other} group)",
            )

    def _leave(
        self, request: _hb.ShareGroupHeartbeatRequest, now_ms: int
    ) -> _hb.ShareGroupHeartbeatResponse:
        group = self.groups.get(request.group_id)
        if group is None:
            raise _Refused(ErrorCode.GROUP_ID_NOT_FOUND, f"group {request.group_id} not found")
        if request.member_id not in group.members:
            raise _Refused(ErrorCode.UNKNOWN_MEMBER_ID, f"unknown member {request.member_id}")
        log.info("share group %r: member %r leaves", group.group_id, request.member_id)
        self._remove(group, request.member_id, now_ms)
        self._save(group)
        return _hb.ShareGroupHeartbeatResponse(
            member_id=request.member_id, member_epoch=LEAVE_EPOCH, heartbeat_interval_ms=0
        )

    def _heartbeat(
        self,
        request: _hb.ShareGroupHeartbeatRequest,
        now_ms: int,
        client_id: str,
        client_host: str,
    ) -> _hb.ShareGroupHeartbeatResponse:
        group_id, member_id, epoch = request.group_id, request.member_id, request.member_epoch
        group = self.groups.get(group_id)
        if group is None:
            if epoch != 0:
                raise _Refused(ErrorCode.GROUP_ID_NOT_FOUND, f"share group {group_id} not found")
            group = ShareGroup(group_id)
        member = group.members.get(member_id)
        if member is None and len(group.members) >= self.settings.max_size:
            raise _Refused(
                ErrorCode.GROUP_MAX_SIZE_REACHED,
                f"the share group has reached its maximum of {self.settings.max_size} members",
            )
        if member is None:
            if epoch != 0:
                raise _Refused(ErrorCode.UNKNOWN_MEMBER_ID, f"unknown member {member_id}")
            member = ShareMember(member_id)
        elif epoch > member.epoch or (epoch < member.epoch and epoch != member.previous_epoch):
            raise _Refused(
                ErrorCode.FENCED_MEMBER_EPOCH,
                f"epoch {epoch} is neither the member's epoch ({member.epoch}) nor its "
                f"previous one ({member.previous_epoch}); leave and rejoin",
            )
        if group_id not in self.groups:
            self.groups[group_id] = group
            log.info("share group %r: created", group_id)
        if group_id in self._unannounced:
            self._unannounced.discard(group_id)
            self._announce(group, now_ms)
        changed = member_id not in group.members
        if changed:
            group.members[member_id] = member
            log.info("share group %r: member %r joins", group_id, member_id)
        member.client_id, member.client_host = client_id, client_host
        if request.rack_id is not None:
            member.rack_id = request.rack_id
        if request.subscribed_topic_names is not None:
            names = tuple(sorted(set(request.subscribed_topic_names)))
            changed |= names != member.subscribed_names
            member.subscribed_names = names
        changed |= self._refresh_metadata(group)
        if changed:
            group.epoch += 1
        if group.assignment_epoch < group.epoch:
            self._assign(group, now_ms)
        if member.epoch != group.assignment_epoch:
            member.previous_epoch, member.epoch = member.epoch, group.assignment_epoch
        member.assigned = group.target.get(member_id, frozenset())
        member.session_deadline_ms = mono_ms(now_ms) + self._session_timeout_ms(group_id)
        assignment = None
        if epoch == 0 or member.last_sent != member.assigned:
            member.last_sent = member.assigned
            assignment = _hb.ShareGroupHeartbeatResponse.Assignment(
                topic_partitions=[
                    _hb.ShareGroupHeartbeatResponse.TopicPartitions(topic_id=t, partitions=ps)
                    for t, ps in _by_topic(member.assigned).items()
                ]
            )
        self._save(group)
        return _hb.ShareGroupHeartbeatResponse(
            member_id=member_id,
            member_epoch=member.epoch,
            heartbeat_interval_ms=self.configs.int_value("share.heartbeat.interval.ms", group_id),
            assignment=assignment,
        )

    # -- assignment -----------------------------------------------------------------------------

    def _refresh_metadata(self, group: ShareGroup) -> bool:
        """Record the subscribed topics' ids and sizes; True when they changed."""
        topics = self._topics()
        wanted = {n for m in group.members.values() for n in m.subscribed_names if n in topics}
        now = {name: topics[name] for name in wanted}
        if now == group.subscribed:
            return False
        group.subscribed = now
        return True

    def _assign(self, group: ShareGroup, now_ms: int) -> None:
        subscriptions = {m.member_id: m.subscribed_names for m in group.members.values()}
        group.target = simple_assign(subscriptions, group.subscribed, group.target)
        group.assignment_epoch = group.epoch
        self._announce(group, now_ms)

    def _announce(self, group: ShareGroup, now_ms: int) -> None:
        partitions = group.target_partitions()
        group.initialized |= partitions
        for listener in list(self.listeners):
            try:
                listener.partitions_assigned(group.group_id, set(partitions), now_ms)
            except Exception:
                log.exception(
                    "share group %r: a listener failed on a new assignment", group.group_id
                )

    def _remove(self, group: ShareGroup, member_id: str, now_ms: int) -> None:
        """Remove a member (left, fenced or expired), then reassign what it had."""
        group.members.pop(member_id, None)
        group.target.pop(member_id, None)
        for listener in list(self.listeners):
            try:
                listener.member_removed(group.group_id, member_id, now_ms)
            except Exception:
                log.exception("share group %r: a listener failed on a removal", group.group_id)
        self._refresh_metadata(group)
        group.epoch += 1
        self._assign(group, now_ms)

    # -- timers ---------------------------------------------------------------------------------

    def tick(self, now_ms: int) -> None:
        """Fence and remove the members whose session ran out (monotonic ms, as
        Kafka's coordinator timer)."""
        mono = mono_ms(now_ms)
        for group in list(self.groups.values()):
            late = [m.member_id for m in group.members.values() if m.session_deadline_ms <= mono]
            for member_id in late:
                log.info("share group %r: member %r session expired", group.group_id, member_id)
                self._remove(group, member_id, now_ms)
            if late:
                self._save(group)

    def next_deadline(self) -> int | None:
        """The earliest time :meth:`tick` has work (monotonic ms), or None."""
        return min(
            (m.session_deadline_ms for g in self.groups.values() for m in g.members.values()),
            default=None,
        )

    # -- listing, describing, deleting ------------------------------------------------------------

    def listed(self) -> list[tuple[str, str]]:
        """``(group_id, state)`` of every share group, by group id."""
        return [(g, self.groups[g].state) for g in sorted(self.groups)]

    def describe(
        self,
        group_id: str,
        topic_name: Callable[[uuid.UUID], str | None],
        *,
        authorized_operations: int = _NO_OPERATIONS,
    ) -> _sd.ShareGroupDescribeResponse.DescribedGroup:
        """A ShareGroupDescribe entry for ``group_id``.

        An empty id is INVALID_GROUP_ID; an id of another group type or of no group
        is GROUP_ID_NOT_FOUND.
        """
        r = _sd.ShareGroupDescribeResponse
        if not group_id:
            return r.DescribedGroup(
                group_id=group_id,
                error_code=ErrorCode.INVALID_GROUP_ID,
                error_message="the group id is empty",
            )
        group = self.groups.get(group_id)
        if group is None:
            other = self.other_group_type(group_id)
            return r.DescribedGroup(
                group_id=group_id,
                error_code=ErrorCode.GROUP_ID_NOT_FOUND,
                error_message=f"group {group_id} not found"
                if other is None
                else f"group {group_id} is not a share group (it is a {other} group)",
            )
        names = group.topic_names()

        def assignment(tps: Iterable[TP]) -> _sd.ShareGroupDescribeResponse.Assignment:
            return r.Assignment(
                topic_partitions=[
                    r.TopicPartitions(
                        topic_id=t, topic_name=names.get(t) or topic_name(t) or "", partitions=ps
                    )
                    for t, ps in _by_topic(tps).items()
                ]
            )

        return r.DescribedGroup(
            group_id=group_id,
            group_state=group.state,
            group_epoch=group.epoch,
            assignment_epoch=group.assignment_epoch,
            assignor_name=ASSIGNOR,
            members=[
                r.Member(
                    member_id=m.member_id,
                    rack_id=m.rack_id,
                    member_epoch=m.epoch,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    subscribed_topic_names=list(m.subscribed_names),
                    assignment=assignment(m.assigned),
                )
                for m in sorted(group.members.values(), key=lambda m: m.member_id)
            ],
            authorized_operations=authorized_operations,
        )

    def offsets_change_refusal(
        self, group_id: str, *, create: bool
    ) -> tuple[ErrorCode, str] | None:
        """Why ``group_id``'s share-group offsets cannot be altered or deleted now
        (AlterShareGroupOffsets, DeleteShareGroupOffsets), or None when they can.

        Refusals are Kafka's: INVALID_GROUP_ID for an empty id; GROUP_ID_NOT_FOUND
        for a group of another type, and for no group at all unless ``create``;
        NON_EMPTY_GROUP while the group has members.

        Args:
            create: make an empty share group (durably) when no group has the id,
                as Kafka's AlterShareGroupOffsets does.
        """
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID, "the group id is empty"
        other = self.other_group_type(group_id)
        if other is not None:
            return (
                ErrorCode.GROUP_ID_NOT_FOUND,
                f"group {group_id} is not a share group (it is a {other} group)",
            )
        group = self.groups.get(group_id)
        if group is None:
            if not create:
                return ErrorCode.GROUP_ID_NOT_FOUND, f"share group {group_id} not found"
            group = self.groups[group_id] = ShareGroup(group_id)
            log.info("share group %r: created (empty) to hold offsets", group_id)
            self._save(group)
        if group.members:
            return (
                ErrorCode.NON_EMPTY_GROUP,
                f"share group {group_id} has {len(group.members)} member(s): its offsets "
                "change only while it is empty",
            )
        return None

    def delete(self, group_id: str) -> ErrorCode:
        """Delete an empty share group (DeleteGroups).

        Returns:
            NONE; GROUP_ID_NOT_FOUND when it is not a share group; NON_EMPTY_GROUP
            while it has members; KAFKA_STORAGE_ERROR when the deletion cannot be
            written (the group stays).
        """
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.GROUP_ID_NOT_FOUND
        if group.members:
            return ErrorCode.NON_EMPTY_GROUP
        if self.store is not None:
            try:
                self.store.store_group(group_id, None)
            except ShareGroupStoreError as exc:
                log.error("share group %r: deletion not stored: %s", group_id, exc)
                return ErrorCode.KAFKA_STORAGE_ERROR
        del self.groups[group_id]
        self._saved.pop(group_id, None)
        self._unannounced.discard(group_id)
        log.info("share group %r: deleted", group_id)
        for listener in list(self.listeners):
            try:
                listener.group_deleted(group_id)
            except Exception:
                log.exception("share group %r: a listener failed on the deletion", group_id)
        return ErrorCode.NONE

    # -- group configs (see :mod:`.group_configs`) -------------------------------------------------

    def overrides(self, group_id: str) -> dict[str, str]:
        """The configs set on ``group_id`` (a copy)."""
        return self.configs.overrides(group_id)

    def configured_groups(self) -> list[str]:
        """The groups with at least one config set (:meth:`.GroupConfigs.configured`)."""
        return self.configs.configured()

    def describe_configs(self, group_id: str) -> list[GroupConfigEntry]:
        """Every group config of ``group_id`` (:meth:`.GroupConfigs.describe`)."""
        return self.configs.describe(group_id)

    def alter_configs(
        self,
        group_id: str,
        changes: Mapping[str, str | None],
        *,
        incremental: bool,
        validate_only: bool = False,
    ) -> None:
        """Change ``group_id``'s config overrides, all of them or none
        (:meth:`.GroupConfigs.alter`).

        Raises:
            InvalidGroupResourceError: ``group_id`` is empty.
            InvalidGroupConfigError: the change is not valid.
            ShareGroupStoreError: the change cannot be written (nothing changed).
        """
        self.configs.alter(group_id, changes, incremental=incremental, validate_only=validate_only)

    def _session_timeout_ms(self, group_id: str) -> int:
        return self.configs.int_value("share.session.timeout.ms", group_id)

    # -- durability -----------------------------------------------------------------------------

    def _save(self, group: ShareGroup) -> None:
        data = _snapshot(group)
        if self._saved.get(group.group_id) == data:
            return
        self._saved[group.group_id] = data
        if self.store is None:
            return
        try:
            self.store.store_group(group.group_id, data)
        except ShareGroupStoreError as exc:  # the live group goes on
            log.error("share group %r: state not stored: %s", group.group_id, exc)

    def close(self) -> None:
        """Close the store (flushing it)."""
        if self.store is not None:
            self.store.close()
