"""A differential conversation runner: the same request sequence sent to two
brokers over raw connections, the answers decoded to plain values, normalised,
and compared field by field (issue #61).

Rules:

* A conversation is a function ``script(talk)``; it sends requests with
  ``talk.ask(key, version, body)`` (or ``send``/``receive`` for a request left
  waiting while others go on another connection) and may branch on the raw
  answers it gets back (a member id, a producer id), so the same script serves
  every peer.
* Names (topics, groups, transactional ids) are made per run by ``talk.name``;
  the transcript shows them as ``<topic>`` etc., so one broker can run a script
  twice and two brokers can be compared although each run used fresh names.
* Only what must differ is normalised: node ids, hosts and ports, cluster and
  topic ids, throttle times, free-text error messages; ids a broker makes up
  (member ids, producer ids, fetch session ids) become ``<member_id#1>``, ... in
  order of first appearance, so their identity across answers is still compared.
* A connection the broker closes is recorded as ``{"closed": True}``; the next
  request on it opens a new one.
* With ``logins`` (a connection's name, or ``""`` for any other, to a user and
  password), each connection first logs in with SASL/PLAIN (SaslHandshake v1,
  SaslAuthenticate v2), unrecorded: the same principals talk to both brokers.
"""

from __future__ import annotations

import itertools
import os
import socket
import struct
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from trafka.codec.messages import k17_sasl_handshake as sasl_handshake
from trafka.codec.messages import k36_sasl_authenticate as sasl_auth
from trafka.codec.messages.headers import RequestHeader
from trafka.codec.protocol import decode_response, encode_request
from trafka.codec.records import decode_batch, iter_batches

#: fields dropped from answers: they must differ between brokers
DROPPED = frozenset(
    {
        "throttle_time_ms",
        "cluster_id",
        "controller_id",
        "error_message",
        "acknowledge_error_message",
        "host",
        "port",
        "rack",
        "unknown_tagged_fields",
        "cluster_authorized_operations",
    }
)
#: fields holding node ids: each non-negative value is ``<node>``
NODE_FIELDS = frozenset({"node_id", "leader_id", "coordinator_id", "preferred_read_replica"})
NODE_LISTS = frozenset({"replica_nodes", "isr_nodes", "offline_replicas"})
#: ids a broker makes up: the n-th distinct value of a kind becomes ``<kind#n>``
#: (the kind's "none" values kept)
MADE_UP = {
    "member_id": "member_id",
    "leader": "member_id",
    "producer_id": "producer_id",
    "session_id": "session_id",
}
_NONE = {"member_id": ("", None), "producer_id": (-1,), "session_id": (0,)}
#: Topic configs that only one era of Kafka has (removed by 4.0, or added
#: since): brokerlite lists 4.x's set (docs/brokerlite.md, "Differences from
#: Kafka found by the differential test"). Left out of every config list.
ERA_CONFIGS = frozenset(
    {
        "message.format.version",
        "message.downconversion.enable",
        "message.timestamp.difference.max.ms",
        "message.timestamp.after.max.ms",
        "errors.deadletterqueue.group.enable",
        "max.decompressed.message.bytes",
        "remote.copy.lag.bytes",
        "remote.copy.lag.ms",
        "min.insync.replicas",
    }
)
_counter = itertools.count(1)
#: SASL/PLAIN logins by connection name (see the module's rules)
Logins = dict[str, tuple[str, str]]
#: a file to which a failing comparison appends both transcripts
DUMP_ENV = "TRAFKA_DIFF_DUMP"


def unique(prefix: str) -> str:
    """A name no other run of this process uses."""
    return f"diff-{prefix}-{uuid.uuid4().hex[:8]}-{next(_counter)}"


def plain(value: Any) -> Any:
    """A decoded message as dicts, lists and scalars (bytes kept as bytes)."""
    slots = getattr(type(value), "__slots__", None)
    if slots is not None and not isinstance(value, bytes | str | int | float | bool | uuid.UUID):
        return {name: plain(getattr(value, name)) for name in slots}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, memoryview | bytearray):
        return bytes(value)
    return value


class Normaliser:
    """Replaces what must differ (see the module's rules); one per run."""

    def __init__(self, names: dict[str, str]) -> None:
        self.names = names
        self.seen: dict[tuple[str, Any], str] = {}

    def made_up(self, kind: str, value: Any) -> Any:
        if value in _NONE[kind]:
            return value
        key = (kind, value)
        if key not in self.seen:
            count = sum(1 for k, _ in self.seen if k == kind) + 1
            self.seen[key] = f"<{kind}#{count}>"
        return self.seen[key]

    def batches(self, blob: bytes) -> list[Any]:
        """A records blob as its batches: header fields (the CRC left out, as it
        covers the made-up producer id) and records; a control batch's
        timestamps are the broker's clock. A trailing partial batch (Kafka fills
        ``max_bytes`` with one, brokerlite sends whole batches only: see
        docs/brokerlite.md) is left out."""
        out: list[Any] = []
        for header, view in iter_batches(blob):
            fields = dict(header._asdict())
            del fields["crc"]
            fields["producer_id"] = self.made_up("producer_id", fields["producer_id"])
            if header.attributes & 0x20:
                fields["base_timestamp"] = fields["max_timestamp"] = "<time>"
                records: Any = "control"
            else:
                records = [tuple(r) for r in decode_batch(view).records]
            out.append({"batch": fields, "records": records})
        return out

    def __call__(self, value: Any, field: str = "") -> Any:
        if isinstance(value, dict):
            return {k: self(v, k) for k, v in value.items() if k not in DROPPED}
        if field == "members" and isinstance(value, list):
            # a group's members come in no particular order
            return sorted((self(v) for v in value), key=repr)
        if isinstance(value, list):
            if field == "configs":
                value = [
                    c for c in value if getattr(c, "get", dict().get)("name") not in ERA_CONFIGS
                ]
            if field in NODE_LISTS:
                return ["<node>" if n >= 0 else n for n in value]
            return [self(v, field) for v in value]
        if field in NODE_FIELDS and isinstance(value, int):
            return "<node>" if value >= 0 else value
        if field in MADE_UP:
            return self.made_up(MADE_UP[field], value)
        if field == "records" and isinstance(value, bytes):
            return self.batches(value)
        if isinstance(value, uuid.UUID):
            return "<uuid>"
        if isinstance(value, str):
            for label, name in self.names.items():
                value = value.replace(name, f"<{label}>")
        return value


class Talk:
    """One run of a script against one broker: its connections and transcript."""

    def __init__(
        self, bootstrap: str, *, timeout: float = 60.0, logins: Logins | None = None
    ) -> None:
        host, _, port = bootstrap.split(",")[0].rpartition(":")
        self.address = (host, int(port))
        self.timeout = timeout
        self.logins = logins or {}
        self.names: dict[str, str] = {}
        self.normalise = Normaliser(self.names)
        self.transcript: list[tuple[str, Any]] = []
        self._socks: dict[str, socket.socket] = {}
        self._pending: dict[str, tuple[int, int, int, str]] = {}
        self._corr = 0
        #: False while a script polls for a condition (answers not recorded)
        self.recording = True

    def name(self, label: str) -> str:
        """The run's name for ``label`` (made on first use)."""
        if label not in self.names:
            self.names[label] = unique(label)
        return self.names[label]

    def _sock(self, conn: str) -> socket.socket:
        if conn not in self._socks:
            sock = socket.create_connection(self.address, timeout=self.timeout)
            login = self.logins.get(conn, self.logins.get(""))
            if login is not None:
                _plain_login(sock, *login)
            self._socks[conn] = sock
        return self._socks[conn]

    def send(
        self,
        key: int,
        version: int,
        body: Any,
        *,
        conn: str = "main",
        step: str = "",
        expect_answer: bool = True,
        raw: bytes | None = None,
    ) -> None:
        """Send a request on ``conn`` without reading its answer (see :meth:`receive`);
        ``expect_answer=False`` for one the broker does not answer (acks=0): the
        next answer on the connection must then be the next request's. ``raw``:
        hand-made bytes sent instead (a broken request), its answer decoded as
        ``key`` at ``version``."""
        self._corr += 1
        header = RequestHeader(
            request_api_key=key,
            request_api_version=version,
            correlation_id=self._corr,
            client_id="differential",
        )
        self._sock(conn).sendall(encode_request(header, body) if raw is None else raw)
        if expect_answer:
            corr = self._corr if raw is None else -1
            self._pending[conn] = (key, version, corr, step or f"{key}v{version}")

    def receive(self, *, conn: str = "main") -> Any:
        """Read the answer to the request pending on ``conn``; record it; return it raw."""
        key, version, corr, step = self._pending.pop(conn)
        sock = self._socks[conn]
        try:
            frame = _read(sock, struct.unpack(">i", _read(sock, 4))[0])
        except (ConnectionError, TimeoutError) as exc:
            sock.close()
            del self._socks[conn]
            closed = {"closed": True, "timeout": isinstance(exc, TimeoutError)}
            self.transcript.append((step, closed))
            return None
        header, response = decode_response(frame, key, version)
        assert corr == -1 or header.correlation_id == corr
        if self.recording:
            self.transcript.append((step, self.normalise(plain(response))))
        return response

    def ask(
        self,
        key: int,
        version: int,
        body: Any,
        *,
        conn: str = "main",
        step: str = "",
        raw: bytes | None = None,
    ) -> Any:
        """Send a request, record and return its answer (None when the broker closed)."""
        self.send(key, version, body, conn=conn, step=step, raw=raw)
        return self.receive(conn=conn)

    def note(self, step: str, value: Any) -> None:
        """Record a value the script derived (compared like an answer)."""
        self.transcript.append((step, self.normalise(value)))

    def close(self) -> None:
        for sock in self._socks.values():
            sock.close()
        self._socks.clear()


def _plain_login(sock: socket.socket, user: str, password: str) -> None:
    """SASL/PLAIN on a new connection (KIP-152's SaslHandshake then SaslAuthenticate)."""
    for key, version, body in (
        (17, 1, sasl_handshake.SaslHandshakeRequest(mechanism="PLAIN")),
        (36, 2, sasl_auth.SaslAuthenticateRequest(auth_bytes=f"\0{user}\0{password}".encode())),
    ):
        header = RequestHeader(
            request_api_key=key, request_api_version=version, correlation_id=0, client_id="login"
        )
        sock.sendall(encode_request(header, body))
        frame = _read(sock, struct.unpack(">i", _read(sock, 4))[0])
        answer = decode_response(frame, key, version)[1]
        assert answer.error_code == 0, (user, answer)


def _read(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError(f"closed after {len(out)} of {n} bytes")
        out += chunk
    return bytes(out)


def differences(reference: Any, other: Any, path: str = "") -> Iterator[str]:
    """Field-level differences, one readable line each (``path: ref != other``)."""
    if isinstance(reference, dict) and isinstance(other, dict):
        for key in reference.keys() | other.keys():
            where = f"{path}.{key}" if path else key
            if key not in reference or key not in other:
                yield f"{where}: only in {'reference' if key in reference else 'peer'}"
            else:
                yield from differences(reference[key], other[key], where)
    elif isinstance(reference, list) and isinstance(other, list):
        if _named(reference) and _named(other):
            # configs and the like: keyed by name, their order not meaningful
            yield from differences(_by_name(reference), _by_name(other), path)
        elif len(reference) != len(other):
            yield f"{path}: {len(reference)} items != {len(other)}: {reference!r} != {other!r}"
        else:
            for i, (a, b) in enumerate(zip(reference, other, strict=True)):
                yield from differences(a, b, f"{path}[{i}]")
    elif reference != other:
        yield f"{path}: {reference!r} != {other!r}"


def _named(items: list[Any]) -> bool:
    return bool(items) and all(isinstance(i, dict) and "name" in i for i in items)


def _by_name(items: list[Any]) -> dict[str, Any]:
    return {i["name"]: {k: v for k, v in i.items() if k != "name"} for i in items}


def compare(reference: list[tuple[str, Any]], other: list[tuple[str, Any]]) -> list[str]:
    """Every difference between two transcripts, each line naming its step."""
    lines = []
    steps = [s for s, _ in reference], [s for s, _ in other]
    if steps[0] != steps[1]:
        lines.append(f"steps differ: {steps[0]} != {steps[1]}")
    for i, ((step, a), (_, b)) in enumerate(zip(reference, other, strict=False)):
        lines += [f"step {i} ({step}) {d}" for d in differences(a, b)]
    return lines


Script = Callable[[Talk], None]


def run(bootstrap: str, script: Script, logins: Logins | None = None) -> list[tuple[str, Any]]:
    """Run ``script`` against one broker; its normalised transcript."""
    talk = Talk(bootstrap, logins=logins)
    try:
        script(talk)
    finally:
        talk.close()
    return talk.transcript


#: The reference's transcript of each script that closes over nothing, by
#: (reference, code): a test parametrized on peers runs it on the reference once.
_REFERENCE_RUNS: dict[tuple[str, Any], list[tuple[str, Any]]] = {}


def reference_run(
    reference: str, script: Script, logins: Logins | None = None
) -> list[tuple[str, Any]]:
    """:func:`run` on the reference, once per script for the process when the
    script's answers can depend only on its code (no closure: every name it
    creates is new to the broker, so a second run would add nothing)."""
    if getattr(script, "__closure__", True) is not None or logins:
        return run(reference, script, logins)
    key = (reference, script.__code__)  # type: ignore[attr-defined]
    if key not in _REFERENCE_RUNS:
        _REFERENCE_RUNS[key] = run(reference, script)
    return _REFERENCE_RUNS[key]


def assert_same(reference: str, peer: str, script: Script, logins: Logins | None = None) -> None:
    """Run ``script`` on the reference broker (or take its earlier run, see
    :func:`reference_run`) and on ``peer``, side by side (each run is a
    conversation with its own broker, mostly waiting on it: a script that
    waits out a timeout waits once, not twice); fail listing every field that
    differs."""
    with ThreadPoolExecutor(1, thread_name_prefix="differential-reference") as pool:
        reference_side = pool.submit(reference_run, reference, script, logins)
        got = run(peer, script, logins)
        expected = reference_side.result()
    lines = compare(expected, got)
    dump = os.environ.get(DUMP_ENV)
    if lines and dump:
        with open(dump, "a") as out:
            for label, transcript in (("reference", expected), ("peer", got)):
                out.write(f"== {label}\n")
                out.writelines(f"{step}: {answer!r}\n" for step, answer in transcript)
    assert not lines, "answers differ from the reference:\n" + "\n".join(lines)
