"""What the cluster driver's parts share, declared once for its mixins.

:class:`~trafka.brokerlite.cluster.driver.ClusterDriver` is built in
``driver/__init__.py``; its duties are mixins over these parts, each in its own
module: reading the cluster (``reading.py``), the controller's writes
(``controller_duties.py``) and the topic changes requests ask for
(``topic_tasks.py``). They share one ZooKeeper session and one view of the
cluster, so the parts are declared here, with their types, and assigned by
``ClusterDriver.__init__``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import trio

from ...clock import now_ms
from ...config import BrokerConfig
from ...security.zk_notifications import obsolete_notifications
from ...security.zk_scram import decode_user_config, encode_user_config
from ...storage.node_meta import ClusterProducerIds
from ..view import ClusterView

if TYPE_CHECKING:
    from ...broker import Broker

__all__ = ["DriverParts"]

log = logging.getLogger("trafka.brokerlite.cluster")


class DriverParts:
    """The parts of a cluster driver (see :class:`ClusterDriver`)."""

    broker: Broker
    config: BrokerConfig
    node_id: int
    view: ClusterView
    #: The ZooKeeper session (a ``kazoo.client.KazooClient``).
    zk: Any
    #: Ours while we are the controller, else -1; and its znode's version.
    _controller_epoch: int
    _controller_epoch_version: int
    _moves_started: set[tuple[str, int, tuple[int, ...]]]
    #: Set when a reading is due (a watch fired, a task arrived).
    _changed: trio.Event
    #: Whether the reading due must be complete (see ``reading.py``): False when
    #: only partition state znodes changed since the last one.
    _full_due: bool
    #: The partition state znodes that changed since the last reading.
    _dirty_states: set[str]
    #: Set after every reading handed to the core.
    _image_event: trio.Event
    _tasks_event: trio.Event
    _nursery: trio.Nursery | None
    #: The trio loop's token (kazoo's watches fire in its own thread); None until started.
    _token: trio.lowlevel.TrioToken | None
    _closed: bool
    #: The producer id blocks this broker hands out (filled by a task).
    _producer_ids: ClusterProducerIds
    #: Tells the server that the core's state changed.
    _kick: Callable[[], None]

    def _wake_soon(self, event: str) -> None:
        """Set the trio event named ``event`` from any thread (kazoo's watches fire
        in kazoo's thread, which must not touch trio's state)."""
        self._run_soon(lambda: getattr(self, event).set())

    def _run_soon(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` in the trio thread, from any thread."""
        token = self._token
        if token is None or self._closed:
            return
        try:
            token.run_sync_soon(fn)
        except trio.RunFinishedError:
            pass

    def _want_reading(self) -> None:
        """A complete reading is due (trio thread)."""
        self._full_due = True
        self._changed.set()

    def _rewrite_entity_config(
        self,
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
                data, stat = self.zk.get(path)
            except NoNodeError:
                data, stat = b"", None
            config = encode_user_config(update(decode_user_config(path, data)))
            try:
                if stat is None:
                    self.zk.create(path, config, makepath=True)
                else:
                    self.zk.set(path, config, version=stat.version)
            except (BadVersionError, NodeExistsError, NoNodeError):
                continue  # another broker wrote it meanwhile: read it again
            break
        prefix, content = notification
        self.zk.create(prefix, content, sequence=True, makepath=True)

    def _notification_clock(self) -> int:
        """The time notifications' ages are judged against (tests replace it)."""
        return now_ms()

    async def _purge_notifications(self, *paths: str) -> None:
        """Delete the change notifications under ``paths`` that are old enough
        (:mod:`~trafka.brokerlite.security.zk_notifications`), as Kafka's brokers do
        after processing them; a failure is only logged (the next round retries)."""
        now = self._notification_clock()
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

    async def _follow(self, event: str, load: Callable[[], Awaitable[None]], what: str) -> None:
        """Run ``load`` each time the trio event named ``event`` is set (a fresh event
        each round); a failed load is tried again shortly."""
        while True:
            await getattr(self, event).wait()
            setattr(self, event, trio.Event())
            try:
                if not self.zk.connected:
                    raise ConnectionError("ZooKeeper is not connected")
                await load()
            except Exception as exc:
                log.warning("reading the %s from ZooKeeper failed: %s", what, exc)
                await trio.sleep(0.5)
                getattr(self, event).set()
