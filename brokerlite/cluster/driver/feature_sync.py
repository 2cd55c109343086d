"""The cluster's finalized feature levels (KIP-584) through ZooKeeper's ``/feature``,
as Kafka 3.9's ZooKeeper-mode controller keeps them: written by the broker that
takes an UpdateFeatures, followed by all.

Rules:

* ``/feature`` holds the cluster's finalized levels (:func:`~..zk_layout.encode_features`:
  Kafka's ``FeatureZNode`` version 2); a feature it does not list is at level 0.
  The finalized epoch every broker reports is the znode's version plus 2 (a
  fresh broker's levels have epoch 1; the znode's creation is the first change),
  so every broker tells clients the same epoch for the same levels, as Kafka's
  ZooKeeper-mode brokers report the znode's version.
* Before ``/feature`` exists (a cluster nobody changed a level of) each broker
  keeps its own levels (every feature at its highest on a fresh data directory,
  as a new Kafka 4.x cluster).
* Writing (an UpdateFeatures task, its levels checked by the handler): read
  ``/feature`` (absent: the writing broker's own levels are the base), set the
  request's features on it and write it conditionally on the version read
  (created if absent); a concurrent writer makes it read again. Then the
  writer reads it back into its own store, so the answer's broker reports the
  new levels at once; the others follow their watch.
* Following: a data watch on ``/feature`` (set when the broker joins, as
  Kafka's ``FinalizedFeatureChangeListener``) and every reading of the configs
  read it again into the broker's feature store (:meth:`~...features.FeatureStore.follow`),
  which writes its journal only when something changed. A znode that is not
  Kafka's document is logged and left unapplied.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from ..zk_layout import FEATURE, ZkDataError, decode_features, encode_features

__all__ = ["FEATURE_EPOCH_BASE", "read_features", "write_features"]

log = logging.getLogger("trafka.brokerlite.cluster")

#: The finalized epoch of the levels ``/feature`` holds at znode version 0.
FEATURE_EPOCH_BASE = 2


def read_features(zk: Any) -> tuple[dict[str, int], int] | None:
    """The cluster's finalized levels and their epoch; None while ``/feature``
    does not exist or is not Kafka's document (run in a thread)."""
    from kazoo.exceptions import NoNodeError

    try:
        data, stat = zk.get(FEATURE)
    except NoNodeError:
        return None
    try:
        return decode_features(data), stat.version + FEATURE_EPOCH_BASE
    except ZkDataError as exc:
        log.warning("ignoring the cluster's feature levels: %s", exc)
        return None


def write_features(zk: Any, changes: Mapping[str, int], base: Mapping[str, int]) -> None:
    """Set ``changes`` (feature name to level, 0 included) on ``/feature``; ``base``
    is the levels to start from when it does not exist (run in a thread)."""
    from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

    while True:
        try:
            data, stat = zk.get(FEATURE)
        except NoNodeError:
            try:
                zk.create(FEATURE, encode_features({**base, **changes}), makepath=True)
            except NodeExistsError:
                continue  # another broker created it first: set on top of its levels
            return
        try:
            levels = decode_features(data)
        except ZkDataError as exc:
            log.warning("rewriting the cluster's feature levels: %s", exc)
            levels = dict(base)
        try:
            zk.set(FEATURE, encode_features({**levels, **changes}), version=stat.version)
        except BadVersionError:
            continue  # changed meanwhile: apply ours on top of it
        return
