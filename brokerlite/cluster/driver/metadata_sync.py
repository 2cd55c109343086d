"""What the metadata syncs have in common: the cluster's metadata kept in ZooKeeper
beside the topics (ACLs, entity configs, delegation tokens), written by any
broker and followed by all.

Each sync is an object the driver owns (:class:`MetadataSync`): it is built with
the ZooKeeper session, the store(s) it writes and the driver's callbacks, and
owns its own change event. Rules common to all of them:

* Following: the sync watches its change notification paths (children
  watches, in kazoo's thread: they only set the sync's event, through the trio
  loop); its follower task then reads everything the sync keeps and hands it
  to its store, once per round however many notifications arrived. A failed
  reading (ZooKeeper unreachable) is tried again shortly.
* After each complete reading, the change notifications older than 15 minutes
  are deleted (:mod:`~trafka.brokerlite.security.zk_notifications`), as Kafka's
  brokers do after processing them; a failure is only logged.
* Entity configs (``/config/users/<user>``, ...) are changed as Kafka's
  ``AdminZkClient`` does (:func:`rewrite_entity_config`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import trio

from ...security.zk_notifications import obsolete_notifications
from ...security.zk_scram import decode_user_config, encode_user_config

__all__ = ["Kick", "MetadataSync", "RunSoon", "rewrite_entity_config"]

log = logging.getLogger("trafka.brokerlite.cluster")

#: Runs a function in the trio thread, from any thread.
RunSoon = Callable[[Callable[[], None]], None]
#: Tells the server that the core's state changed.
Kick = Callable[[], None]


class MetadataSync:
    """One kind of cluster metadata followed from ZooKeeper (see the module rules).

    Args:
        zk: the ZooKeeper session (a ``kazoo.client.KazooClient``).
        run_soon: runs a function in the trio thread, from any thread.
        kick: tells the server that the core's state changed.
        clock: the time notifications' ages are judged against (ms).

    A subclass names its change paths (:attr:`changes`) and says how it reads
    and applies everything it keeps (:meth:`_apply`).
    """

    #: The change notification paths it watches and purges.
    changes: tuple[str, ...] = ()
    #: What it follows, for the log.
    what = "metadata"

    def __init__(
        self,
        zk: Any,
        run_soon: RunSoon,
        kick: Kick,
        clock: Callable[[], int],
    ) -> None:
        self.zk = zk
        self._run_soon = run_soon
        self._kick = kick
        self._clock = clock
        self._changed = trio.Event()

    async def _apply(self) -> None:
        """Read everything this sync keeps and hand it to the store(s)."""
        raise NotImplementedError

    def watch(self) -> None:
        """Watch the change paths (run in a thread, once joined)."""
        for path in self.changes:
            self.zk.ensure_path(path)
            self.zk.ChildrenWatch(path, self._on_change)

    def _on_change(self, *_: Any) -> None:
        # kazoo's thread: the event is replaced each round, so look it up in trio's.
        self._run_soon(lambda: self._changed.set())

    async def load(self) -> None:
        """Read and apply everything, then purge the old notifications."""
        await self._apply()
        await self._purge(self.changes)
        self._kick()

    async def follow(self) -> None:
        """Load again each time a notification arrives, for as long as the driver runs."""
        while True:
            await self._changed.wait()
            self._changed = trio.Event()
            try:
                if not self.zk.connected:
                    raise ConnectionError("ZooKeeper is not connected")
                await self.load()
            except Exception as exc:
                log.warning("reading the %s from ZooKeeper failed: %s", self.what, exc)
                await trio.sleep(0.5)
                self._changed.set()

    async def _purge(self, paths: tuple[str, ...]) -> None:
        now = self._clock()
        try:
            await trio.to_thread.run_sync(self._purge_in_thread, paths, now)
        except Exception as exc:
            log.warning("purging old change notifications failed: %s", exc)

    def _purge_in_thread(self, paths: tuple[str, ...], now: int) -> None:
        from kazoo.exceptions import NoNodeError

        for path in paths:
            ctimes: dict[str, int] = {}
            try:
                children = self.zk.get_children(path)
            except NoNodeError:
                continue
            for child in children:
                stat = self.zk.exists(f"{path}/{child}")
                if stat is not None:
                    ctimes[child] = stat.ctime
            for child in obsolete_notifications(ctimes, now):
                try:
                    self.zk.delete(f"{path}/{child}")
                except NoNodeError:
                    pass  # another broker purged it first


def rewrite_entity_config(
    zk: Any,
    path: str,
    update: Callable[[dict[str, str]], dict[str, str]],
    notification: tuple[str, bytes],
) -> None:
    """Change an entity's config znode (``/config/users/<user>``, ...) as Kafka's
    ``AdminZkClient`` does, then notify (run in a thread): read it, apply
    ``update`` to its entries and write it conditionally on the version read
    (another broker's write meanwhile makes it read again, so entries others
    own, a user's quotas beside its SCRAM credentials, are never lost); then
    create the sequential notification (path prefix, content)."""
    from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

    while True:
        try:
            data, stat = zk.get(path)
        except NoNodeError:
            data, stat = b"", None
        config = encode_user_config(update(decode_user_config(path, data)))
        try:
            if stat is None:
                zk.create(path, config, makepath=True)
            else:
                zk.set(path, config, version=stat.version)
        except (BadVersionError, NodeExistsError, NoNodeError):
            continue  # another broker wrote it meanwhile: read it again
        break
    prefix, content = notification
    zk.create(prefix, content, sequence=True, makepath=True)
