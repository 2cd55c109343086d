"""The cluster's ACLs through ZooKeeper: written by any broker, followed by all.

What the znodes hold is decided in :mod:`trafka.brokerlite.security.zk_acls`
(Kafka's layout); :class:`AclSync` only reads and writes them, and hands them
to the broker's authorizer.

Rules:

* Writing (a CreateAcls or DeleteAcls task): per resource znode, read it,
  compute its new ACLs and write them conditionally on the version read (a
  concurrent writer makes it read again); a znode left empty is deleted. Each
  changed resource then gets a sequential change notification, which is what
  the other brokers watch.
* Following: the broker watches both change paths; any new notification makes
  it read every resource znode again and hand the whole set to its authorizer
  (:meth:`~trafka.brokerlite.security.authorizer.Authorizer.replace`). The same
  full reading happens when the broker joins, before it serves, so a broker
  with an empty data directory enforces the cluster's ACLs from its first
  request. After each reading, notifications older than 15 minutes are
  deleted (:mod:`~trafka.brokerlite.security.zk_notifications`).
* A resource znode Kafka's layout does not allow is logged and skipped; it
  does not stop the others from applying.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import trio

from ...security.authorizer import AclBinding, Authorizer
from ...security.zk_acls import (
    EXTENDED_ACL_CHANGES,
    LITERAL_ACL_CHANGES,
    acl_roots,
    change_notification,
    decode_acls,
    encode_acls,
    group_by_resource,
    resource_path,
    resource_type_from_dir,
    updated_acls,
)
from ..zk_layout import ZkDataError
from .metadata_sync import Kick, MetadataSync, RunSoon

__all__ = ["AclSync"]

log = logging.getLogger("trafka.brokerlite.cluster")


class AclSync(MetadataSync):
    """The cluster's ACLs, followed into ``authorizer`` (see the module rules; the
    other arguments are :class:`MetadataSync`'s)."""

    changes = (LITERAL_ACL_CHANGES, EXTENDED_ACL_CHANGES)
    what = "ACLs"

    def __init__(
        self,
        zk: Any,
        run_soon: RunSoon,
        kick: Kick,
        clock: Callable[[], int],
        *,
        authorizer: Authorizer | None,
    ) -> None:
        super().__init__(zk, run_soon, kick, clock)
        self._authorizer = authorizer

    def _read_all_acls(self) -> list[AclBinding]:
        """Every ACL in ZooKeeper (kazoo's calls; run in a thread)."""
        from kazoo.exceptions import NoNodeError

        out: list[AclBinding] = []
        for root, pattern_type in acl_roots():
            try:
                type_dirs = self.zk.get_children(root)
            except NoNodeError:
                continue
            for type_dir in type_dirs:
                try:
                    rtype = resource_type_from_dir(root, type_dir)
                    names = self.zk.get_children(f"{root}/{type_dir}")
                except ZkDataError as exc:
                    log.warning("ignoring ACLs: %s", exc)
                    continue
                except NoNodeError:
                    continue
                for name in names:
                    path = f"{root}/{type_dir}/{name}"
                    try:
                        data, _ = self.zk.get(path)
                        out.extend(decode_acls((rtype, pattern_type, name), path, data))
                    except NoNodeError:
                        continue
                    except ZkDataError as exc:
                        log.warning("ignoring ACLs: %s", exc)
        return out

    def _write_acls(self, add: list[AclBinding], remove: list[AclBinding]) -> None:
        """Apply a change to the resource znodes, then notify (run in a thread)."""
        from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

        for resource, (adding, removing) in group_by_resource(add, remove).items():
            path = resource_path(*resource)
            while True:
                try:
                    data, stat = self.zk.get(path)
                except NoNodeError:
                    data, stat = b"", None
                current = decode_acls(resource, path, data)
                wanted = updated_acls(current, adding, removing)
                if set(wanted) == set(current):
                    break
                try:
                    if stat is None:
                        self.zk.create(path, encode_acls(wanted), makepath=True)
                    elif wanted:
                        self.zk.set(path, encode_acls(wanted), version=stat.version)
                    else:
                        self.zk.delete(path, version=stat.version)
                except (BadVersionError, NodeExistsError, NoNodeError):
                    continue  # another broker wrote it meanwhile: read it again
                prefix, content = change_notification(resource)
                self.zk.create(prefix, content, sequence=True, makepath=True)
                break

    async def change(self, add: list[AclBinding], remove: list[AclBinding]) -> None:
        """Write a CreateAcls or DeleteAcls task's change, then read every ACL again."""
        await trio.to_thread.run_sync(self._write_acls, add, remove)
        await self.load()

    async def load(self) -> None:
        """Read every ACL and hand them to the authorizer (no authorizer: nothing)."""
        if self._authorizer is not None:
            await super().load()

    async def _apply(self) -> None:
        assert self._authorizer is not None
        self._authorizer.replace(await trio.to_thread.run_sync(self._read_all_acls))
