"""Share groups' configs through ZooKeeper: written by any broker, followed by all.

A share group's configs (``share.auto.offset.reset``,
``share.record.lock.duration.ms``, ...) are read by its group coordinator and by
every share-partition leader of its partitions, which are different brokers in a
cluster. Kafka keeps group configs in its cluster metadata; brokerlite keeps
them where a ZooKeeper-era Kafka keeps every other entity's dynamic configs:

* ``/config/groups/<group>`` holds ``{"version":1,"config":{...}}``, the group's
  whole set of overrides (the group id sanitized as Kafka's entity names are);
  an empty set deletes the znode;
* a change creates ``/config/changes/config_change_N`` with
  ``{"version":2,"entity_path":"groups/<group>"}``.

Rules:

* Writing (a ``group_configs`` task, validated by the broker that received the
  request): the znode is replaced whole, conditionally on the version read,
  then the notification is created, then this broker reads the configs again,
  so that its answer comes after its own view has them.
* Following: a new ``/config/changes`` notification (the watch
  :class:`~.config_sync.ConfigSync` sets) makes every broker read all of ``/config/groups``
  again and hand it to its share groups
  (:meth:`~trafka.brokerlite.groups.group_configs.GroupConfigs.use_cluster`); the
  same happens when the broker joins, before it serves.
"""

from __future__ import annotations

import logging
from typing import Any

from ...security.zk_scram import (
    decode_user_config,
    desanitize,
    sanitize,
)
from ..zk_layout import ZkDataError, config_change_notification
from .metadata_sync import rewrite_entity_config

__all__ = ["CONFIG_GROUPS", "read_all_group_configs", "write_group_configs"]

log = logging.getLogger("trafka.brokerlite.cluster")

CONFIG_GROUPS = "/config/groups"


def read_all_group_configs(zk: Any) -> dict[str, dict[str, str]]:
    """Every group's config overrides in ZooKeeper (run in a thread)."""
    from kazoo.exceptions import NoNodeError

    try:
        children = zk.get_children(CONFIG_GROUPS)
    except NoNodeError:
        return {}
    out: dict[str, dict[str, str]] = {}
    for child in sorted(children):
        path = f"{CONFIG_GROUPS}/{child}"
        try:
            data, _ = zk.get(path)
            configs = decode_user_config(path, data)
        except NoNodeError:
            continue
        except ZkDataError as exc:
            log.warning("ignoring group configs: %s", exc)
            continue
        if configs:
            out[desanitize(child)] = configs
    return out


def write_group_configs(zk: Any, group: str, configs: dict[str, str]) -> None:
    """Replace a group's overrides, then notify (run in a thread)."""
    from kazoo.exceptions import NoNodeError

    path = f"{CONFIG_GROUPS}/{sanitize(group)}"
    if configs:
        rewrite_entity_config(zk, path, lambda _old: dict(configs), _notification(group))
        return
    try:
        zk.delete(path)
    except NoNodeError:
        pass
    prefix, content = _notification(group)
    zk.create(prefix, content, sequence=True, makepath=True)


def _notification(group: str) -> tuple[str, bytes]:
    return config_change_notification(f"groups/{sanitize(group)}")
