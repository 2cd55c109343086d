"""The cluster's SCRAM credentials through ZooKeeper: written by any broker, followed by all.

What the znodes hold is decided in :mod:`trafka.brokerlite.security.zk_scram`
(Kafka's layout); this mixin only reads and writes them.

Rules:

* Writing (an AlterUserScramCredentials task): per user, read
  ``/config/users/<user>``, change its SCRAM entries (other entries kept) and
  write it conditionally on the version read (a concurrent writer makes it
  read again), then create a ``/config/changes`` notification
  (``DriverParts._rewrite_entity_config``, shared with the quotas).
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

import trio

from trafka.codec.sasl import ScramCredential

from ...security.zk_scram import (
    CONFIG_CHANGES,
    CONFIG_USERS,
    config_change_notification,
    decode_user_config,
    desanitize,
    scram_of,
    updated_user_config,
    user_config_path,
)
from ..zk_layout import ZkDataError
from .base import DriverParts

__all__ = ["ScramSync"]

log = logging.getLogger("trafka.brokerlite.cluster")


class ScramSync(DriverParts):
    """The SCRAM duties of a cluster driver (see the module rules)."""

    #: Set when a config change notification arrived.
    _users_changed: trio.Event

    def _read_all_scram(self) -> dict[tuple[str, str], ScramCredential]:
        """Every user's SCRAM credentials in ZooKeeper (run in a thread)."""
        from kazoo.exceptions import NoNodeError

        out: dict[tuple[str, str], ScramCredential] = {}
        try:
            users = self.zk.get_children(CONFIG_USERS)
        except NoNodeError:
            return out
        for child in users:
            user = desanitize(child)
            path = user_config_path(user)
            try:
                data, _ = self.zk.get(path)
                for mechanism, credential in scram_of(path, decode_user_config(path, data)).items():
                    out[(user, mechanism)] = credential
            except NoNodeError:
                continue
            except ZkDataError as exc:
                log.warning("ignoring SCRAM credentials: %s", exc)
        return out

    def _write_scram(
        self, sets: dict[str, ScramCredential], deletes: list[tuple[str, str]]
    ) -> None:
        """Apply a change to the users' znodes, then notify (run in a thread)."""
        per_user: dict[str, dict[str, ScramCredential | None]] = {}
        for user, credential in sets.items():
            per_user.setdefault(user, {})[credential.mechanism] = credential
        for user, mechanism in deletes:
            per_user.setdefault(user, {})[mechanism] = None
        for user, changes in per_user.items():
            self._rewrite_entity_config(
                user_config_path(user),
                functools.partial(updated_user_config, changes=changes),
                config_change_notification(user),
            )

    def _watch_user_changes(self) -> None:
        """Watch the config change notifications (run in a thread, once joined)."""
        self.zk.ensure_path(CONFIG_CHANGES)
        self.zk.ChildrenWatch(CONFIG_CHANGES, self._on_user_change)

    def _on_user_change(self, *_: Any) -> None:
        self._wake_soon("_users_changed")

    async def _load_scram(self) -> None:
        """Read every user's SCRAM credentials and hand them to the SCRAM store."""
        credentials = await trio.to_thread.run_sync(self._read_all_scram)
        self.broker.scram.use_cluster(credentials)
