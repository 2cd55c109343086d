"""The exactly-once sink (``deliveryGuarantee=exactly-once``): each task's rows in
a Kafka transaction that the driver commits, as Flink's KafkaSink does.

No pyspark here. How a write goes:

* **Task** (executor): a transactional producer with ``transactional.id``
  ``<prefix>-<Spark partition id>`` (:func:`transactional_id`) calls
  InitProducerId, which fences every earlier producer of that id (an earlier
  attempt of the task, a zombie) and aborts the transaction it left open; it
  writes the task's rows in one transaction, flushes, and hands the open
  transaction over (:func:`write_transaction`, with
  :func:`trafka.sdk.txn_handoff.prepare_transaction`): the task's commit
  message carries its transactional id, producer id and epoch.
* **Driver**, once every task succeeded: commits each task's transaction with
  EndTxn on that producer id and epoch
  (:func:`trafka.sdk.txn_handoff.end_transaction`); when the write fails, it
  aborts those it got. A retried task attempt gets a higher epoch on the same
  id, so only the attempt whose message Spark kept can commit.

A batch write (``save()``) has nothing more. A stream also keeps a **commit
log** of its own in the checkpoint, ``<checkpointLocation>/trafka-sink/<batch
id>.json`` (:class:`CommitLog`), because Spark writes its own commit log only
after the sink's ``commit`` returns: a driver that dies between the first and
the last EndTxn of a micro-batch would otherwise leave part of the batch
committed and Spark would run it again. Rules of the stream:

* ``commit(N)`` first records the decision, ``committing`` with every task's
  transaction, then ends them, then records ``committed``.
* Before a micro-batch's tasks run (Spark asks the data source for its writer
  on the driver before each micro-batch, and again in each commit), a decision
  still ``committing`` is finished (:func:`settle`): its transactions are
  committed again (committing a committed transaction is a retry to the
  coordinator), then it is recorded ``committed``. This comes before any task
  of the batch Spark runs again calls InitProducerId, which would abort a
  transaction the driver had decided to commit.
* ``commit(N)`` that finds a decision for batch N from an earlier run of the
  query (other transactions) aborts this run's transactions: their rows are
  already committed. ``abort(N)`` of a decided batch does nothing (the
  decision is finished at the next start).
* The first commit of a run (a new Spark run id) also aborts transactions of
  this sink's prefix that are still open and are not the batch's own: a
  previous run's tasks that never reached a commit (the tasks of the run again
  usually fence them first, by using the same ids).
* Only the last few decisions are kept (:data:`KEEP`).

``transaction.timeout.ms`` must outlast the time from a task's first record to
the driver's commit, and a driver restart in between: the coordinator aborts a
transaction older than that, and its rows are then lost (the commit says so).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import re
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

import anyio

from ..sdk.config import AdminConfig, ClientConfig
from ..sdk.errors import ConfigError, InvalidTxnStateError, ProducerFencedError, TrafkaError
from ..sdk.txn_handoff import PreparedTransaction, end_transaction, prepare_transaction
from ._kafka import _run, _send_chunk, _settle
from ._pools import open_producer, shared_loop
from .options import WriteOptions

if TYPE_CHECKING:
    from ..sdk.admin import Admin
    from ..sdk.producer import Producer, RecordFuture

__all__ = [
    "KEEP",
    "CommitLog",
    "Decision",
    "SinkCommitError",
    "abort_all",
    "abort_batch",
    "commit_batch",
    "commit_stream",
    "default_prefix",
    "abort_stream",
    "random_prefix",
    "settle",
    "transactional_id",
    "write_transaction",
]

log = logging.getLogger(__name__)

#: Decisions kept in a stream's commit log (only the last one is ever read back,
#: the others are for whoever looks).
KEEP = 10

# EndTxn requests in flight at once from the driver.
_CONCURRENT_ENDS = 16


class SinkCommitError(TrafkaError):
    """The driver could not commit every transaction of a write."""


def transactional_id(prefix: str, partition: int) -> str:
    """The transactional id of a write task: reused by every attempt of the
    task and every micro-batch, so that each InitProducerId fences the last."""
    return f"{prefix}-{partition}"


def _local_path(location: str) -> Path:
    """A checkpoint location as a path this process can write, or ConfigError."""
    parsed = urlparse(location)
    if parsed.scheme in ("", "file") or (len(parsed.scheme) == 1 and location[1:3] == ":\\"):
        path = unquote(parsed.path) if parsed.scheme == "file" else location
        return Path(os.path.abspath(path))
    raise ConfigError(
        f"deliveryGuarantee=exactly-once keeps its commit log in the checkpoint, which must be "
        f"on a file system the driver's Python can write (a local or mounted path), not "
        f"{location!r}"
    )


def default_prefix(checkpoint: str) -> str:
    """The transactional id prefix of a stream: from its checkpoint location,
    so that a restarted query reuses (and fences) the same ids."""
    digest = hashlib.sha256(str(_local_path(checkpoint)).encode()).hexdigest()[:16]
    return f"trafka-spark-{digest}"


def random_prefix() -> str:
    """The transactional id prefix of a batch write given none."""
    return f"trafka-spark-{uuid.uuid4().hex[:16]}"


# -- tasks (executors) -----------------------------------------------------------------------


def write_transaction(
    opts: WriteOptions, tid: str, chunks: Iterable[Mapping[str, list[Any]]]
) -> tuple[PreparedTransaction, int]:
    """Write the chunks' rows in one transaction of ``tid`` and hand it over open.

    Returns:
        The prepared transaction and the number of rows.

    Raises:
        TrafkaError: a row has no topic, a record failed, the producer was
            fenced; the transaction is then aborted (as far as it can be).
    """
    config = opts.producer_config(tid)
    loop = shared_loop()
    producer, leave = loop.enter(open_producer(config=config))
    pending: list[RecordFuture] = []
    count = 0
    try:
        # InitProducerId: fences earlier attempts, aborts what they left open.
        loop.call(producer.init_transactions)
        loop.call(producer.begin_transaction)
        for chunk in chunks:
            count += loop.call(_send_chunk, producer, opts.topic, chunk, pending)
        prepared: PreparedTransaction = loop.call(_prepare, producer, pending)
    except BaseException as exc:
        with contextlib.suppress(Exception):
            loop.call(_abort_quietly, producer)
        with contextlib.suppress(Exception):
            leave(type(exc), exc, exc.__traceback__)
        raise
    leave(None, None, None)
    return prepared, count


async def _prepare(producer: Producer, pending: list[RecordFuture]) -> PreparedTransaction:
    await producer.flush()
    await _settle(pending)  # the first record that failed, if one did
    return await prepare_transaction(producer)


async def _abort_quietly(producer: Producer) -> None:
    with anyio.move_on_after(producer.config.max_block_ms / 1000):
        await producer.abort_transaction()


# -- the driver --------------------------------------------------------------------------


def _open_admin(opts: WriteOptions) -> contextlib.AbstractAsyncContextManager[Admin]:
    """The driver's admin client, with the write's client settings. Imported
    on first use: a task's worker, which imports this module to write, never
    needs the admin client."""
    from ..sdk.admin import open_admin

    producer = opts.producer_config()
    return open_admin(
        AdminConfig(**{f.name: getattr(producer, f.name) for f in dataclasses.fields(ClientConfig)})
    )


def _for_each(
    opts: WriteOptions,
    txns: Sequence[PreparedTransaction],
    fn: Callable[[Admin, PreparedTransaction], Awaitable[None]],
) -> None:
    """``await fn(admin, txn)`` for every transaction, concurrently (at most
    :data:`_CONCURRENT_ENDS` at once), through one admin client on a private loop."""

    async def go() -> None:
        limit = anyio.CapacityLimiter(_CONCURRENT_ENDS)
        async with _open_admin(opts) as admin:

            async def one(txn: PreparedTransaction) -> None:
                async with limit:
                    await fn(admin, txn)

            async with anyio.create_task_group() as tg:
                for txn in txns:
                    tg.start_soon(one, txn)

    _run(go)


def _end_all(
    opts: WriteOptions, txns: Sequence[PreparedTransaction], *, commit: bool
) -> list[tuple[PreparedTransaction, BaseException]]:
    """EndTxn for every transaction, concurrently; the ones that failed, with why."""
    txns = [t for t in txns if t.partitions]
    failed: list[tuple[PreparedTransaction, BaseException]] = []

    async def end(admin: Admin, txn: PreparedTransaction) -> None:
        try:
            await end_transaction(admin, txn, commit=commit)
        except TrafkaError as exc:
            failed.append((txn, exc))

    if txns:
        _for_each(opts, txns, end)
    return failed


def _commit_all(opts: WriteOptions, txns: Sequence[PreparedTransaction], what: str) -> None:
    """Commit every transaction, or raise :class:`SinkCommitError` saying which
    could not be (the others are committed all the same)."""
    failed = _end_all(opts, txns, commit=True)
    if not failed:
        return
    lost = [(t, e) for t, e in failed if isinstance(e, ProducerFencedError | InvalidTxnStateError)]
    lines = [f"{t.transactional_id} ({_names(t.partitions)}): {e}" for t, e in failed]
    text = f"{what}: {len(failed)} of {len(txns)} transactions could not be committed: " + (
        "; ".join(lines)
    )
    if lost:
        text += (
            ". Kafka ended the fenced ones before the commit (transaction.timeout.ms passed, or "
            "a producer with the same transactional id took over): their rows are lost"
        )
    raise SinkCommitError(text) from failed[0][1]


def abort_all(opts: WriteOptions, txns: Sequence[PreparedTransaction]) -> None:
    """Abort every transaction, as far as it can be (a failure is logged: the
    next InitProducerId of the id, or the coordinator's timeout, aborts it too)."""
    for txn, exc in _end_all(opts, txns, commit=False):
        log.warning("aborting the transaction of %s failed: %s", txn.transactional_id, exc)


def _names(partitions: Iterable[tuple[str, int]]) -> str:
    return ", ".join(f"{t}-{p}" for t, p in partitions)


def commit_batch(opts: WriteOptions, txns: Sequence[PreparedTransaction]) -> None:
    """The driver's commit of a batch write (``save()``)."""
    _commit_all(opts, txns, "the write")


def abort_batch(opts: WriteOptions, prefix: str, txns: Sequence[PreparedTransaction]) -> None:
    """The driver's abort of a batch write: the transactions of the tasks that
    reported are aborted, then any other still open under ``prefix`` (tasks
    that failed after writing, or finished after the job had failed)."""
    abort_all(opts, txns)
    _abort_strays(opts, prefix, set())


@dataclasses.dataclass(frozen=True, slots=True)
class Decision:
    """A micro-batch the driver decided to commit, as the commit log keeps it.

    Attributes:
        batch_id: Spark's batch id.
        committed: every transaction was committed (else: ``committing``).
        run: Spark's run id of the query that decided (None when unknown).
        transactions: every task's transaction.
    """

    batch_id: int
    committed: bool
    run: str | None
    transactions: tuple[PreparedTransaction, ...]


class CommitLog:
    """A stream's decisions, one JSON file per micro-batch under
    ``<checkpoint>/trafka-sink/``, each written whole (a temporary file
    renamed, both synced) so that a crash leaves the old file or the new one.

    Raises (any method):
        ConfigError: the checkpoint is not on a file system this process writes.
    """

    def __init__(self, checkpoint: str) -> None:
        self.directory = _local_path(checkpoint) / "trafka-sink"

    def _path(self, batch_id: int) -> Path:
        return self.directory / f"{batch_id}.json"

    def _batches(self) -> list[int]:
        if not self.directory.is_dir():
            return []
        return sorted(int(p.stem) for p in self.directory.glob("*.json") if p.stem.isdigit())

    def read(self, batch_id: int) -> Decision | None:
        """The decision of ``batch_id``, if there is one."""
        try:
            data = json.loads(self._path(batch_id).read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise SinkCommitError(
                f"the sink's commit log {self._path(batch_id)} cannot be read: {exc}"
            ) from exc
        return Decision(
            int(data["batch_id"]),
            data["state"] == "committed",
            data.get("run"),
            tuple(PreparedTransaction.from_json(t) for t in data["transactions"]),
        )

    def latest(self) -> Decision | None:
        """The decision of the highest batch id, if any."""
        batches = self._batches()
        return self.read(batches[-1]) if batches else None

    def write(self, decision: Decision) -> None:
        """Record ``decision`` (replacing the batch's earlier one), durably."""
        self.directory.mkdir(parents=True, exist_ok=True)
        data = {
            "batch_id": decision.batch_id,
            "state": "committed" if decision.committed else "committing",
            "run": decision.run,
            "transactions": [t.to_json() for t in decision.transactions],
        }
        path = self._path(decision.batch_id)
        temporary = path.with_suffix(".tmp")
        with temporary.open("w") as f:
            json.dump(data, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, path)
        fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def prune(self, keep: int = KEEP) -> None:
        """Forget all but the last ``keep`` decisions."""
        for batch_id in self._batches()[:-keep]:
            with contextlib.suppress(FileNotFoundError):
                self._path(batch_id).unlink()


def settle(opts: WriteOptions, commit_log: CommitLog) -> None:
    """Finish a decision that a driver left ``committing`` (it died, or a
    commit failed): commit its transactions again, then record it committed.
    Nothing to do (one small file read) otherwise.

    Raises:
        SinkCommitError: a transaction of the decision could not be committed.
    """
    last = commit_log.latest()
    if last is None or last.committed:
        return
    _commit_all(
        opts,
        last.transactions,
        f"micro-batch {last.batch_id}, decided by an earlier run of the query (settled on start)",
    )
    commit_log.write(dataclasses.replace(last, committed=True))


def commit_stream(
    opts: WriteOptions,
    commit_log: CommitLog,
    prefix: str,
    batch_id: int,
    txns: Sequence[PreparedTransaction],
    run: str | None,
) -> None:
    """The driver's commit of micro-batch ``batch_id`` (see the module's rules).

    Raises:
        SinkCommitError: a transaction could not be committed (the decision
            stays ``committing``, for the next start to finish).
    """
    earlier = commit_log.read(batch_id)
    if earlier is not None and set(earlier.transactions) != set(txns):
        # An earlier run of the query decided this batch: its rows are in Kafka
        # (settle() made sure of it before this run's tasks), so this run's are not.
        if not earlier.committed:
            settle(opts, commit_log)
        abort_all(opts, txns)
        return
    previous = commit_log.latest()
    first_of_run = previous is None or run is None or previous.run != run
    gone = _not_open(opts, txns)
    if gone:
        # Kafka ended some before the decision (transaction.timeout.ms, most
        # likely): nothing is committed, and Spark runs the batch again.
        abort_batch(opts, prefix, txns)
        raise SinkCommitError(
            f"micro-batch {batch_id}: Kafka no longer holds the transactions of "
            f"{', '.join(gone)} open (transaction.timeout.ms passed since their first "
            "record, or a producer with the same transactional id took over); the batch "
            "is aborted and runs again when the query restarts"
        )
    commit_log.write(Decision(batch_id, False, run, tuple(txns)))
    _commit_all(opts, txns, f"micro-batch {batch_id}")
    commit_log.write(Decision(batch_id, True, run, tuple(txns)))
    commit_log.prune()
    if first_of_run:
        _abort_strays(opts, prefix, {t.transactional_id for t in txns})


def _not_open(opts: WriteOptions, txns: Sequence[PreparedTransaction]) -> list[str]:
    """The transactional ids among ``txns`` whose transaction the coordinator no
    longer holds open with that producer id and epoch (DescribeTransactions),
    checked before a decision, which is final. A coordinator that cannot say
    (an old broker, no DESCRIBE permission) is taken at its word later, at EndTxn."""
    wanted = [t for t in txns if t.partitions]
    gone: list[str] = []

    async def check(admin: Admin, txn: PreparedTransaction) -> None:
        tid = txn.transactional_id
        try:
            found = (await admin.describe_transactions([tid]))[tid]
        except TrafkaError as exc:
            log.info("cannot describe the transaction of %s: %s", tid, exc)
            return
        held = (found.state, found.producer_id, found.producer_epoch)
        if held != ("Ongoing", txn.producer_id, txn.producer_epoch):
            gone.append(tid)

    if wanted:
        _for_each(opts, wanted, check)
    return sorted(gone)


def abort_stream(
    opts: WriteOptions,
    commit_log: CommitLog,
    prefix: str,
    batch_id: int,
    txns: Sequence[PreparedTransaction],
) -> None:
    """The driver's abort of micro-batch ``batch_id``: as :func:`abort_batch`,
    unless the batch was decided (then the next start finishes it)."""
    if commit_log.read(batch_id) is not None:
        return
    abort_batch(opts, prefix, txns)


def _abort_strays(opts: WriteOptions, prefix: str, keep: set[str]) -> None:
    """Abort the open transactions of ``prefix``'s ids other than ``keep``
    (fencing their ids, as a new producer of each would)."""
    pattern = re.compile(re.escape(prefix) + r"-\d+")

    async def go() -> list[str]:
        async with _open_admin(opts) as admin:
            listed = await admin.list_transactions(states=["Ongoing"])
            strays = sorted(
                t.transactional_id
                for t in listed
                if pattern.fullmatch(t.transactional_id) and t.transactional_id not in keep
            )
            if strays:
                await admin.fence_producers(strays)
            return strays

    try:
        strays: list[str] = _run(go)
    except TrafkaError as exc:
        log.warning("looking for transactions an earlier run left open failed: %s", exc)
        return
    if strays:
        log.info("aborted transactions an earlier run left open: %s", ", ".join(strays))
