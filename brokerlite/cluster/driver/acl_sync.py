"""The cluster's ACLs through ZooKeeper: written by any broker, followed by all.

What the znodes hold is decided in :mod:`trafka.brokerlite.security.zk_acls`
(Kafka's layout); this mixin only reads and writes them.

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
from typing import Any

import trio

from ...security.authorizer import AclBinding
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
from .base import DriverParts

__all__ = ["AclSync"]

log = logging.getLogger("trafka.brokerlite.cluster")


class AclSync(DriverParts):
    """The ACL duties of a cluster driver (see the module rules)."""

    #: Set when a change notification arrived (kazoo's thread sets it through the token).
    _acls_changed: trio.Event

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

    def _watch_acl_changes(self) -> None:
        """Watch both change paths (run in a thread, once joined)."""
        for path in (LITERAL_ACL_CHANGES, EXTENDED_ACL_CHANGES):
            self.zk.ensure_path(path)
            self.zk.ChildrenWatch(path, self._on_acl_change)

    def _on_acl_change(self, *_: Any) -> None:
        self._wake_soon("_acls_changed")

    async def _load_acls(self) -> None:
        """Read every ACL and hand them to the authorizer (no authorizer: nothing)."""
        authorizer = self.broker.authorizer
        if authorizer is None:
            return
        acls = await trio.to_thread.run_sync(self._read_all_acls)
        authorizer.replace(acls)
        await self._purge_notifications(LITERAL_ACL_CHANGES, EXTENDED_ACL_CHANGES)
        self._kick()

    async def _acl_follower(self) -> None:
        """Apply the ACL changes other brokers notify, for as long as the driver runs."""
        await self._follow("_acls_changed", self._load_acls, "ACLs")
