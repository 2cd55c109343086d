"""The two sides of tests/brokerlite/test_cluster_zk_parity.py (a Kafka 3.9
cluster and a brokerlite cluster, both on ZooKeeper), the raw requests and
waits its scenarios use, and the normalising of what each side shows (broker
ids as roles: ``C`` the controller, ``A`` and ``B`` the others)."""

from __future__ import annotations

import dataclasses
import json
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from trafka.codec.framing import FrameReader
from trafka.codec.messages import k19_create_topics as ct
from trafka.codec.messages.headers import RequestHeader
from trafka.codec.protocol import decode_response_frame, encode_request
from trafka.sdk.blocking import Admin

WAIT_S = 120.0


@dataclasses.dataclass
class Side:
    """One cluster: its ZooKeeper chroot, its brokers' addresses, and how to stop
    (controlled shutdown), start, pause and resume a broker."""

    name: str
    zk: KazooClient
    addresses: dict[int, str]
    stop: Callable[[int], None]
    start: Callable[[int], None]
    pause: Callable[[int, bool], None]
    #: the ZooKeeper connect string, chroot included
    connect: str = ""
    #: each broker's log directory (brokerlite's)
    log_dirs: dict[int, Path] = dataclasses.field(default_factory=dict)

    @property
    def bootstrap(self) -> str:
        return ",".join(self.addresses.values())

    def get(self, path: str) -> tuple[Any, int] | None:
        """A znode's document (JSON parsed, else text) and version; None when absent
        (or deleted as it was read: a controller removes a plan once done)."""
        try:
            data, stat = self.zk.get(path)
        except NoNodeError:
            return None
        text = data.decode() if data else None
        doc = json.loads(text) if text and text[0] in "{[" else text
        return doc, stat.version

    def children(self, path: str) -> list[str]:
        return sorted(self.zk.get_children(path)) if self.zk.exists(path) else []

    def controller(self) -> int:
        """The controller's id (waiting for one: an election may be under way)."""
        got = wait_for(
            f"{self.name}: a controller (znodes {self.children('/')})",
            lambda: self.get("/controller"),
        )
        return int(got[0]["brokerid"])

    def roles(self) -> dict[int, str]:
        """Broker id to role: ``C`` the controller, ``A``/``B`` the others."""
        c = self.controller()
        a, b = sorted(set(self.addresses) - {c})
        return {a: "A", b: "B", c: "C"}

    def ids(self) -> dict[str, int]:
        return {role: node for node, role in self.roles().items()}

    def state(self, topic: str, partition: int) -> tuple[dict[str, Any], int]:
        got = self.get(f"/brokers/topics/{topic}/partitions/{partition}/state")
        assert got is not None, (self.name, topic, partition)
        return got

    def admin(self) -> Admin:
        """An admin client bootstrapped from the controller only (a paused broker
        in the bootstrap list would hold the client up)."""
        return Admin(bootstrap_servers=self.addresses[self.controller()])


def exchange(address: str, key: int, version: int, body: Any) -> Any:
    """One request on a connection of its own (a blocking exchange, for the raw
    answers the SDK does not show)."""
    host, port = address.rsplit(":", 1)
    header = RequestHeader(
        request_api_key=key, request_api_version=version, correlation_id=1, client_id="zkparity"
    )
    with socket.create_connection((host, int(port)), timeout=WAIT_S) as sock:
        sock.sendall(encode_request(header, body))
        reader = FrameReader()
        while (frame := reader.next_frame()) is None:
            data = sock.recv(65536)
            if not data:
                raise OSError(f"{address} closed the connection")
            reader.feed(data)
    return decode_response_frame(frame, key, version)


def create_in_roles(side: Side, topic: str, replicas: dict[int, list[str]], **configs: str) -> None:
    """CreateTopics with an explicit assignment, in roles, through the controller."""
    ids = side.ids()
    C = ct.CreateTopicsRequest
    body = C(
        topics=[
            C.CreatableTopic(
                name=topic,
                num_partitions=-1,
                replication_factor=-1,
                assignments=[
                    C.CreatableReplicaAssignment(partition_index=p, broker_ids=[ids[r] for r in rs])
                    for p, rs in replicas.items()
                ],
                configs=[C.CreatableTopicConfig(name=k, value=v) for k, v in configs.items()],
            )
        ],
        timeout_ms=int(WAIT_S * 1000),
    )
    answer = exchange(side.addresses[side.controller()], 19, 7, body)
    assert answer.topics[0].error_code == 0, (side.name, answer)


def wait_for(what: str, check: Callable[[], Any]) -> Any:
    deadline = time.monotonic() + WAIT_S
    while not (result := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {WAIT_S:g} s: {what}")
        time.sleep(0.2)
    return result


def both(action: Callable[[Side], Any], sides: tuple[Side, Side]) -> tuple[Any, Any]:
    """``action`` on both clusters at once (stops and starts take seconds each):
    Kafka's in this thread (a Kafka broker dies with the thread that started it),
    brokerlite's in another."""
    kafka, brokerlite = sides
    results: list[Any] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            results.append(action(brokerlite))
        except BaseException as exc:  # re-raised below, in the test's thread
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    try:
        first = action(kafka)
    finally:
        thread.join()
    if errors:
        raise errors[0]
    return first, results[0]


# -- normalising --------------------------------------------------------------------------------


def shape(doc: Any) -> Any:
    """A document's field names and value types, values left out."""
    if isinstance(doc, dict):
        return {k: shape(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [shape(v) for v in doc[:1]]
    return type(doc).__name__


def in_roles(side: Side, doc: Any) -> Any:
    """A partition state or topic document with broker ids as roles."""
    roles = side.roles()
    out = dict(doc)
    for key in ("isr",):
        if key in out:
            out[key] = [roles[b] for b in out[key]]
    if "leader" in out:
        out["leader"] = roles.get(out["leader"], out["leader"])
    for key in ("partitions", "adding_replicas", "removing_replicas"):
        if key in out:
            out[key] = {p: [roles[b] for b in rs] for p, rs in out[key].items()}
    out.pop("topic_id", None)
    return out


def partition_view(side: Side, topic: str, partitions: int) -> dict[int, Any]:
    """Each partition's state in roles (znode version kept) and what a client's
    Metadata says of it, in roles, once the Metadata has caught up with the state
    (its leader epoch; a broker learns a state a moment after it is written,
    on either cluster)."""
    roles = side.roles()

    def read() -> Any:
        with side.admin() as admin:
            info = admin.describe_topics([topic])[topic]
        docs = [side.state(topic, p) for p in range(partitions)]
        caught_up = all(
            info.partitions[p].leader_epoch == docs[p][0]["leader_epoch"] for p in range(partitions)
        )
        return caught_up, info, docs

    deadline = time.monotonic() + WAIT_S
    while not (got := read())[0] and time.monotonic() < deadline:
        time.sleep(0.2)
    _, info, docs = got
    out: dict[int, Any] = {}
    for p in range(partitions):
        doc, version = docs[p]
        meta = info.partitions[p]
        out[p] = {
            "zk": in_roles(side, doc),
            "zk_version": version,
            "metadata": {
                "leader": roles.get(meta.leader, meta.leader),
                "leader_epoch": meta.leader_epoch,
                "replicas": [roles[b] for b in meta.replicas],
                "isr": [roles[b] for b in meta.isr],
                "offline": sorted(roles[b] for b in meta.offline_replicas),
                "error": meta.error.name,
            },
        }
    return out


def without_epoch(epochs: list[int], view: dict[int, Any]) -> dict[int, Any]:
    """A one-partition view without its leader epoch (appended to ``epochs``) and
    without the state znode's version (the number of writes follows the epochs)."""
    epochs.append(view[0]["zk"].pop("leader_epoch"))
    assert view[0]["metadata"].pop("leader_epoch") == epochs[-1], view
    view[0].pop("zk_version")
    return view


def controller_epoch_matches(side: Side, doc: dict[str, Any]) -> None:
    got = side.get("/controller_epoch")
    assert got is not None and doc["controller_epoch"] == int(got[0]), (side.name, doc, got)
