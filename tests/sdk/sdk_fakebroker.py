"""A scripted fake broker for the SDK tests (a test double, not brokerlite).

It serves just enough of ApiVersions, Metadata, InitProducerId, Produce,
ListOffsets and Fetch to drive the client, and lets a test replace or wrap any
handler (to inject errors, delays or garbage).
"""

from __future__ import annotations

import contextvars
import dataclasses
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import anyio
import anyio.abc

from trafka.codec import ErrorCode, FrameReader, api, decode_request, encode_response
from trafka.codec.messages import k00_produce as produce
from trafka.codec.messages import k01_fetch as fetch
from trafka.codec.messages import k02_list_offsets as list_offsets
from trafka.codec.messages import k03_metadata as md
from trafka.codec.messages import k18_api_versions as av
from trafka.codec.messages import k22_init_producer_id as ipid
from trafka.codec.records import iter_batches, read_batch_header, set_base_offset
from trafka.sdk.connection_state import CLIENT_VERSIONS

# APIs the fake advertises only when a test gives it a handler for them: the
# client metrics push (KIP-714), which clients use whenever it is advertised.
_OPTIONAL_APIS = frozenset({71, 72})

Handler = Callable[[Any, Any], Any]

#: The number of the connection a handler is serving (1 for the first accepted).
current_connection: contextvars.ContextVar[int] = contextvars.ContextVar("current_connection")


@dataclasses.dataclass
class FakeBroker:
    """A one-node cluster on 127.0.0.1 with in-memory partition logs."""

    topics: dict[str, int]
    host: str = "127.0.0.1"
    port: int = 0
    node_id: int = 0
    logs: dict[tuple[str, int], list[bytes]] = dataclasses.field(default_factory=dict)
    next_offset: dict[tuple[str, int], int] = dataclasses.field(default_factory=dict)
    handlers: dict[int, Handler] = dataclasses.field(default_factory=dict)
    requests: list[tuple[int, int, Any]] = dataclasses.field(default_factory=list)
    connections: int = 0
    open_connections: int = 0
    #: Called with each request's API key before its handler (e.g. to check state).
    before: Callable[[int], None] | None = None
    #: What handlers raised: the connection was closed, and :func:`serving` fails
    #: the test with the first of them when its block ends.
    handler_errors: list[BaseException] = dataclasses.field(default_factory=list)
    #: Serve incremental fetch sessions (KIP-227); off: every answer carries
    #: session id 0, the broker makes none.
    fetch_sessions: bool = False
    #: Open sessions: id -> {(topic, partition): [fetch offset, high watermark last answered]}.
    sessions: dict[int, dict[tuple[str, int], list[int]]] = dataclasses.field(default_factory=dict)
    #: Open sessions: id -> the epoch the next request must carry.
    session_epochs: dict[int, int] = dataclasses.field(default_factory=dict)
    next_session_id: int = 1

    def topic_id(self, name: str) -> uuid.UUID:
        return uuid.uuid5(uuid.NAMESPACE_URL, f"fake-broker/{name}")

    def topic_name(self, t: Any) -> str:
        """The topic a Fetch topic entry names (by name, or by id from v13)."""
        if t.topic:
            return str(t.topic)
        return next((n for n in self.topics if self.topic_id(n) == t.topic_id), "")

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def records(self, topic: str, partition: int) -> list[Any]:
        from trafka.codec.records import decode_records

        return list(decode_records(b"".join(self.logs.get((topic, partition), []))))

    # -- default handlers ---------------------------------------------------------

    def api_versions(self, header: Any, body: Any) -> Any:
        keys = []
        for key, (lo, hi) in CLIENT_VERSIONS.items():
            if key in _OPTIONAL_APIS and key not in self.handlers:
                continue  # as a Kafka broker without a telemetry receiver plugin
            info = api(key)
            keys.append(
                av.ApiVersionsResponse.ApiVersion(
                    api_key=key,
                    min_version=max(lo, info.min_version),
                    max_version=min(hi, info.max_version),
                )
            )
        return av.ApiVersionsResponse(api_keys=keys)

    def metadata(self, header: Any, body: Any) -> Any:
        R = md.MetadataResponse
        names = list(self.topics) if body.topics is None else [t.name for t in body.topics]
        out = []
        for name in names:
            n = self.topics.get(name)
            if n is None:
                out.append(R.MetadataResponseTopic(name=name, error_code=3))
                continue
            out.append(
                R.MetadataResponseTopic(
                    name=name,
                    topic_id=self.topic_id(name),
                    partitions=[
                        R.MetadataResponsePartition(
                            partition_index=i,
                            leader_id=self.node_id,
                            leader_epoch=0,
                            replica_nodes=[0],
                            isr_nodes=[0],
                        )
                        for i in range(n)
                    ],
                )
            )
        return R(
            brokers=[
                R.MetadataResponseBroker(node_id=self.node_id, host=self.host, port=self.port)
            ],
            cluster_id="fake",
            controller_id=self.node_id,
            topics=out,
        )

    def init_producer_id(self, header: Any, body: Any) -> Any:
        return ipid.InitProducerIdResponse(producer_id=1000, producer_epoch=0)

    def produce(self, header: Any, body: Any) -> Any:
        P = produce.ProduceResponse
        topics = []
        for t in body.topic_data:
            parts = []
            # By name, or by id from v13 (KIP-516).
            name = t.name or next((n for n in self.topics if self.topic_id(n) == t.topic_id), "")
            for p in t.partition_data:
                tp = (name, p.index)
                if name not in self.topics or p.index >= self.topics[name]:
                    parts.append(P.PartitionProduceResponse(index=p.index, error_code=3))
                    continue
                base = self.next_offset.get(tp, 0)
                first = base
                for hdr, view in iter_batches(p.records or b""):
                    self.logs.setdefault(tp, []).append(bytes(set_base_offset(bytes(view), base)))
                    base += hdr.last_offset_delta + 1
                self.next_offset[tp] = base
                parts.append(P.PartitionProduceResponse(index=p.index, base_offset=first))
            topics.append(
                P.TopicProduceResponse(name=t.name, topic_id=t.topic_id, partition_responses=parts)
            )
        if body.acks == 0:
            return None
        return P(responses=topics)

    def list_offsets(self, header: Any, body: Any) -> Any:
        R = list_offsets.ListOffsetsResponse
        topics = []
        for t in body.topics:
            parts = []
            for p in t.partitions:
                end = self.next_offset.get((t.name, p.partition_index), 0)
                off = 0 if p.timestamp == -2 else end
                parts.append(
                    R.ListOffsetsPartitionResponse(
                        partition_index=p.partition_index, offset=off, timestamp=-1
                    )
                )
            topics.append(R.ListOffsetsTopicResponse(name=t.name, partitions=parts))
        return R(topics=topics)

    def _partition_answer(self, tp: tuple[str, int], fetch_offset: int) -> Any:
        blobs = [
            blob
            for blob in self.logs.get(tp, [])
            if read_batch_header(blob).next_offset > fetch_offset
        ]
        hw = self.next_offset.get(tp, 0)
        return fetch.FetchResponse.PartitionData(
            partition_index=tp[1],
            high_watermark=hw,
            last_stable_offset=hw,
            records=b"".join(blobs),
        )

    def session_fetch(self, header: Any, body: Any) -> Any:
        """Fetch with sessions, as a Kafka broker's FetchManager: epoch 0 makes
        a session (closing the one named), -1 makes none (closing the one
        named), others continue one; an incremental answer holds only the
        partitions with records or a new high watermark."""
        R = fetch.FetchResponse
        version = header.request_api_version
        by_id = version >= 13
        sid, epoch = body.session_id, body.session_epoch
        named = [(self.topic_name(t), t) for t in body.topics]
        if epoch in (0, -1):
            if sid:
                self.sessions.pop(sid, None)
                self.session_epochs.pop(sid, None)
            parts: dict[tuple[str, int], list[int]] = {}
            for name, t in named:
                for p in t.partitions:
                    parts[(name, p.partition)] = [p.fetch_offset, -1]
            new_id = 0
            if epoch == 0:
                new_id = self.next_session_id
                self.next_session_id += 1
                self.sessions[new_id] = parts
                self.session_epochs[new_id] = 1
            answer = {tp: self._partition_answer(tp, v[0]) for tp, v in parts.items()}
            for tp, a in answer.items():
                parts[tp][1] = a.high_watermark
        else:
            session = self.sessions.get(sid)
            if session is None:
                return R(error_code=ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
            if epoch != self.session_epochs[sid]:
                return R(error_code=ErrorCode.INVALID_FETCH_SESSION_EPOCH, session_id=0)
            self.session_epochs[sid] = epoch + 1 if epoch < 2**31 - 1 else 1
            for f in body.forgotten_topics_data:
                name = self.topic_name(f)
                for i in f.partitions:
                    session.pop((name, i), None)
            for name, t in named:
                for p in t.partitions:
                    session[(name, p.partition)] = [p.fetch_offset, -1]
            answer = {}
            for tp, v in session.items():
                a = self._partition_answer(tp, v[0])
                if a.records or a.high_watermark != v[1]:
                    v[1] = a.high_watermark
                    answer[tp] = a
            new_id = sid
        topics: dict[str, list[Any]] = {}
        for tp, a in answer.items():
            topics.setdefault(tp[0], []).append(a)
        return R(
            session_id=new_id,
            responses=[
                R.FetchableTopicResponse(topic_id=self.topic_id(n), partitions=p)
                if by_id
                else R.FetchableTopicResponse(topic=n, partitions=p)
                for n, p in topics.items()
            ],
        )

    def fetch(self, header: Any, body: Any) -> Any:
        if self.fetch_sessions and header.request_api_version >= 7:
            return self.session_fetch(header, body)
        R = fetch.FetchResponse
        topics = []
        for t in body.topics:
            parts = []
            name = self.topic_name(t)
            for p in t.partitions:
                tp = (name, p.partition)
                blobs = []
                for blob in self.logs.get(tp, []):
                    if read_batch_header(blob).next_offset > p.fetch_offset:
                        blobs.append(blob)
                hw = self.next_offset.get(tp, 0)
                parts.append(
                    R.PartitionData(
                        partition_index=p.partition,
                        high_watermark=hw,
                        last_stable_offset=hw,
                        records=b"".join(blobs),
                    )
                )
            topics.append(
                R.FetchableTopicResponse(topic=t.topic, topic_id=t.topic_id, partitions=parts)
            )
        return R(responses=topics)

    def handler_for(self, key: int) -> Handler | None:
        if key in self.handlers:
            return self.handlers[key]
        return {
            18: self.api_versions,
            3: self.metadata,
            22: self.init_producer_id,
            0: self.produce,
            2: self.list_offsets,
            1: self.fetch,
        }.get(key)

    # -- serving ------------------------------------------------------------------

    async def serve(self, stream: anyio.abc.SocketStream) -> None:
        self.connections += 1
        self.open_connections += 1
        current_connection.set(self.connections)
        reader = FrameReader()
        try:
            async with stream:
                while True:
                    try:
                        data = await stream.receive()
                    except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                        return
                    reader.feed(data)
                    for frame in reader:
                        header, body = decode_request(frame)
                        key, version = header.request_api_key, header.request_api_version
                        self.requests.append((key, version, body))
                        if self.before is not None:
                            self.before(key)
                        handler = self.handler_for(key)
                        if handler is None:
                            return
                        try:
                            response = handler(header, body)
                            if hasattr(response, "__await__"):
                                response = await response
                        except Exception as exc:
                            # A bug in a test's handler: not a broker behaviour to
                            # test. Close this connection (the server goes on) and
                            # fail the test when the broker stops.
                            self.handler_errors.append(exc)
                            return
                        if response == "close":
                            return
                        if response is None:
                            continue
                        if isinstance(response, bytes):
                            await stream.send(response)
                            continue
                        await stream.send(
                            encode_response(header.correlation_id, key, version, response)
                        )
        finally:
            self.open_connections -= 1


_B = TypeVar("_B", bound=FakeBroker)


@asynccontextmanager
async def serving(broker: _B) -> AsyncIterator[_B]:
    """``broker`` answering on a free port of 127.0.0.1 (it sets ``broker.port``)
    until the block ends."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    broker.port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, broker.serve)
        yield broker
        tg.cancel_scope.cancel()
    if broker.handler_errors:
        first = broker.handler_errors[0]
        raise AssertionError(f"a handler of the fake broker raised {first!r}") from first
