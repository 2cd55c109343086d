"""The share consumer's network side: ShareFetch and ShareAcknowledge on the
connections, around the I/O-free :class:`~trafka.sdk.share_fetcher.ShareFetcher`.

Rules:

* Every protocol decision (what to fetch or acknowledge, where, when, what an
  answer means) is the share fetcher's. :class:`ShareFetchDriver` only sends
  what it asks for and feeds the answers back with the clock.
* At most one request per broker (the fetcher's rule). A request to a ready
  connection is written synchronously and answered by a completion in the
  connection's reader, which at once sends what the fetcher asks for next (as
  the consumer's fetches); a request to a broker not yet connected goes from a
  task of its own that connects first.
* The task (:meth:`ShareFetchDriver.run`) handles what needs waiting: the
  fetcher's timers (backoffs, acknowledgement deadlines, the close of the
  sessions), its wish for metadata, and the commits it finished. An answer
  that asked for fresh metadata (a partition's NOT_LEADER_OR_FOLLOWER...)
  wakes the metadata refresher at once.
* A broker that does not serve share groups (no ShareFetch v1) is fatal to
  the consumer; any other failure is the fetcher's to retry. An exception of
  ours in a connection's reader is handed to the consumer as fatal, so that
  its next poll raises it instead of the reader dying.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from typing import Any

import anyio
import anyio.abc

from trafka.codec import ErrorCode, KafkaError, TrafkaError, UnsupportedVersionError

from ._util import sleep_until
from .config import ShareConsumerConfig
from .share_fetcher import ShareFetcher, ShareRequest
from .transport import BrokerConnection, CallbackCompletion, Cluster

__all__ = ["ShareFetchDriver"]

log = logging.getLogger("trafka.sdk.share_consumer")

#: The first ShareAcknowledge version that renews acquisition locks (KIP-1222).
RENEW_VERSION = 2


class ShareFetchDriver:
    """Sends a :class:`~trafka.sdk.share_fetcher.ShareFetcher`'s requests (see the
    module doc); the share consumer's, on its loop.

    Args:
        config: the share consumer's settings (timeouts).
        fetcher: the share fetcher it drives.
        cluster: the connections.
        task_group: where connecting requests run.
        data_arrived: wake the polls and closes waiting for the fetcher.
        set_fatal: the consumer cannot go on (raised by its next call).
        closed: whether the consumer is closed (no request follows an answer then).
    """

    def __init__(
        self,
        config: ShareConsumerConfig,
        fetcher: ShareFetcher,
        cluster: Cluster,
        task_group: anyio.abc.TaskGroup,
        *,
        data_arrived: Callable[[], None],
        set_fatal: Callable[[BaseException], None],
        closed: Callable[[], bool],
    ) -> None:
        self.config = config
        self.fetcher = fetcher
        self._cluster = cluster
        self._tg = task_group
        self._data_arrived = data_arrived
        self._set_fatal = set_fatal
        self._closed = closed
        self._wake = anyio.Event()

    def wake(self) -> None:
        """Have the task look at the fetcher again."""
        self._wake.set()

    async def run(self) -> None:
        fetcher = self.fetcher
        while True:
            self._wake = anyio.Event()
            self.send_requests()
            if fetcher.closing:
                self._data_arrived()  # sessions may have closed without a request
            if fetcher.metadata_wanted:
                fetcher.metadata_wanted = False
                self._cluster.metadata.request_update()
                self._cluster.nudge()
            self._settle_commits()
            await sleep_until(fetcher.next_deadline(), self._wake)

    def send_requests(self) -> None:
        """Send what the fetcher asks for now (see the rules)."""
        for request in self.fetcher.requests(anyio.current_time()):
            conn = self._cluster.ready_connection(request.node)
            if conn is None:
                self._tg.start_soon(self._exchange, request)
            else:
                self._write(conn, request)

    async def _exchange(self, request: ShareRequest) -> None:
        try:
            conn = await self._cluster.connection(request.node)
        except TrafkaError as exc:
            self._answered(request, None, exc)
        else:
            self._write(conn, request)

    def _write(self, conn: BrokerConnection, request: ShareRequest) -> None:
        cfg = self.config
        timeout = cfg.request_timeout_ms / 1000
        if request.is_fetch:
            timeout += cfg.fetch_max_wait_ms / 1000
        try:
            version = conn.version_for(request.api_key)
            if version < RENEW_VERSION and getattr(request.body, "is_renew_ack", False):
                raise KafkaError(
                    ErrorCode.UNSUPPORTED_VERSION,
                    f"node {request.node} serves ShareAcknowledge v{version}: renewing an "
                    "acquisition lock (AcknowledgeType.RENEW, KIP-1222) needs v2, Kafka 4.2+",
                )
            answer = CallbackCompletion(
                partial(self._answered, request, error=None),
                partial(self._answered, request, None),
            )
            conn.send(request.api_key, request.body, answer, timeout=timeout)
        except TrafkaError as exc:
            # Not sent, and the completion not registered: nothing else reports it.
            self._answered(request, None, exc)

    def _answered(self, request: ShareRequest, body: Any, error: BaseException | None) -> None:
        """A request's answer (``body``) or failure (``error``): in the connection's
        reader, or wherever the request failed."""
        fetcher = self.fetcher
        now = anyio.current_time()
        try:
            if error is None:
                fetcher.on_response(request, body, now)
                if fetcher.metadata.update_requested:
                    # A partition's error (NOT_LEADER_OR_FOLLOWER...) asked for fresh
                    # metadata: the refresher wakes now, not at metadata.max.age.ms
                    # (as the consumer's fetches): a leader hint naming a broker
                    # the metadata does not list cannot be followed without it.
                    self._cluster.nudge()
            elif isinstance(error, UnsupportedVersionError):
                fetcher.on_failure(request, error, now)
                self._set_fatal(
                    KafkaError(
                        ErrorCode.UNSUPPORTED_VERSION,
                        f"node {request.node} does not serve share groups (ShareFetch and "
                        f"ShareAcknowledge v1, Kafka 4.1 or later): {error}",
                    )
                )
            else:
                log.debug("share request to node %s failed: %s", request.node, error)
                fetcher.on_failure(request, error, now)
                self._cluster.nudge()
        except Exception as exc:  # a bug of ours, in a connection's reader: the poll raises it
            self._set_fatal(exc)
        self._settle_commits()
        self._data_arrived()
        if error is None and not self._closed():
            # What waited behind this request goes at once (after a failure the
            # task sees to it: a failure may come from within a send).
            try:
                self.send_requests()
            except Exception as exc:  # as above
                self._set_fatal(exc)
        self.wake()

    def _settle_commits(self) -> None:
        commits = self.fetcher.commits_done
        while commits:
            commits.popleft().cookie.set()
