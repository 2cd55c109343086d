"""The share consumer's group task: I/O around the I/O-free
:class:`~trafka.sdk.share_membership.ShareMembership` (KIP-932).

Rules:

* Every protocol decision (when to find the coordinator, join, heartbeat,
  leave, and what each error means) is the state machine's.
  :class:`ShareGroupDriver` only carries out its outputs: each request in a
  task of its own over the coordinator's dedicated connection (so a long
  ShareFetch never delays a heartbeat), each answer fed back with the clock,
  and a sleep until the machine's next deadline or an input.
* Before each look at the machine, the topic names it knows are the client
  metadata's (an assignment names topic ids).
* A request that failed asks for fresh metadata when it was meant for a
  coordinator (it may have moved).
* Every answer or failure wakes whoever waits for the heartbeat in flight
  (:meth:`ShareGroupDriver.heartbeat_answered`): a leave waits for it, so that
  it cannot reach the coordinator after the leave.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import anyio
import anyio.abc

from trafka.codec import ApiKey, TrafkaError

from ._util import sleep_until
from .config import ShareConsumerConfig
from .consumer_types import TopicPartition
from .share_membership import (
    AssignmentChanged,
    Fatal,
    NeedMetadata,
    ShareGroupRequest,
    ShareMembership,
    ShareMembershipConfig,
)
from .transport import Cluster

__all__ = ["ShareGroupDriver"]

log = logging.getLogger("trafka.sdk.share_consumer")


class ShareGroupDriver:
    """Runs a share consumer's group membership (see the module doc).

    Args:
        config: the share consumer's settings (``group.id`` set).
        cluster: the connections and the metadata.
        task_group: where the requests run.
        assignment_changed: the member's partitions are these now.
        set_fatal: the member cannot go on.

    Attributes:
        membership: the state machine.
        last_heartbeat: when the last ShareGroupHeartbeat left (None before the
            first), for the client metrics (KIP-714).
    """

    def __init__(
        self,
        config: ShareConsumerConfig,
        cluster: Cluster,
        task_group: anyio.abc.TaskGroup,
        *,
        assignment_changed: Callable[[frozenset[TopicPartition]], None],
        set_fatal: Callable[[BaseException], None],
    ) -> None:
        assert config.group_id is not None
        self.config = config
        self.membership = ShareMembership(
            ShareMembershipConfig(
                group_id=config.group_id,
                rack=config.client_rack or None,
                request_timeout=config.request_timeout_ms / 1000,
                retry_backoff=config.retry_backoff_ms / 1000,
                retry_backoff_max=config.retry_backoff_max_ms / 1000,
                max_poll_interval=config.max_poll_interval_ms / 1000,
            ),
            anyio.current_time(),
        )
        self.last_heartbeat: float | None = None
        self._cluster = cluster
        self._tg = task_group
        self._assignment_changed = assignment_changed
        self._set_fatal = set_fatal
        self._wake = anyio.Event()
        self._answered = anyio.Event()

    def wake(self) -> None:
        """Have the task look at the state machine again."""
        self._wake.set()

    async def heartbeat_answered(self) -> None:
        """Wait until no heartbeat is in flight."""
        while self.membership.heartbeat_in_flight:
            await self._answered.wait()

    async def run(self) -> None:
        membership = self.membership
        md = self._cluster.metadata
        while True:
            self._wake = anyio.Event()
            names = {info.topic_id: name for name, info in md.topics.items() if info.topic_id.int}
            membership.set_topic_names(names)
            for output in membership.outputs(anyio.current_time()):
                if isinstance(output, ShareGroupRequest):
                    self._tg.start_soon(self.send, output)
                elif isinstance(output, AssignmentChanged):
                    self._assignment_changed(output.partitions)
                elif isinstance(output, NeedMetadata):
                    md.request_update()
                    self._cluster.nudge()
                elif isinstance(output, Fatal):
                    self._set_fatal(output.error)
            await sleep_until(membership.next_deadline(), self._wake)

    async def send(self, request: ShareGroupRequest) -> None:
        """Send ``request`` and feed its answer or failure to the state machine."""
        membership = self.membership
        if request.api_key == ApiKey.SHARE_GROUP_HEARTBEAT:
            self.last_heartbeat = anyio.current_time()
        try:
            conn = await self._cluster.coordinator_connection(request.coordinator)
            version = conn.version_for(request.api_key)
            body = await conn.request(
                request.api_key, request.build(version), timeout=request.timeout
            )
        except TrafkaError as exc:
            log.debug("share group %s: request %s failed: %s", self.config.group_id, request, exc)
            if request.coordinator is not None:
                self._cluster.metadata.request_update()
            membership.on_failure(request, exc, anyio.current_time())
        else:
            membership.on_response(request, version, body, anyio.current_time())
        self.wake()
        answered, self._answered = self._answered, anyio.Event()
        answered.set()
