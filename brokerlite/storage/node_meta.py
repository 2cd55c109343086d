"""A data directory's identity and producer ids: ``meta.properties`` (the cluster
and node ids) and the producer-id counter.

Rules and invariants:

* Files are replaced atomically (written aside, fsynced, renamed, the
  directory fsynced): a crash leaves the old content or the new, never a mix.
* A producer id is never handed out twice by a data directory: the counter's
  file names the first id of the next unreserved block and is advanced before
  any id of a new block is used, so a crash can skip ids but never repeat one.
  In cluster mode the blocks come from ZooKeeper (:class:`ClusterProducerIds`),
  so no two brokers hand out the same id.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Callable
from pathlib import Path

from ..config import BrokerConfig, ConfigError
from ..errors import BrokerError
from .files import atomic_write

__all__ = [
    "ClusterProducerIds",
    "ProducerIdAllocator",
    "load_cluster_id",
    "new_cluster_id",
    "write_meta",
]

PRODUCER_ID_BLOCK = 1000


def _read_properties(path: Path) -> dict[str, str]:
    values: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            values[key.strip()] = value.strip()
    return values


def new_cluster_id() -> str:
    """A cluster id in Kafka's format: a random UUID as 22 url-safe base64 characters."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode("ascii").rstrip("=")


def load_cluster_id(data_dir: Path, config: BrokerConfig) -> str:
    """The data directory's cluster id, given one (``config.cluster_id`` or a new
    one) when it has none yet.

    Raises:
        ConfigError: ``config.cluster_id`` contradicts the stored one.
    """
    meta = data_dir / "meta.properties"
    if meta.exists():
        stored = _read_properties(meta).get("cluster.id")
        if stored:
            if config.cluster_id is not None and config.cluster_id != stored:
                raise ConfigError(
                    f"cluster_id {config.cluster_id!r} does not match {stored!r} stored in {meta}"
                )
            return stored
    cluster_id = config.cluster_id or new_cluster_id()
    write_meta(meta, cluster_id, config.node_id)
    return cluster_id


def write_meta(path: Path, cluster_id: str, node_id: int) -> None:
    """``meta.properties``: the data directory's cluster and node ids."""
    atomic_write(
        path,
        f"# brokerlite broker metadata\nversion=1\ncluster.id={cluster_id}\nnode.id={node_id}\n".encode(),
    )


class ProducerIdAllocator:
    """Producer ids from a durable counter, reserved in blocks like Kafka does.

    The file holds the first id of the next unreserved block; it is advanced
    (atomically) before any id of a new block is handed out, so a crash can
    skip ids but never repeat one.
    """

    def __init__(self, path: Path) -> None:
        self._path = path
        self._next = 0
        self._limit = 0
        if path.exists():
            text = path.read_text(encoding="utf-8").strip()
            try:
                self._next = self._limit = int(text)
            except ValueError:
                raise ConfigError(f"{path}: not a producer id ({text!r})") from None

    def next(self) -> int:
        if self._next >= self._limit:
            self._limit = self._next + PRODUCER_ID_BLOCK
            atomic_write(self._path, f"{self._limit}\n".encode())
        pid = self._next
        self._next += 1
        return pid


class ClusterProducerIds:
    """Producer ids from blocks the cluster's ZooKeeper hands to this broker (cluster
    mode), so that no two brokers ever give out the same id. ``want_more`` is
    called when the ids left run low; the driver then adds a block."""

    def __init__(self, want_more: Callable[[], None]) -> None:
        self._blocks: list[tuple[int, int]] = []  # (next, last) each
        self._want_more = want_more
        self._asked = False

    def add_block(self, start: int, end: int) -> None:
        self._blocks.append((start, end))
        self._asked = False

    def left(self) -> int:
        return sum(end - nxt + 1 for nxt, end in self._blocks)

    def next(self) -> int:
        if not self._blocks:
            if not self._asked:
                self._asked = True
                self._want_more()
            raise BrokerError("no producer id block from ZooKeeper yet; retry shortly")
        nxt, end = self._blocks[0]
        if nxt == end:
            self._blocks.pop(0)
        else:
            self._blocks[0] = (nxt + 1, end)
        if self.left() < PRODUCER_ID_BLOCK // 2 and not self._asked:
            self._asked = True
            self._want_more()
        return nxt
