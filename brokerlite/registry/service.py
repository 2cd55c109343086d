"""Serving the registry beside a broker: its HTTP listener and its ``_schemas`` log.

The registry is a client of its own broker's cluster (the SDK's admin,
producer and consumer, as the console is), so in a cluster it writes to the
``_schemas`` partition's leader wherever that is and reads what every node
wrote: the topic is the only shared state. The topic is created by the first
write (by then a cluster has formed), compacted, with one partition and a
replication factor of the cluster's live brokers up to 3; records are written
with ``acks=all``. Until it exists the registry is empty.

HTTP is :func:`trafka.common.metrics_http.serve_http` (one request per
connection, bodies capped at :data:`MAX_BODY`). A request that comes before the
log has been read to its end waits for it; one that cannot reach the topic
within :data:`STORE_TIMEOUT_S` is a 500 with error code 50002.
"""

from __future__ import annotations

import json
import logging
import urllib.parse
from contextlib import AsyncExitStack
from typing import Any

import trio

from trafka.codec import ErrorCode
from trafka.common.metrics_http import Request, http_response, serve_http
from trafka.sdk import KafkaError, TopicPartition, TrafkaError
from trafka.sdk.admin import NewTopic, open_admin
from trafka.sdk.consumer import open_consumer
from trafka.sdk.producer import open_producer

from .api import Registry
from .reads import RawBody
from .store import RegistryState

__all__ = ["MAX_BODY", "STORE_TIMEOUT_S", "TOPIC", "serve_registry"]

log = logging.getLogger("trafka.brokerlite.registry")

TOPIC = "_schemas"
MAX_BODY = 16 * 1024 * 1024
STORE_TIMEOUT_S = 30.0
CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


class TopicLog:
    """The ``_schemas`` topic read into a :class:`RegistryState`, and written."""

    def __init__(self, state: RegistryState, bootstrap_servers: str) -> None:
        self.state = state
        self.bootstrap_servers = bootstrap_servers
        self.partition = TopicPartition(TOPIC, 0)
        self.ready = trio.Event()
        self._reading = trio.Lock()
        self._admin: Any = None
        self._producer: Any = None
        self._consumer: Any = None
        self._assigned = False
        self._asked = 0  # catch_up calls made
        self._covered = 0  # calls made before the last finished read began

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Open the clients, read the topic (if there is one yet) to its end; then
        keep the clients open until cancelled."""
        common = {"bootstrap.servers": self.bootstrap_servers, "client.id": "trafka-registry"}
        reader = {
            **common,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "allow.auto.create.topics": False,
            "fetch.max.wait.ms": 50,
        }
        async with AsyncExitStack() as stack:
            self._admin = await stack.enter_async_context(open_admin(config=common))
            self._producer = await stack.enter_async_context(
                open_producer(config={**common, "acks": "all", "linger.ms": 0})
            )
            self._consumer = await stack.enter_async_context(open_consumer(config=reader))
            self._assigned = False
            await self.catch_up()
            self.ready.set()
            task_status.started()
            await trio.sleep_forever()

    async def _exists(self) -> bool:
        """Whether the topic exists (then the consumer reads it)."""
        if not self._assigned:
            if TOPIC not in await self._admin.list_topics(include_internal=True):
                return False
            self._consumer.assign([self.partition])
            self._assigned = True
        return True

    async def _create_topic(self) -> None:
        """Created at the first write, when the cluster has formed: one partition,
        compacted, replicated on the live brokers up to 3."""
        brokers = len((await self._admin.describe_cluster()).brokers)
        topic = NewTopic(TOPIC, 1, min(3, max(1, brokers)), {"cleanup.policy": "compact"})
        try:
            await self._admin.create_topics([topic])
        except KafkaError as exc:
            # REQUEST_TIMED_OUT: not seen created in time, the creation goes on
            # (the producer's send waits for the topic's metadata).
            if exc.code not in (ErrorCode.TOPIC_ALREADY_EXISTS, ErrorCode.REQUEST_TIMED_OUT):
                raise
        log.info("created the schema registry's topic %s", TOPIC)

    async def catch_up(self) -> None:
        """Read to the end the topic had when this call was made. Calls waiting
        while another reads are served by the next read together: one that
        began after they were made covers them all."""
        self._asked += 1
        ticket = self._asked
        async with self._reading:
            if self._covered >= ticket:
                return
            covering = self._asked
            if await self._exists():
                found = await self._admin.list_offsets({self.partition: "latest"})
                end = found[self.partition][0] if found.get(self.partition) else 0
                while await self._consumer.position(self.partition) < end:
                    batches = await self._consumer.getmany(self.partition, timeout_ms=500)
                    for record in batches.get(self.partition, ()):
                        self.state.apply(record.offset, record.key, record.value)
            self._covered = covering

    async def append(self, records: list[tuple[bytes, bytes | None]]) -> list[int]:
        async with self._reading:
            if not await self._exists():
                await self._create_topic()
        futures = [
            await self._producer.send(TOPIC, value, key, partition=0) for key, value in records
        ]
        return [(await future).offset for future in futures]


async def _keep_reading(topic_log: TopicLog) -> None:
    """Run the log's clients; when they fail (the cluster unreachable), log it
    and start again: requests meanwhile wait, then time out."""
    while True:
        try:
            await topic_log.run()
        except (TrafkaError, OSError) as exc:
            log.warning("the schema registry's topic is unreachable, retrying: %s", exc)
        await trio.sleep(1.0)


async def _answer(registry: Registry, log_: TopicLog, request: Request) -> bytes:
    path, _, query_text = request.target.partition("?")
    segments = [urllib.parse.unquote(s) for s in path.split("/") if s]
    query = dict(urllib.parse.parse_qsl(query_text))
    try:
        with trio.fail_after(STORE_TIMEOUT_S):
            await log_.ready.wait()
            status, value = await registry.handle(request.method, segments, query, request.body)
    except trio.TooSlowError:
        status, value = 500, {"error_code": 50002, "message": "Operation timed out"}
    except TrafkaError as exc:
        log.warning("the registry could not reach its topic: %s", exc)
        status, value = (
            500,
            {"error_code": 50001, "message": f"Error in the backend data store: {exc}"},
        )
    if isinstance(value, RawBody):
        return http_response(status, str(value).encode(), "text/plain; charset=utf-8")
    body = json.dumps(value).encode()
    return http_response(status, b"" if request.method == "HEAD" else body, CONTENT_TYPE, len(body))


async def serve_registry(
    bootstrap_servers: str,
    listen: str,
    writer: int,
    *,
    task_status: trio.TaskStatus[tuple[str, int]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the registry on ``listen`` (``host:port``) for the cluster at
    ``bootstrap_servers`` until cancelled; ``task_status`` gets the bound address.
    ``writer``: this node's id, in the keys it writes."""
    host, _, port = listen.rpartition(":")
    listeners = await trio.open_tcp_listeners(int(port), host=host.strip("[]") or None)
    state = RegistryState()
    topic_log = TopicLog(state, bootstrap_servers)
    registry = Registry(state, topic_log, writer)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_keep_reading, topic_log)
        await nursery.start(
            serve_http, lambda r: _answer(registry, topic_log, r), listeners, MAX_BODY
        )
        bound = tuple(listeners[0].socket.getsockname()[:2])
        shown = f"[{bound[0]}]" if ":" in bound[0] else bound[0]
        log.info("schema registry on http://%s:%d/ (schemas kept in %s)", shown, bound[1], TOPIC)
        task_status.started(bound)
