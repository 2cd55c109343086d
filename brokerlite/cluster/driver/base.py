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
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import trio

from ...config import BrokerConfig
from ...storage.node_meta import ClusterProducerIds
from ..view import ClusterView
from .acl_sync import AclSync
from .config_sync import ConfigSync
from .token_sync import TokenSync

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
    #: The metadata syncs (objects of their own, see ``metadata_sync.py``).
    _acls: AclSync
    _configs: ConfigSync
    _tokens: TokenSync

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
