"""Client quotas in ZooKeeper, laid out as Kafka 3.9's ZooKeeper mode keeps them.

In cluster mode the quotas set through AlterClientQuotas (KIP-546) live in
ZooKeeper as dynamic configs, so a quota set through one broker throttles on
every broker. This module turns entities into znode paths, znode bytes into
quotas and quota changes into znode contents; the cluster driver does the
reading and writing.

===============================================  ======================================
``/config/users/<user>``                         user (``<default>``: the default user)
``/config/users/<user>/clients/<client-id>``     user and client id (either may be
                                                 ``<default>``)
``/config/clients/<client-id>``                  client id
``/config/ips/<ip>``                             ip (``<default>``: every other ip)
``/config/changes/config_change_N``              ``{"version":2,"entity_path":"users/alice"}``
===============================================  ======================================

Each entity znode holds ``{"version":1,"config":{"producer_byte_rate":"1024"}}``:
values are strings, a whole number for the byte rates and the connection
rate (Kafka's LONG and INT quota keys) and a decimal (``"12.5"``, ``"200.0"``)
for the others, as Kafka's ``ZkAdminManager.alterClientQuotas`` writes them.

Rules:

* Stateless and I/O-free.
* Names in paths are sanitized as Kafka's ``Sanitizer`` does (URL-encoded,
  :func:`~.zk_scram.sanitize`); the default entity is the literal ``<default>``.
* A user's znode is shared with its SCRAM credentials (:mod:`.zk_scram`): a
  quota change keeps every entry that is not a quota key, and SCRAM changes
  keep the quotas. An entity left without quota keys keeps its znode (Kafka
  writes an empty config rather than deleting it).
* Decoding never trusts ZooKeeper's bytes: a quota value that is not a finite
  number raises :class:`~trafka.brokerlite.cluster.zk_layout.ZkDataError`
  naming the path; entries that are not quota keys are ignored.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from trafka.brokerlite.cluster.zk_layout import ZkDataError, config_change_notification

from ..quotas import CLIENT_ID, CLIENT_KEYS, IP, IP_KEYS, USER, Entity
from .zk_scram import desanitize, sanitize

__all__ = [
    "CONFIG_CLIENTS",
    "CONFIG_IPS",
    "DEFAULT",
    "entity_path",
    "entity_znode",
    "quota_change_notification",
    "quotas_of",
    "updated_quota_config",
]

CONFIG_CLIENTS = "/config/clients"
CONFIG_IPS = "/config/ips"
#: Kafka's name of a default entity in a znode path (``ConfigEntityName.Default``).
DEFAULT = "<default>"


def _name(name: str | None) -> str:
    return DEFAULT if name is None else sanitize(name)


def name_of(part: str) -> str | None:
    """The entity name a path part stands for (None: the default entity)."""
    return None if part == DEFAULT else desanitize(part)


def entity_path(entity: Entity) -> str:
    """The entity's path under ``/config`` (``users/alice/clients/c1``), which is
    also what its change notification names."""
    names = dict(entity)
    if IP in names:
        return f"ips/{_name(names[IP])}"
    if USER in names and CLIENT_ID in names:
        return f"users/{_name(names[USER])}/clients/{_name(names[CLIENT_ID])}"
    if USER in names:
        return f"users/{_name(names[USER])}"
    return f"clients/{_name(names[CLIENT_ID])}"


def entity_znode(entity: Entity) -> str:
    return f"/config/{entity_path(entity)}"


def quota_change_notification(entity: Entity) -> tuple[str, bytes]:
    """The sequential znode announcing a change of ``entity``'s quotas: its path
    prefix (ZooKeeper appends the sequence number) and content."""
    return config_change_notification(entity_path(entity))


def _keys(entity: Entity) -> dict[str, bool]:
    return IP_KEYS if entity[0][0] == IP else CLIENT_KEYS


def quotas_of(path: str, entity: Entity, config: Mapping[str, str]) -> dict[str, float]:
    """The quotas among an entity's config entries (other entries ignored).

    Raises:
        ZkDataError: a quota value that is not a finite number.
    """
    out: dict[str, float] = {}
    for key in _keys(entity):
        text = config.get(key)
        if text is None:
            continue
        try:
            value = float(text)
        except ValueError:
            raise ZkDataError(f"{path}: {key} is not a number: {text!r}") from None
        if not math.isfinite(value):
            raise ZkDataError(f"{path}: {key} is not a finite number: {text!r}")
        out[key] = value
    return out


def _text(whole: bool, value: float) -> str:
    return str(math.trunc(value + 1e-6)) if whole else repr(float(value))


def updated_quota_config(
    entity: Entity, config: Mapping[str, str], set_: Mapping[str, float], remove: Iterable[str]
) -> dict[str, str]:
    """An entity's config after a quota change (values already validated); the
    entries that are not quota keys are kept as they are."""
    keys = _keys(entity)
    out = dict(config)
    for key in remove:
        out.pop(key, None)
    for key, value in set_.items():
        out[key] = _text(keys[key], value)
    return out
