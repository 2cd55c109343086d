"""The cluster's client quotas through ZooKeeper: written by any broker, followed by all.

What the znodes hold is decided in :mod:`trafka.brokerlite.security.zk_quotas`
(Kafka's layout of dynamic configs); these functions only read and write them
(run in a thread), for :class:`~.config_sync.ConfigSync`.

Rules:

* Writing (an AlterClientQuotas task): per entity, read its znode, change its
  quota entries (other entries, such as a user's SCRAM credentials, kept) and
  write it conditionally on the version read (a concurrent writer makes it
  read again), then create a ``/config/changes`` notification.
* Following: a new ``/config/changes`` notification (the watch
  :class:`~.config_sync.ConfigSync` sets) makes the broker read every entity znode again and
  hand the quotas to its quota manager
  (:meth:`~trafka.brokerlite.quotas.Quotas.use_cluster`); the same reading
  happens when the broker joins, before it serves, so a broker with an empty
  data directory throttles from its first request.
* An entity znode Kafka's layout does not allow is logged and skipped.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from ...quotas import CLIENT_ID, IP, USER, Entity
from ...security.zk_quotas import (
    CONFIG_CLIENTS,
    CONFIG_IPS,
    entity_znode,
    name_of,
    quota_change_notification,
    quotas_of,
    updated_quota_config,
)
from ...security.zk_scram import CONFIG_USERS, decode_user_config
from ..zk_layout import ZkDataError
from .metadata_sync import rewrite_entity_config

__all__ = ["read_all_quotas", "write_quotas"]

log = logging.getLogger("trafka.brokerlite.cluster")


def _children(zk: Any, path: str) -> list[str]:
    from kazoo.exceptions import NoNodeError

    try:
        return sorted(zk.get_children(path))
    except NoNodeError:
        return []


def read_all_quotas(zk: Any) -> dict[Entity, dict[str, float]]:
    """Every entity's quotas in ZooKeeper (run in a thread)."""
    from kazoo.exceptions import NoNodeError

    entities: list[Entity] = []
    for user in _children(zk, CONFIG_USERS):
        entities.append(((USER, name_of(user)),))
        for client in _children(zk, f"{CONFIG_USERS}/{user}/clients"):
            entities.append(((CLIENT_ID, name_of(client)), (USER, name_of(user))))
    entities.extend(((CLIENT_ID, name_of(c)),) for c in _children(zk, CONFIG_CLIENTS))
    entities.extend(((IP, name_of(ip)),) for ip in _children(zk, CONFIG_IPS))
    out: dict[Entity, dict[str, float]] = {}
    for entity in entities:
        path = entity_znode(entity)
        try:
            data, _ = zk.get(path)
            values = quotas_of(path, entity, decode_user_config(path, data))
        except NoNodeError:
            continue
        except ZkDataError as exc:
            log.warning("ignoring client quotas: %s", exc)
            continue
        if values:
            out[entity] = values
    return out


def write_quotas(zk: Any, changes: list[tuple[Entity, dict[str, float], list[str]]]) -> None:
    """Apply quota changes to the entities' znodes, then notify (run in a thread)."""
    for entity, set_, remove in changes:
        rewrite_entity_config(
            zk,
            entity_znode(entity),
            functools.partial(updated_quota_config, entity, set_=set_, remove=remove),
            quota_change_notification(entity),
        )
