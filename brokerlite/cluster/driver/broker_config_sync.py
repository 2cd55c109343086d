"""The brokers' dynamic configs through ZooKeeper: written by the broker they name,
followed by all.

brokerlite's dynamic broker configs are the replication throttles' rates
(:mod:`trafka.brokerlite.cluster.replication_quotas`, KIP-73), kept where a
ZooKeeper-mode Kafka keeps them: ``/config/brokers/<id>`` for one broker,
``/config/brokers/<default>`` for all, as ``{"version":1,"config":{...}}``.

Rules:

* Writing (an AlterConfigs or IncrementalAlterConfigs task on a broker
  resource): read the entity's znode, change its entries and write it
  conditionally on the version read (a concurrent writer makes it read again),
  then create a ``/config/changes`` notification naming ``brokers/<entity>``
  (:func:`~.metadata_sync.rewrite_entity_config`, shared with the users' configs).
* Following: a ``/config/changes`` notification (the watch :class:`~.config_sync.ConfigSync`
  sets) makes the broker read its own and the default entity again and hand
  them to its replication quotas; the same reading happens when it joins,
  before it serves.
* A znode that is not Kafka's document is logged and read as empty.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from typing import Any

from ...security.zk_scram import decode_user_config
from ..zk_layout import (
    DEFAULT_BROKER,
    ZkDataError,
    broker_config_path,
    config_change_notification,
)
from .metadata_sync import rewrite_entity_config

__all__ = ["read_broker_configs", "write_broker_config"]

log = logging.getLogger("trafka.brokerlite.cluster")


def _updated(
    config: dict[str, str], *, changes: Mapping[str, str | None], replace: bool
) -> dict[str, str]:
    out = {} if replace else dict(config)
    for name, value in changes.items():
        if value is None:
            out.pop(name, None)
        else:
            out[name] = value
    return out


def read_broker_configs(zk: Any, node_id: int) -> tuple[dict[str, str], dict[str, str]]:
    """This broker's and the default broker's dynamic configs (run in a thread)."""
    from kazoo.exceptions import NoNodeError

    found: list[dict[str, str]] = []
    for entity in (str(node_id), DEFAULT_BROKER):
        path = broker_config_path(entity)
        try:
            data, _ = zk.get(path)
            found.append(decode_user_config(path, data))
        except NoNodeError:
            found.append({})
        except ZkDataError as exc:
            log.warning("ignoring dynamic broker configs: %s", exc)
            found.append({})
    return found[0], found[1]


def write_broker_config(
    zk: Any, entity: str, changes: Mapping[str, str | None], replace: bool
) -> None:
    """Change a broker entity's dynamic configs, then notify (run in a thread)."""
    rewrite_entity_config(
        zk,
        broker_config_path(entity),
        functools.partial(_updated, changes=changes, replace=replace),
        config_change_notification(f"brokers/{entity}"),
    )
