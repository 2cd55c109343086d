"""Finalized feature levels (KIP-584): what UpdateFeatures changes and ApiVersions reports.

brokerlite is its own controller, so it keeps the cluster's finalized levels
itself, in ``trafka-features.journal`` (the CRC journal of :mod:`.storage.journal`).

Features and levels:

* brokerlite supports ``group.version`` 0-1 (1: the consumer group protocol of
  KIP-848), ``share.version`` 0-2 (1: share groups, KIP-932; 2: their
  dead-letter queues, KIP-1191, on a single node and in a cluster, where a
  share-partition leader produces its dead letters to the DLQ partition's
  leader) and ``transaction.version`` 0-2 (2: KIP-890 part 2, transactions with
  implicit partitions and an epoch bump per transaction; 1: Kafka's flexible
  transaction records, which changes nothing a client sees), on a single node
  and in a cluster. A fresh data directory has each at its highest level
  (``transaction.version`` 2, as a new Kafka 4.x cluster), epoch 1; so does a
  data directory written before brokerlite knew ``transaction.version``, or
  before a cluster supported it (the feature store only keeps levels that
  changed, so it cannot tell the two apart).
* The finalized level only tells clients which flow to use (Kafka's Java
  client reads it from ApiVersions before each transaction); the broker serves
  both flows, deciding by each request's version as Kafka does, so lowering it
  with UpdateFeatures (``kafka-features downgrade --feature
  transaction.version=1``) moves new transactions back to AddPartitionsToTxn.
* A cluster of brokerlites (``cluster_mode``) supports the same levels
  (:data:`SUPPORTED`). The levels are the cluster's, in ZooKeeper's
  ``/feature`` (:mod:`.cluster.driver.feature_sync`): UpdateFeatures to any
  broker writes them there, and each broker follows the znode into its own
  store (:meth:`FeatureStore.follow`), which it answers ApiVersions from and
  keeps in its journal. Before anyone changed a level there is no
  ``/feature`` and each broker has its defaults. The finalized
  ``share.version`` decides whether share-partitions write dead letters,
  ``transaction.version`` how transaction coordinators fence (see
  :mod:`.transactions.tv2`); every broker serves both transaction flows by
  request version whatever the levels, so brokers that learn a change a moment
  apart lose nothing.
* Level 0 is "not finalized": the feature leaves ApiVersions' finalized list,
  as Kafka's controller removes a feature whose level record is 0.
* The finalized epoch starts at 1 and grows by one with every applied
  UpdateFeatures request that named at least one feature (Kafka's epoch is the
  metadata log offset of the change, which grows the same way: a request that
  sets a level it already has still writes a record).

Validation, as Kafka's KRaft controller (``FeatureControlManager.updateFeature``),
feature by feature in request order, the first refusal ending the request:

* an upgrade type Kafka does not define (not 1, 2 or 3) is refused;
* a level below 0 is refused;
* a feature brokerlite does not support (``metadata.version``,
  ``kraft.version``, any other name), or
  a level above the highest it supports, is refused;
* a level below the current one needs a downgrade type (safe or unsafe; the
  two are the same for these features, which have no metadata to lose); a
  level above it needs the upgrade type; the current level again is accepted
  with any type.

Every refusal is INVALID_UPDATE_VERSION. A request is all or nothing: when one
update is refused, none is applied (Kafka's controller writes the records of a
request atomically, and only when every update passed).

Rules and invariants:

* An entry is written (fsynced) before the new levels are visible: a change
  that was answered survives a crash.
* Entry kind ``update``: ``epoch`` (the epoch after it) and ``levels`` (feature
  name to level, 0 included). Compaction writes one entry with every level, so
  a level lowered to 0 stays 0 across a restart.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from trafka.brokerlite.errors import BrokerError
from trafka.brokerlite.storage.journal import CrcJournal, JournalStore
from trafka.codec.errors import ErrorCode

__all__ = [
    "DEFAULT_LEVELS",
    "FEATURES_JOURNAL",
    "GROUP_VERSION",
    "SAFE_DOWNGRADE",
    "SHARE_VERSION",
    "SHARE_VERSION_DLQ",
    "SUPPORTED",
    "TRANSACTION_VERSION",
    "UNSAFE_DOWNGRADE",
    "UPGRADE",
    "FeatureStore",
    "FeatureStoreError",
    "FeatureUpdateError",
    "plan_update",
]

FEATURES_JOURNAL = "trafka-features.journal"

GROUP_VERSION = "group.version"
SHARE_VERSION = "share.version"
#: The ``share.version`` level from which share groups have dead-letter queues
#: (Kafka 4.4's ``ShareVersion.SV_2``, KIP-1191).
SHARE_VERSION_DLQ = 2
TRANSACTION_VERSION = "transaction.version"

#: name -> (lowest, highest) level brokerlite implements (a single node).
SUPPORTED: dict[str, tuple[int, int]] = {
    GROUP_VERSION: (0, 1),
    SHARE_VERSION: (0, 2),
    TRANSACTION_VERSION: (0, 2),
}
#: The levels of a fresh single-node data directory: every feature at its highest.
DEFAULT_LEVELS: dict[str, int] = {name: high for name, (_, high) in SUPPORTED.items()}
_FIRST_EPOCH = 1

# Kafka's FeatureUpdate.UpgradeType codes (UpdateFeatures v1+).
UPGRADE = 1
SAFE_DOWNGRADE = 2
UNSAFE_DOWNGRADE = 3
_UPGRADE_TYPES = {
    UPGRADE: "upgrade",
    SAFE_DOWNGRADE: "safe downgrade",
    UNSAFE_DOWNGRADE: "unsafe downgrade",
}


class FeatureUpdateError(BrokerError):
    """An update refused as Kafka's controller refuses it (INVALID_UPDATE_VERSION);
    the message says why."""

    code = ErrorCode.INVALID_UPDATE_VERSION


class FeatureStoreError(BrokerError):
    """The feature journal cannot be read or written."""


def _refused(name: str, level: int, why: str) -> FeatureUpdateError:
    return FeatureUpdateError(f"cannot set feature {name} to level {level}: {why}")


def plan_update(
    current: Mapping[str, int],
    updates: Iterable[tuple[str, int, int]],
    supported: Mapping[str, tuple[int, int]] = SUPPORTED,
) -> dict[str, int]:
    """The levels after ``updates`` (name, level, upgrade type), checked as the
    module docstring says.

    Args:
        current: every supported feature's level now (0: not finalized).
        updates: the request's updates, names already known to be distinct.
        supported: name -> (lowest, highest) level this broker implements.

    Returns:
        The new level of each feature named.

    Raises:
        FeatureUpdateError: INVALID_UPDATE_VERSION for the first update refused.
    """
    planned: dict[str, int] = {}
    for name, level, upgrade_type in updates:
        if upgrade_type not in _UPGRADE_TYPES:
            raise _refused(name, level, f"upgrade type {upgrade_type} is not one Kafka defines")
        if level < 0:
            raise _refused(name, level, "a feature level cannot be negative")
        levels = supported.get(name)
        if levels is None:
            raise _refused(name, level, "brokerlite does not support this feature")
        low, high = levels
        if not low <= level <= high:
            raise _refused(name, level, f"brokerlite supports levels {low} to {high}")
        now = current.get(name, 0)
        if level < now and upgrade_type == UPGRADE:
            raise _refused(
                name,
                level,
                f"it is at level {now}; lowering it needs a safe or unsafe downgrade",
            )
        if level > now and upgrade_type != UPGRADE:
            raise _refused(
                name,
                level,
                f"it is at level {now}; a {_UPGRADE_TYPES[upgrade_type]} cannot raise it",
            )
        planned[name] = level
    return planned


class FeatureStore(JournalStore):
    """The finalized feature levels and their epoch, in a CRC-checked journal.

    Args:
        path: the journal file.
        supported: name -> (lowest, highest) level this broker implements
            (:data:`SUPPORTED`, on a single node and in a cluster); a
            fresh journal has each at its highest.

    Raises:
        FeatureStoreError: the journal cannot be read or written, or holds a
            malformed entry.
    """

    def __init__(
        self,
        path: Path,
        *,
        supported: Mapping[str, tuple[int, int]] = SUPPORTED,
        fsync: bool = True,
        compact_min_bytes: int = 1 << 16,
    ) -> None:
        journal = CrcJournal(
            Path(path), format_name="features", version=1, fsync=fsync, error=FeatureStoreError
        )
        super().__init__(journal, compact_min_bytes=compact_min_bytes, name="feature journal")
        #: name -> (lowest, highest) level this broker implements.
        self.supported: dict[str, tuple[int, int]] = dict(supported)
        self._levels: dict[str, int] = {name: high for name, (_, high) in supported.items()}
        self.epoch = _FIRST_EPOCH
        self._load()

    def level(self, name: str) -> int:
        """The feature's finalized level; 0 when it is not finalized."""
        return self._levels.get(name, 0)

    def levels(self) -> dict[str, int]:
        """Every supported feature's level (0 included)."""
        return dict(self._levels)

    def finalized(self) -> dict[str, int]:
        """The finalized features (level 1 or more), by name."""
        return {name: level for name, level in self._levels.items() if level > 0}

    def update(self, levels: Mapping[str, int]) -> int:
        """Apply checked levels (:func:`plan_update`) durably; returns the new epoch.

        Raises:
            FeatureStoreError: the journal write failed; nothing changed.
        """
        self._write({"kind": "update", "epoch": self.epoch + 1, "levels": dict(levels)})
        return self.epoch

    def follow(self, levels: Mapping[str, int], epoch: int) -> bool:
        """Take the cluster's levels (a cluster node following ZooKeeper's
        ``/feature``): every supported feature at its level in ``levels`` (0 when
        absent), with ``epoch``. Durable, as :meth:`update`; nothing is written
        when they are the levels and epoch held already.

        Returns:
            Whether anything changed.

        Raises:
            FeatureStoreError: the journal write failed; nothing changed.
        """
        wanted = {
            name: min(max(levels.get(name, 0), 0), high)
            for name, (_, high) in self.supported.items()
        }
        if wanted == self._levels and epoch == self.epoch:
            return False
        self._write({"kind": "update", "epoch": epoch, "levels": wanted})
        return True

    def _apply(self, entry: dict[str, Any]) -> None:
        kind = entry.get("kind")
        if kind != "update":
            raise FeatureStoreError(
                f"feature journal {self.path}: unknown entry kind {kind!r} "
                "(written by a newer brokerlite?)"
            )
        try:
            epoch = entry["epoch"]
            levels = entry["levels"]
            if type(epoch) is not int or not isinstance(levels, dict):
                raise ValueError("epoch or levels of the wrong type")
            for name, level in levels.items():
                if type(level) is not int or name not in SUPPORTED:
                    raise ValueError(f"feature {name!r} at level {level!r}")
        except (KeyError, ValueError) as exc:
            raise FeatureStoreError(
                f"feature journal {self.path}: malformed {kind!r} entry: {exc!r}"
            ) from exc
        # A feature this broker does not support (written by a newer brokerlite
        # that supports more) is dropped, and a level above its highest lowered.
        self._levels.update(
            (n, min(v, self.supported[n][1])) for n, v in levels.items() if n in self.supported
        )
        self.epoch = epoch

    def _live_entries(self) -> list[dict[str, Any]]:
        return [{"kind": "update", "epoch": self.epoch, "levels": dict(self._levels)}]
