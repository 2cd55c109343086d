"""The topics of a data directory and their partition logs: :class:`LogManager`.

Layout of a data directory::

Layout of a data directory::

    <data_dir>/.lock                        flock'd while a LogManager owns the directory
    <data_dir>/trafka-topics.json           the topic registry (written atomically)
    <data_dir>/<topic>-<partition>/         one directory per partition:
        00000000000000000000.log            segments, named by base offset (see segment.py)
        00000000000000000000.index
        00000000000000000000.timeindex
        trafka.checkpoint                   log start offset, recovery point, clean offset,
                                            replicated gaps offset (when not 0) and, once
                                            tracked, the high watermark (JSON, atomic)
        leader-epoch-checkpoint             the leader epoch cache (Kafka's text format, atomic)
        .clean-shutdown                     present only while the files are known consistent

A topic's partitions may be only partly hosted here: in a cluster a broker keeps
logs only for the partitions it replicates (Kafka's brokers do the same), while
it still knows every partition of the topic. The registry then lists the hosted
ones; a topic without that list hosts all its partitions.

The rules of one partition's log are :mod:`.partition`'s; a topic's settings
:mod:`.topic_configs`'; its name and id :mod:`.topics`'.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path

from ..errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    LogStorageError,
    PolicyViolationError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)
from .files import atomic_write
from .partition import PartitionLog
from .segment import (
    write_all,
)
from .topic_configs import (
    TOPIC_CONFIGS,
    ConfigEntry,
    ConfigSource,
    LogConfig,
    effective_config,
    field_text,
    normalise_configs,
)
from .topics import (
    TopicInfo,
    check_topic_collision,
    new_topic_id,
    partitions_not_grown,
    topic_exists,
    validate_topic_name,
)

__all__ = ["LOCK_FILE", "REGISTRY_FILE", "LogManager"]

logger = logging.getLogger("trafka.brokerlite.log")

REGISTRY_FILE = "trafka-topics.json"
LOCK_FILE = ".lock"


def _probe_write(directory: Path) -> None:
    """Write a block to a file in ``directory`` the way segments are written,
    fsync it, and remove it (a ``.tmp`` name, which an open removes if left).

    Raises:
        OSError: a step failed.
    """
    path = directory / ".write-probe.tmp"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        write_all(fd, bytes(4096))
        os.fsync(fd)
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)


def _wall_ms() -> int:
    import time

    return time.time_ns() // 1_000_000


class LogManager:
    """The topics of a data directory, their partition logs and their configs.

    The registry (names, ids, partition counts, config overrides) is one JSON file
    replaced atomically on every change, so it survives crashes; changes are
    written before the partition directories are created or removed. A topic's
    deletion is durable once :meth:`delete_topic` returns; its directories are
    renamed ``*-delete`` and removed (again at the next start if interrupted).

    Args:
        data_dir: the directory (created when missing). It is locked (``flock``)
            while this manager is open.
        default_config: the settings of topics without overrides.
        now_ms: the current time (defaults to the wall clock).
        broker_defaults: the broker's settings of topic configs that have no
            ``LogConfig`` field (Kafka name -> value), reported as their defaults.

    Raises:
        LogStorageError: the directory is locked by another manager, or unreadable.
    """

    def __init__(
        self,
        data_dir: Path,
        default_config: LogConfig | None = None,
        *,
        now_ms: int | None = None,
        max_partitions: int | None = None,
        broker_defaults: Mapping[str, str] | None = None,
    ) -> None:
        import fcntl

        self._broker_defaults = dict(broker_defaults or {})

        #: The most partitions this broker holds (None: no limit); each open
        #: partition takes file descriptors, so the broker derives it from its
        #: open-file limit.
        self.max_partitions = max_partitions
        self._data_dir = Path(data_dir)
        self._default = default_config if default_config is not None else LogConfig()
        self._topics: dict[str, TopicInfo] = {}
        self._by_id: dict[uuid.UUID, str] = {}
        self._logs: dict[tuple[str, int], PartitionLog] = {}
        # The hosted partitions of the topics that do not host them all.
        self._hosted: dict[str, frozenset[int]] = {}
        self._configs: dict[str, LogConfig] = {}
        self._closed = False
        now = _wall_ms() if now_ms is None else now_ms
        try:
            self._data_dir.mkdir(parents=True, exist_ok=True)
            self._lock_fd = os.open(self._data_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise LogStorageError(f"cannot use the data directory {data_dir}: {exc}") from exc
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(self._lock_fd)
            raise LogStorageError(
                f"the data directory {data_dir} is in use by another broker"
            ) from exc
        try:
            self._load(now)
        except BaseException:
            self.close()
            raise

    def _load(self, now_ms: int) -> None:
        for entry in os.scandir(self._data_dir):
            if entry.is_dir() and entry.name.endswith("-delete"):
                shutil.rmtree(entry.path, ignore_errors=True)
            elif entry.name.endswith(".tmp"):
                os.unlink(entry.path)
        path = self._data_dir / REGISTRY_FILE
        try:
            raw = json.loads(path.read_bytes())
            topics = raw["topics"]
        except FileNotFoundError:
            topics = {}
        except (ValueError, KeyError, TypeError) as exc:
            raise LogStorageError(f"the topic registry {path} is unreadable: {exc}") from exc
        try:
            for name, entry in topics.items():
                info = TopicInfo(
                    name=name,
                    topic_id=uuid.UUID(entry["topic_id"]),
                    num_partitions=int(entry["num_partitions"]),
                    configs={str(k): str(v) for k, v in entry["configs"].items()},
                )
                self._topics[name] = info
                self._by_id[info.topic_id] = name
                self._configs[name] = effective_config(self._default, info.configs)
                if "hosted" in entry:
                    self._hosted[name] = frozenset(int(i) for i in entry["hosted"])
        except (ValueError, KeyError, TypeError, AttributeError, InvalidConfigError) as exc:
            raise LogStorageError(f"the topic registry {path} is unreadable: {exc}") from exc
        for info in self._topics.values():
            for index in self._hosted_indexes(info):
                self._open_partition(info.name, index, now_ms)

    # -- queries ---------------------------------------------------------------------------

    @property
    def data_dir(self) -> Path:
        return self._data_dir

    @property
    def default_config(self) -> LogConfig:
        return self._default

    def topics(self) -> list[TopicInfo]:
        """Every topic, sorted by name."""
        return [self._topics[name] for name in sorted(self._topics)]

    def topic(self, name: str) -> TopicInfo | None:
        """The topic called ``name``, or None."""
        return self._topics.get(name)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        """The topic with this id, or None."""
        name = self._by_id.get(topic_id)
        return None if name is None else self._topics[name]

    def partition(self, name: str, index: int) -> PartitionLog:
        """The log of one partition.

        Raises:
            UnknownTopicOrPartitionError: no such topic or partition.
        """
        log = self._logs.get((name, index))
        if log is None:
            raise UnknownTopicOrPartitionError(f"unknown topic-partition {name}-{index}")
        return log

    def partitions(self, name: str) -> list[PartitionLog]:
        """All partition logs of a topic, by index.

        Raises:
            UnknownTopicOrPartitionError: no such topic.
        """
        return [log for _, log in self.hosted(name)]

    def hosted(self, name: str) -> list[tuple[int, PartitionLog]]:
        """``(index, log)`` of the topic's partitions hosted here, by index.

        Raises:
            UnknownTopicOrPartitionError: no such topic.
        """
        info = self._require(name)
        return [(i, self._logs[(name, i)]) for i in self._hosted_indexes(info)]

    def hosts(self, name: str, index: int) -> bool:
        """Whether the partition's log is here."""
        return (name, index) in self._logs

    def config(self, name: str) -> LogConfig:
        """A topic's effective settings.

        Raises:
            UnknownTopicOrPartitionError: no such topic.
        """
        self._require(name)
        return self._configs[name]

    # -- topic changes -----------------------------------------------------------------------

    def create_topic(
        self,
        name: str,
        num_partitions: int,
        configs: Mapping[str, str | None] | None = None,
        *,
        validate_only: bool = False,
        now_ms: int | None = None,
        topic_id: uuid.UUID | None = None,
        hosted: Iterable[int] | None = None,
    ) -> TopicInfo:
        """Create a topic and its partition logs.

        Args:
            name: the topic's name (Kafka's rules; see :func:`validate_topic_name`).
            num_partitions: at least 1.
            configs: config overrides, by Kafka name (``retention.ms``) or Python
                spelling (``retention_ms``); None values are skipped.
            validate_only: check everything but change nothing (CreateTopics' flag).
            now_ms: the current time (defaults to the wall clock).
            topic_id: the topic's id, when a cluster already chose it (every broker
                of a cluster must use the same); None draws a random one.
            hosted: the partitions whose logs are kept here (a cluster member's
                replicas; none for a single node's internal topic, whose data
                its coordinators keep elsewhere); None: all of them.

        Returns:
            The new topic.

        Raises:
            InvalidTopicError: a bad name, or one that collides with an existing
                topic once '.' and '_' are treated alike (as Kafka forbids).
            TopicExistsError: the topic exists, or another topic has ``topic_id``.
            InvalidPartitionsError: ``num_partitions`` below 1.
            InvalidConfigError: an unknown config, or a bad value.
            ValueError: ``topic_id`` is not a UUID, or is the zero UUID.
            LogStorageError: the registry or a log cannot be written.
        """
        self._check_open()
        validate_topic_name(name)
        if name in self._topics:
            raise TopicExistsError(topic_exists(name))
        if topic_id is not None:
            if not isinstance(topic_id, uuid.UUID) or topic_id.int == 0:
                raise ValueError(f"a topic id must be a non-zero UUID, got {topic_id!r}")
            if topic_id in self._by_id:
                raise TopicExistsError(
                    f"topic id {topic_id} is already used by topic {self._by_id[topic_id]!r}"
                )
        check_topic_collision(name, self._topics)
        if not isinstance(num_partitions, int) or num_partitions < 1:
            raise InvalidPartitionsError(
                f"the number of partitions must be at least 1, got {num_partitions}"
            )
        kept = None if hosted is None else frozenset(i for i in hosted if 0 <= i < num_partitions)
        self._check_room(num_partitions if kept is None else len(kept))
        overrides = {k: v for k, v in normalise_configs(configs or {}).items() if v is not None}
        config = effective_config(self._default, overrides)
        info = TopicInfo(
            name=name,
            topic_id=new_topic_id() if topic_id is None else topic_id,
            num_partitions=num_partitions,
            configs=overrides,
        )
        if validate_only:
            return info
        self._topics[name] = info
        self._by_id[info.topic_id] = name
        self._configs[name] = config
        if kept is not None:
            self._hosted[name] = kept
        try:
            self._save()
        except BaseException:
            del self._topics[name], self._by_id[info.topic_id], self._configs[name]
            self._hosted.pop(name, None)
            raise
        now = _wall_ms() if now_ms is None else now_ms
        for index in self._hosted_indexes(info):
            self._open_partition(name, index, now, fresh=True)
        return info

    def delete_topic(self, name: str) -> None:
        """Delete a topic and its data.

        Read chunks handed out earlier stay readable until dropped.

        Raises:
            UnknownTopicOrPartitionError: no such topic.
            LogStorageError: the registry cannot be written.
        """
        self._check_open()
        info = self._require(name)
        del self._topics[name]
        del self._by_id[info.topic_id]
        config = self._configs.pop(name)
        hosted = self._hosted.pop(name, None)
        try:
            self._save()
        except BaseException:
            self._topics[name] = info
            self._by_id[info.topic_id] = name
            self._configs[name] = config
            if hosted is not None:
                self._hosted[name] = hosted
            raise
        for index in range(info.num_partitions):
            log = self._logs.pop((name, index), None)
            if log is not None:
                log.abandon()
            self._remove_partition_dir(name, index, info.topic_id.hex)

    def create_partitions(
        self, name: str, total: int, *, validate_only: bool = False, now_ms: int | None = None
    ) -> TopicInfo:
        """Grow a topic to ``total`` partitions.

        Raises:
            UnknownTopicOrPartitionError: no such topic.
            InvalidPartitionsError: ``total`` is not larger than the current count.
            LogStorageError: the registry or a log cannot be written.
        """
        self._check_open()
        info = self._require(name)
        if not isinstance(total, int) or total <= info.num_partitions:
            raise InvalidPartitionsError(partitions_not_grown(info.num_partitions, total))
        if name not in self._hosted:  # (a topic hosted in part here grows elsewhere)
            self._check_room(total - info.num_partitions)
        new = dataclasses.replace(info, num_partitions=total)
        if validate_only:
            return new
        self._topics[name] = new
        try:
            self._save()
        except BaseException:
            self._topics[name] = info
            raise
        now = _wall_ms() if now_ms is None else now_ms
        for index in range(info.num_partitions, total):
            if name not in self._hosted:
                self._open_partition(name, index, now, fresh=True)
        return new

    def host(self, name: str, hosted: Iterable[int], now_ms: int) -> list[int]:
        """Keep logs here for exactly the partitions ``hosted`` of a topic (a
        cluster member's replicas): new ones are created empty, the others are
        closed and their directories deleted (Kafka's StopReplica with
        ``delete=true``).

        Returns:
            The indexes whose logs were deleted.

        Raises:
            UnknownTopicOrPartitionError: no such topic.
            LogStorageError: the registry cannot be written.
        """
        self._check_open()
        info = self._require(name)
        wanted = frozenset(i for i in hosted if 0 <= i < info.num_partitions)
        before = self._hosted.get(name)
        if before == wanted:
            return []
        self._hosted[name] = wanted
        try:
            self._save()
        except BaseException:
            if before is None:
                del self._hosted[name]
            else:
                self._hosted[name] = before
            raise
        removed = []
        for index in range(info.num_partitions):
            key = (name, index)
            if index in wanted and key not in self._logs:
                self._open_partition(name, index, now_ms, fresh=True)
            elif index not in wanted and key in self._logs:
                self._logs.pop(key).abandon()
                self._remove_partition_dir(name, index, info.topic_id.hex)
                removed.append(index)
        return removed

    def _check_room(self, more: int) -> None:
        """Refuse ``more`` partition logs that would take the broker past
        ``max_partitions`` (the partitions whose logs are here count, the others
        hold no files)."""
        limit = self.max_partitions
        if limit is None or more <= 0:
            return
        held = sum(len(self._hosted_indexes(info)) for info in self._topics.values())
        if held + more > limit:
            raise PolicyViolationError(
                f"{more} more partition(s) would make {held + more}; this broker holds at most "
                f"{limit} (max.partitions: each partition keeps files open)"
            )

    def describe_configs(self, name: str) -> list[ConfigEntry]:
        """Every topic config with its value and source, sorted by name.

        Raises:
            UnknownTopicOrPartitionError: no such topic.
        """
        info = self._require(name)
        return topic_config_entries(
            info.configs, self._configs[name], self._default, self._broker_defaults
        )

    def describe_new_configs(self, overrides: Mapping[str, str]) -> list[ConfigEntry]:
        """What :meth:`describe_configs` would say of a topic created with
        ``overrides`` (a validate-only CreateTopics describes the topic it checked)."""
        parsed = {k: v for k, v in normalise_configs(overrides).items() if v is not None}
        config = effective_config(self._default, parsed)
        return topic_config_entries(parsed, config, self._default, self._broker_defaults)

    def alter_configs(
        self,
        name: str,
        changes: Mapping[str, str | None],
        *,
        incremental: bool = True,
        validate_only: bool = False,
    ) -> TopicInfo:
        """Change a topic's config overrides; the logs pick them up at once.

        Args:
            name: the topic.
            changes: config name -> new value, or None to return to the default.
            incremental: apply ``changes`` to the current overrides
                (IncrementalAlterConfigs); False replaces the whole set (AlterConfigs).
            validate_only: check, change nothing.

        Returns:
            The topic with its new overrides.

        Raises:
            UnknownTopicOrPartitionError: no such topic.
            InvalidConfigError: an unknown config or a bad value.
            LogStorageError: the registry cannot be written.
        """
        self._check_open()
        info = self._require(name)
        parsed = normalise_configs(changes)
        overrides = dict(info.configs) if incremental else {}
        for key, value in parsed.items():
            if value is None:
                overrides.pop(key, None)
            else:
                overrides[key] = value
        config = effective_config(self._default, overrides)
        new = dataclasses.replace(info, configs=overrides)
        if validate_only:
            return new
        self._topics[name] = new
        try:
            self._save()
        except BaseException:
            self._topics[name] = info
            raise
        self._configs[name] = config
        for _, log in self.hosted(name):
            log.reconfigure(config)
        return new

    # -- maintenance -----------------------------------------------------------------------

    def apply_retention(self, now_ms: int) -> int:
        """Roll segments older than ``segment_ms``, then apply every log's retention.

        Returns:
            The number of segments deleted.
        """
        deleted = 0
        for log in list(self._logs.values()):
            try:
                log.maybe_roll(now_ms)
                deleted += log.apply_retention(now_ms)
            except LogStorageError as exc:
                logger.warning("retention skipped for %s: %s", log.directory.name, exc)
        return deleted

    def maybe_flush_all(self, now_ms: int) -> int:
        """Flush the logs whose ``flush_interval_ms`` has passed.

        Returns:
            How many logs were flushed.
        """
        return sum(1 for log in list(self._logs.values()) if log.maybe_flush(now_ms))

    def checkpoint_high_watermarks(self) -> int:
        """Write the tracked high watermarks that moved (Kafka does it every few seconds).

        Returns:
            How many checkpoints were written; failures are logged and skipped.
        """
        written = 0
        for log in list(self._logs.values()):
            try:
                written += log.checkpoint_high_watermark()
            except LogStorageError as exc:
                logger.warning("high watermark checkpoint skipped: %s", exc)
        return written

    def flush_all(self) -> None:
        """fsync every log.

        Raises:
            LogStorageError: an fsync failed.
        """
        for log in self._logs.values():
            log.flush()

    def close(self) -> None:
        """Close every log (clean shutdown) and unlock the directory (idempotent)."""
        if self._closed:
            return
        self._closed = True
        for log in self._logs.values():
            log.close()
        self._logs.clear()
        os.close(self._lock_fd)

    def __enter__(self) -> LogManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- helpers ---------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise LogStorageError("the log manager is closed")

    def _require(self, name: str) -> TopicInfo:
        info = self._topics.get(name)
        if info is None:
            raise UnknownTopicOrPartitionError(f"unknown topic {name!r}")
        return info

    def reopen_partition(self, name: str, index: int, now_ms: int) -> PartitionLog:
        """Bring an offline partition back without restarting the broker.

        The check: the partition's directory takes a write again (a small file is
        written, fsynced and removed), then the log is opened afresh exactly as a
        restart opens it, recovery validating every segment from its recovery
        point (the failed write's segment included) and cutting what is torn. Only
        then does the new log replace the offline one, whose files are released.
        A partition that is not offline is left alone.

        Returns:
            The partition's log (the new one when it was reopened).

        Raises:
            UnknownTopicOrPartitionError: no such partition.
            LogStorageError: the check or the open failed; the partition stays offline.
        """
        old = self.partition(name, index)
        if old.offline is None:
            return old
        directory = old.directory
        try:
            _probe_write(directory)
        except OSError as exc:
            raise LogStorageError(f"{directory}: still cannot write: {exc}") from exc
        new = PartitionLog.open(directory, self._configs[name], now_ms=now_ms)
        old.abandon()
        self._logs[(name, index)] = new
        logger.warning(
            "partition %s is back online (it went offline: %s); log end offset %d",
            directory,
            old.offline,
            new.log_end_offset,
        )
        return new

    def _hosted_indexes(self, info: TopicInfo) -> list[int]:
        hosted = self._hosted.get(info.name)
        every = range(info.num_partitions)
        return list(every) if hosted is None else [i for i in every if i in hosted]

    def _partition_dir(self, name: str, index: int) -> Path:
        return self._data_dir / f"{name}-{index}"

    def _open_partition(self, name: str, index: int, now_ms: int, *, fresh: bool = False) -> None:
        directory = self._partition_dir(name, index)
        if fresh and directory.exists():
            # Left by a deletion interrupted between the registry write and the
            # rename: it belongs to an older topic of the same name.
            self._remove_partition_dir(name, index, "stale")
        self._logs[(name, index)] = PartitionLog.open(directory, self._configs[name], now_ms=now_ms)

    def _remove_partition_dir(self, name: str, index: int, tag: str) -> None:
        directory = self._partition_dir(name, index)
        target = directory.with_name(f"{directory.name}.{tag}{uuid.uuid4().hex[:8]}-delete")
        try:
            os.replace(directory, target)
        except FileNotFoundError:
            return
        except OSError as exc:
            logger.warning("cannot rename %s for deletion: %s", directory, exc)
            return
        shutil.rmtree(target, ignore_errors=True)

    def _save(self) -> None:
        data = {
            "version": 1,
            "topics": {
                name: {
                    "topic_id": str(info.topic_id),
                    "num_partitions": info.num_partitions,
                    "configs": info.configs,
                    **({"hosted": sorted(self._hosted[name])} if name in self._hosted else {}),
                }
                for name, info in sorted(self._topics.items())
            },
        }
        try:
            atomic_write(self._data_dir / REGISTRY_FILE, json.dumps(data, indent=1).encode())
        except OSError as exc:
            raise LogStorageError(f"cannot write the topic registry: {exc}") from exc


def topic_config_entries(
    overrides: Mapping[str, str],
    config: LogConfig,
    default: LogConfig,
    broker_defaults: Mapping[str, str],
) -> list[ConfigEntry]:
    """Every topic config with its value and source, sorted by name: the topic's
    own ``overrides`` first, then the broker's settings (``default``, and
    ``broker_defaults`` for the keys no LogConfig field holds), then the built-in
    defaults."""
    builtin = LogConfig()
    out = []
    for key in sorted(TOPIC_CONFIGS):
        spec = TOPIC_CONFIGS[key]
        if key in overrides:
            value: str | None = overrides[key]
            source = ConfigSource.DYNAMIC_TOPIC_CONFIG
        elif spec.field is not None:
            value = field_text(spec.field, getattr(config, spec.field))
            differs = getattr(default, spec.field) != getattr(builtin, spec.field)
            source = ConfigSource.STATIC_BROKER_CONFIG if differs else ConfigSource.DEFAULT_CONFIG
        else:
            value = broker_defaults.get(key, spec.default)
            source = (
                ConfigSource.DEFAULT_CONFIG
                if value == spec.default
                else ConfigSource.STATIC_BROKER_CONFIG
            )
        out.append(
            ConfigEntry(
                name=key,
                value=value,
                is_default=source == ConfigSource.DEFAULT_CONFIG,
                read_only=False,
                sensitive=False,
                source=source,
                config_type=spec.type,
            )
        )
    return out
