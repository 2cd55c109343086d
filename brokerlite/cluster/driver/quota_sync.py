"""The cluster's client quotas through ZooKeeper: written by any broker, followed by all.

What the znodes hold is decided in :mod:`trafka.brokerlite.security.zk_quotas`
(Kafka's layout of dynamic configs); this mixin only reads and writes them.

Rules:

* Writing (an AlterClientQuotas task): per entity, read its znode, change its
  quota entries (other entries, such as a user's SCRAM credentials, kept) and
  write it conditionally on the version read (a concurrent writer makes it
  read again), then create a ``/config/changes`` notification.
* Following: a new ``/config/changes`` notification (the watch
  :mod:`.scram_sync` sets) makes the broker read every entity znode again and
  hand the quotas to its quota manager
  (:meth:`~trafka.brokerlite.quotas.Quotas.use_cluster`); the same reading
  happens when the broker joins, before it serves, so a broker with an empty
  data directory throttles from its first request.
* An entity znode Kafka's layout does not allow is logged and skipped.
"""

from __future__ import annotations

import functools
import logging

import trio

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
from .base import DriverParts

__all__ = ["QuotaSync"]

log = logging.getLogger("trafka.brokerlite.cluster")


class QuotaSync(DriverParts):
    """The quota duties of a cluster driver (see the module rules)."""

    def _children(self, path: str) -> list[str]:
        from kazoo.exceptions import NoNodeError

        try:
            return sorted(self.zk.get_children(path))
        except NoNodeError:
            return []

    def _read_all_quotas(self) -> dict[Entity, dict[str, float]]:
        """Every entity's quotas in ZooKeeper (run in a thread)."""
        from kazoo.exceptions import NoNodeError

        entities: list[Entity] = []
        for user in self._children(CONFIG_USERS):
            entities.append(((USER, name_of(user)),))
            for client in self._children(f"{CONFIG_USERS}/{user}/clients"):
                entities.append(((CLIENT_ID, name_of(client)), (USER, name_of(user))))
        entities.extend(((CLIENT_ID, name_of(c)),) for c in self._children(CONFIG_CLIENTS))
        entities.extend(((IP, name_of(ip)),) for ip in self._children(CONFIG_IPS))
        out: dict[Entity, dict[str, float]] = {}
        for entity in entities:
            path = entity_znode(entity)
            try:
                data, _ = self.zk.get(path)
                values = quotas_of(path, entity, decode_user_config(path, data))
            except NoNodeError:
                continue
            except ZkDataError as exc:
                log.warning("ignoring client quotas: %s", exc)
                continue
            if values:
                out[entity] = values
        return out

    def _write_quotas(self, changes: list[tuple[Entity, dict[str, float], list[str]]]) -> None:
        """Apply quota changes to the entities' znodes, then notify (run in a thread)."""
        for entity, set_, remove in changes:
            self._rewrite_entity_config(
                entity_znode(entity),
                functools.partial(updated_quota_config, entity, set_=set_, remove=remove),
                quota_change_notification(entity),
            )

    async def _load_quotas(self) -> None:
        """Read every entity's quotas and hand them to the quota manager."""
        quotas = await trio.to_thread.run_sync(self._read_all_quotas)
        self.broker.quotas.use_cluster(quotas)
        self._kick()
