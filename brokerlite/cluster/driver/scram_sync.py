"""The cluster's SCRAM credentials through ZooKeeper: written by any broker, followed by all.

What the znodes hold is decided in :mod:`trafka.brokerlite.security.zk_scram`
(Kafka's layout); these functions only read and write them (run in a thread),
for :class:`~.config_sync.ConfigSync`.

Rules:

* Writing (an AlterUserScramCredentials task): per user, read
  ``/config/users/<user>``, change its SCRAM entries (other entries kept) and
  write it conditionally on the version read (a concurrent writer makes it
  read again), then create a ``/config/changes`` notification
  (:func:`~.metadata_sync.rewrite_entity_config`, shared with the quotas).
* Following: the broker watches ``/config/changes``; a new notification makes
  it read every user's znode again and hand the credentials to its SCRAM store
  (:meth:`~trafka.brokerlite.security.scram.ScramCredentials.use_cluster`). The
  same reading happens when the broker joins, before it serves.
* A user znode Kafka's layout does not allow is logged and skipped.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from trafka.codec.sasl import ScramCredential

from ...security.zk_scram import (
    CONFIG_USERS,
    config_change_notification,
    decode_user_config,
    desanitize,
    scram_of,
    updated_user_config,
    user_config_path,
)
from ..zk_layout import ZkDataError
from .metadata_sync import rewrite_entity_config

__all__ = ["read_all_scram", "write_scram"]

log = logging.getLogger("trafka.brokerlite.cluster")


def read_all_scram(zk: Any) -> dict[tuple[str, str], ScramCredential]:
    """Every user's SCRAM credentials in ZooKeeper (run in a thread)."""
    from kazoo.exceptions import NoNodeError

    out: dict[tuple[str, str], ScramCredential] = {}
    try:
        users = zk.get_children(CONFIG_USERS)
    except NoNodeError:
        return out
    for child in users:
        user = desanitize(child)
        path = user_config_path(user)
        try:
            data, _ = zk.get(path)
            for mechanism, credential in scram_of(path, decode_user_config(path, data)).items():
                out[(user, mechanism)] = credential
        except NoNodeError:
            continue
        except ZkDataError as exc:
            log.warning("ignoring SCRAM credentials: %s", exc)
    return out


def write_scram(zk: Any, sets: dict[str, ScramCredential], deletes: list[tuple[str, str]]) -> None:
    """Apply a change to the users' znodes, then notify (run in a thread)."""
    per_user: dict[str, dict[str, ScramCredential | None]] = {}
    for user, credential in sets.items():
        per_user.setdefault(user, {})[credential.mechanism] = credential
    for user, mechanism in deletes:
        per_user.setdefault(user, {})[mechanism] = None
    for user, changes in per_user.items():
        rewrite_entity_config(
            zk,
            user_config_path(user),
            functools.partial(updated_user_config, changes=changes),
            config_change_notification(user),
        )
