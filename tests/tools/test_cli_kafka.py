"""The ``trafka`` command line against Apache Kafka itself, differentially: one
table of command lines per scenario, each line run against brokerlite and
against Kafka (3.9 on ZooKeeper and 4.x on KRaft, where the broker has the
feature), and the transcripts (exit status, stdout, stderr) compared.

Kafka is the reference: where the two answer differently, the CLI (or the SDK
or brokerlite behind it) was fixed, or the difference is deliberate and written
down in docs/cli.md ("The CLI against Apache Kafka"). The outputs are
normalised only for what must differ between two clusters: their addresses,
cluster ids, the time (dates, epochs in ms), generated ids (producer ids,
member ids), and the wording of a broker's own error message after Kafka's
error code (the code itself is compared).

Commands run in-process (click's CliRunner, each its own ``trio.run``); the
brokers are the session's (a name of this run's own for every topic, group and
transactional id), except the ACL and token scenarios, which need a broker
configured for them.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import shlex
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractAsyncContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest
from click.testing import CliRunner
from kafka_peers import KAFKA_4, SKIP_ENV, KafkaCluster, missing

from trafka.codec import ErrorCode, KafkaError
from trafka.sdk import ProducerFencedError, TopicPartition, open_admin, open_producer
from trafka.tools.cli import main
from trafka.tools.clikit import format_table

pytestmark = pytest.mark.timeout(300)

BOTH = frozenset({"3.9", "4"})


@dataclass(frozen=True)
class Step:
    """One command line of a scenario.

    ``line`` is formatted with the run's names (``{t}`` its topic...), then split
    as a shell would; ``-b`` and the run's connection options are added.
    ``stdin`` is its input. ``on`` are the Kafka versions that have the feature
    (brokerlite runs every step the Kafka run runs).
    """

    line: str
    stdin: str | None = None
    on: frozenset[str] = BOTH
    #: Of a listing, only the lines (or JSON entries) naming this run's
    #: resources (the brokers are shared with other tests), or naming this text.
    ours: bool | str = False
    #: Columns of a table (or JSON keys) whose values are the cluster's own:
    #: generated ids, durations, sizes of a disk.
    mask: tuple[str, ...] = ()
    #: The lines of stdout in order: records of several partitions come in the
    #: order the fetches return them.
    sort: bool = False
    #: Patterns of this step's stdout whose match is the coordinator's own
    #: bookkeeping (written down in docs/cli.md where it differs).
    hide: tuple[str, ...] = ()
    #: Columns of a table that are sets (``1,3,2``): compared sorted.
    sets: tuple[str, ...] = ()
    #: Asked again while Kafka's answer is not yet brokerlite's (see
    #: :func:`settles`); None: when the command only reads.
    settle: bool | None = None


@dataclass(frozen=True)
class Do:
    """What a scenario does between its command lines, with the SDK: ``fn(run)``
    may add names to ``run.names`` (a peer's own: its log directory...) and
    return a line for the transcript."""

    fn: Callable[[Run], str | None]
    on: frozenset[str] = BOTH


@dataclass
class Run:
    """One peer's run of a scenario."""

    bootstrap: str
    names: dict[str, str]
    #: Connection options after ``-b`` (SASL settings...).
    extra: Sequence[str] = ()
    lines: list[str] = field(default_factory=list)
    #: What the scenario's actions left running (closed by them).
    held: dict[str, Any] = field(default_factory=dict)
    #: Values of this peer replaced in every output (its paths...): text -> placeholder.
    own: dict[str, str] = field(default_factory=dict)


_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)?")
_EPOCH_MS = re.compile(r"(?<!\d)1[6-9]\d{11}(?!\d)")
_ADDRESS = re.compile(r"127\.0\.0\.1:\d+")
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
# A broker's refusal: Kafka's code and trafka's context are compared, the
# broker's own wording after them is not (brokerlite words its messages itself).
_REFUSAL = re.compile(r"(\[[A-Z_]+ \(-?\d+\)\] [^:\n]*)(: [^\n]*)?")
# The same, as commands explain it: "the broker refused to ... (CODE): context: reason",
# "... refused the change (CODE), nothing changed: reason", "could not upgrade
# (nothing changed): CODE: API: reason".
_EXPLAINED = re.compile(
    r"(refused to [^(\n]*\([A-Z_]+\): [^:\n]*|refused the change [^:\n]*"
    r"|could not [a-z]+ \(nothing changed\): [A-Z_]+: [A-Za-z]+): [^\n]*"
)


def normalise(text: str, run: Run) -> str:
    for value, placeholder in run.own.items():
        text = text.replace(value, placeholder)
    for address in run.bootstrap.split(","):
        text = text.replace(address, "HOST:PORT")
    text = _ADDRESS.sub("HOST:PORT", text)
    text = _TIME.sub("TIME", text)
    text = _UUID.sub("UUID", text)
    text = _REFUSAL.sub(r"\1", text)
    text = _EXPLAINED.sub(r"\1", text)
    return _EPOCH_MS.sub("EPOCH_MS", text)


def _json_or_none(text: str) -> Any:
    stripped = text.strip()
    if not stripped.startswith(("{", "[")):
        return None
    try:
        return json.loads(stripped)
    except json.JSONDecodeError:
        return None


def keep_ours(text: str, token: str) -> str:
    """A listing cut to the lines naming ``token``, a JSON listing to its entries."""
    data = _json_or_none(text)
    if data is not None:
        if isinstance(data, dict):
            data = {k: v for k, v in data.items() if token in k}
        else:
            data = [entry for entry in data if token in json.dumps(entry)]
        return json.dumps(data) + "\n"
    lines = text.splitlines()
    return realign(lines[:1] + [line for line in lines[1:] if token in line])


def realign(lines: list[str]) -> str:
    """A table's lines (cells two spaces or more apart) aligned on their own: the
    columns' widths no longer depend on the lines cut away (other tests' topics
    on the shared brokers)."""
    rows = [re.split(r" {2,}", line.rstrip()) for line in lines]
    widths: dict[int, int] = {}
    for row in rows:
        for i, cell in enumerate(row[:-1]):
            widths[i] = max(widths.get(i, 0), len(cell))
    out = [
        "  ".join(c.ljust(widths[i]) if i < len(row) - 1 else c for i, c in enumerate(row))
        for row in rows
    ]
    return "\n".join(out) + "\n"


def _mask_json(data: Any, keys: set[str]) -> Any:
    if isinstance(data, dict):
        return {k: "MASKED" if k in keys else _mask_json(v, keys) for k, v in data.items()}
    if isinstance(data, list):
        return [_mask_json(v, keys) for v in data]
    return data


def mask_columns(text: str, columns: Sequence[str], sets: Sequence[str] = ()) -> str:
    """``columns`` of every table in ``text`` (format_table's: a header line,
    cells two spaces or more apart) as ``MASKED``, the table aligned again; in
    JSON, the keys of those names (lower case, ``_`` for ``-``). The cells of
    ``sets``, comma-separated ids, sorted."""
    data = _json_or_none(text)
    if data is not None:
        keys = {c.lower().replace("-", "_") for c in columns}
        return json.dumps(_mask_json(data, keys)) + "\n"
    out: list[str] = []
    header: list[str] | None = None
    rows: list[list[str]] = []

    def flush() -> None:
        nonlocal header
        if header is not None:
            hidden = {i for i, name in enumerate(header) if name in columns}
            ordered = {i for i, name in enumerate(header) if name in sets}

            def cell_of(i: int, cell: str) -> str:
                if i in hidden and cell != "-":
                    return "MASKED"
                if i in ordered:
                    return ",".join(sorted(cell.split(","), key=lambda c: (len(c), c)))
                return cell

            masked = [[cell_of(i, cell) for i, cell in enumerate(row)] for row in rows]
            out.extend(format_table(header, masked).splitlines())
        header = None
        rows.clear()

    for line in text.splitlines():
        cells = re.split(r"\s{2,}", line.strip())
        if header is not None and len(cells) == len(header):
            rows.append(cells)
            continue
        flush()
        if any(c in cells for c in (*columns, *sets)) and all(
            c.isupper() or "-" in c for c in cells
        ):
            header = cells
        else:
            out.append(line)
    flush()
    return "\n".join(out) + ("\n" if text.endswith("\n") else "")


#: Verbs that only read: Kafka's brokers answer them from their metadata, which
#: follows the controller's changes a moment later (see settles).
_READS = {"list", "describe", "configs", "replica", "--list", "--describe"}

#: How long a read may take to show a change Kafka's controller has made.
SETTLE_SECONDS = 30.0


def settles(step: Step) -> bool:
    """Whether ``step`` only reads: the Kafka run asks again, until its deadline,
    when its answer is not yet brokerlite's. Kafka's controller answers a change
    (CreateTopics, AlterClientQuotas, CreateAcls...) once it has made it, and a
    broker shows it when the metadata reaches it: a read right after may come
    before. A difference that lasts past the deadline is a difference."""
    if step.settle is not None:
        return step.settle
    words = step.line.split()
    return (words[0] == "features" and len(words) == 1) or (len(words) > 1 and words[1] in _READS)


def run_step(step: Step, run: Run) -> str:
    """``step`` run once: its transcript entry."""
    argv = shlex.split(step.line.format(**run.names))
    stdin = None if step.stdin is None else step.stdin.format(**run.names)
    result = CliRunner().invoke(main, [*argv, "-b", run.bootstrap, *run.extra], input=stdin)
    out, err = result.stdout, result.stderr
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        err += f"\n[exception] {result.exception!r}"
    if step.ours:
        out = keep_ours(out, run.names["token"] if step.ours is True else str(step.ours))
    if step.mask or step.sets:
        out = mask_columns(out, step.mask, step.sets)
    for pattern in step.hide:
        out = re.sub(pattern, "HIDDEN", out)
    if step.sort:
        out = "".join(sorted(out.splitlines(keepends=True)))
    return (
        f"$ {step.line}\n[exit {result.exit_code}]\n{normalise(out, run)}"
        f"--- stderr\n{normalise(err, run)}"
    )


def run_steps(
    steps: Sequence[Step | Do], run: Run, version: str, reference: Sequence[str] = ()
) -> list[str]:
    """The steps run against ``run``'s broker: its transcript. With the
    ``reference`` transcript (brokerlite's), a read that does not match it yet
    is asked again until :data:`SETTLE_SECONDS` pass (:func:`settles`)."""
    for step in steps:
        if version not in step.on:
            continue
        if isinstance(step, Do):
            said = step.fn(run)
            if said is not None:
                run.lines.append(f"# {normalise(said, run)}")
            continue
        entry = run_step(step, run)
        at = len(run.lines)
        if reference and settles(step) and at < len(reference):
            deadline = time.monotonic() + SETTLE_SECONDS
            while entry != reference[at] and time.monotonic() < deadline:
                time.sleep(0.25)
                entry = run_step(step, run)
        run.lines.append(entry)
    return run.lines


@contextmanager
def in_thread(server: AbstractAsyncContextManager[Any]) -> Iterator[Any]:
    """``async with server`` on a trio loop of its own thread, for the block."""
    import trio

    ready: list[Any] = []
    started, stop = threading.Event(), threading.Event()
    failed: list[BaseException] = []

    async def serve() -> None:
        try:
            async with server as value:
                ready.append(value)
                started.set()
                await trio.to_thread.run_sync(stop.wait)
        except BaseException as exc:
            failed.append(exc)
            raise
        finally:
            started.set()

    thread = threading.Thread(target=trio.run, args=(serve,))
    thread.start()
    try:
        assert started.wait(120) and ready, f"the server did not start: {failed}"
        yield ready[0]
    finally:
        stop.set()
        thread.join(60)


def names(**more: str) -> dict[str, str]:
    """A scenario's names, the same on both peers (tables align alike), new per test."""
    token = uuid.uuid4().hex[:8]
    base = {"token": token, "t": f"cli-t-{token}", "g": f"cli-g-{token}"}
    return base | {key: value.format(token=token) for key, value in more.items()}


def differential(
    steps: Sequence[Step | Do],
    brokerlite: str,
    kafka: KafkaCluster,
    scenario_names: dict[str, str],
    extra: Sequence[str] = (),
    kafka_extra: Sequence[str] | None = None,
    kafka_at: str | None = None,
) -> None:
    """The steps run against brokerlite, then against ``kafka`` (at ``kafka_at``,
    another of its listeners, when given): the same transcript."""
    version = "3.9" if kafka.version.startswith("3.") else "4"
    ours = run_steps(steps, Run(brokerlite, dict(scenario_names), extra), version)
    theirs_extra = extra if kafka_extra is None else kafka_extra
    theirs = run_steps(
        steps,
        Run(kafka_at or kafka.bootstrap_servers, dict(scenario_names), theirs_extra),
        version,
        reference=ours,
    )
    if ours != theirs:
        diff = difflib.unified_diff(
            "\n".join(ours).splitlines(),
            "\n".join(theirs).splitlines(),
            "brokerlite",
            f"Kafka {kafka.version}",
            lineterm="",
        )
        pytest.fail("the transcripts differ:\n" + "\n".join(diff), pytrace=False)


# -- topics, produce, consume, groups -------------------------------------------------------------

LINES = "".join(f"key-{i % 4}:v{i}\n" for i in range(12))

BASICS = [
    Step("topics create {t} -p 2"),
    Step("topics create {t} -p 2"),
    Step("topics create {t} --if-not-exists"),
    Step("acls list"),
    Step("tokens describe"),
    Step("topics list", ours=True),
    Step("topics list --json", ours=True),
    Step("topics describe {t}"),
    Step("produce {t} -K :", stdin=LINES),
    Step("consume {t} -e -f '%p %o %k=%s\\n'", sort=True),
    Step("consume {t} -e -J -p 1 -o -2"),
    Step("consume {t} -e -G {g} -f '%p %o %k=%s\\n'", sort=True),
    Step(
        "consume {t} -e -G {g2} -X group.protocol=consumer -q -f '%p:%o\\n'",
        sort=True,
        on=frozenset({"4"}),
    ),
    Step("groups list", ours=True),
    Step("groups describe {g2}", on=frozenset({"4"})),
    Step("groups describe {g}"),
    Step("groups describe {g} --json"),
    Step("groups reset-offsets {g} -t {t} --to-earliest"),
    Step("groups reset-offsets {g} -t {t}:0 --to-offset 2 --execute"),
    Step("groups describe {g}"),
    Step("groups delete-offsets {g} -t {t}"),
    # Read from the start again: the offsets are gone. (On Kafka 3.9 the group
    # went with its last offsets too, as an empty group without offsets does there.)
    Step("consume {t} -e -G {g} -q -f '%p:%o\\n'", sort=True),
    Step("groups delete {g}"),
    Step("groups delete {g}"),
    Step("topics alter {t} -c retention.ms=3600000 -c cleanup.policy=compact"),
    Step("topics alter {t} -c retention.ms=banana"),
    Step("topics describe {t} --topics-with-overrides"),
    Step("topics add-partitions {t} -p 3"),
    Step("topics add-partitions {t} -p 2"),
    Step("topics delete {t}"),
    Step("topics delete {t}"),
    Step("topics delete {t} --if-exists"),
    Step("consume {t} -e"),
]


@pytest.mark.compat("CLI", "topics, produce, consume (-e, -G), groups: as on brokerlite")
def test_topics_produce_consume_groups(brokerlite_peer: str, kafka: KafkaCluster) -> None:
    differential(BASICS, brokerlite_peer, kafka, names(g2="cli-g2-{token}"))


# -- configs, transactions, log dirs, users, quotas, features ----------------------------------


class OpenTransaction:
    """A transactional producer with a transaction open on partition 0 of
    ``topic``, on a thread of its own, until :meth:`finish` commits it."""

    def __init__(self, bootstrap: str, topic: str, tid: str) -> None:
        self.ready = threading.Event()
        self.go = threading.Event()
        self.outcome = "not finished"
        self._thread = threading.Thread(target=anyio.run, args=(self._run, bootstrap, topic, tid))
        self._thread.start()
        assert self.ready.wait(60), "the transaction did not start within 60 s"

    async def _run(self, bootstrap: str, topic: str, tid: str) -> None:
        try:
            async with open_producer(bootstrap_servers=bootstrap, transactional_id=tid) as p:
                await p.init_transactions()
                p.begin_transaction()
                await p.send(topic, b"open", partition=0)
                await p.flush()
                self.ready.set()
                await anyio.to_thread.run_sync(self.go.wait)
                try:
                    await p.commit_transaction()
                    self.outcome = "committed"
                except ProducerFencedError:
                    # ``transactions fence`` retries until the id has its next
                    # epoch, as Kafka's Admin.fenceProducers: the old epoch is
                    # PRODUCER_FENCED then, in transaction version 1 and 2 alike
                    # (tests/brokerlite/test_differential_kafka4.py).
                    self.outcome = "fenced"
        except BaseException as exc:
            self.outcome = f"failed: {exc!r}"
            raise
        finally:
            self.ready.set()

    def finish(self) -> str:
        self.go.set()
        self._thread.join(60)
        return f"the producer's commit: {self.outcome}"


def begin(run: Run) -> None:
    run.held["txn"] = OpenTransaction(run.bootstrap, run.names["t"], run.names["x"])


def finish(run: Run) -> str:
    txn: OpenTransaction = run.held.pop("txn")
    return txn.finish()


def settled(run: Run) -> str:
    """Waits until the coordinator has ended ``{x}``'s transaction: Kafka writes
    the markers of an abort (PrepareAbort) before it is complete (CompleteAbort),
    and says PrepareAbort meanwhile, for a second or more on a busy machine."""

    async def wait() -> str:
        with anyio.fail_after(60):
            async with open_admin(bootstrap_servers=run.bootstrap) as admin:
                while True:
                    tid = run.names["x"]
                    state = (await admin.describe_transactions([tid]))[tid].state
                    if not state.startswith("Prepare"):
                        return f"the transaction is {state}"
                    await anyio.sleep(0.2)

    return anyio.run(wait)


def log_dir(run: Run) -> None:
    """The peer's log directory, as ``{dir}``."""
    done = CliRunner().invoke(
        main, ["log-dirs", "describe", "--json", "--topic", run.names["t"], "-b", run.bootstrap]
    )
    (broker,) = json.loads(done.stdout)["brokers"]
    (entry,) = broker["logDirs"]
    run.names["dir"] = entry["logDir"]
    run.own[entry["logDir"]] = "LOG-DIR"


ADMIN = [
    Step("topics create {t} -p 2 -c retention.ms=86400000"),
    Step("topics describe {t} --topics-with-overrides"),
    Step("topics alter {t} --delete-config retention.ms -c max.message.bytes=2048"),
    Step("topics alter {t} -c no.such.config=1"),
    Step("topics alter {t}x -c retention.ms=1"),
    Step("topics describe {t}x"),
    # Transactions: one open on partition 0 until the end.
    Do(begin),
    Step("transactions list", ours=True, mask=("PRODUCER-ID",)),
    Step("transactions list --state Ongoing --json", ours=True, mask=("PRODUCER-ID",)),
    Step("transactions describe {x}", mask=("PRODUCER-ID", "START-TIME-MS", "DURATION-MS")),
    Step("transactions describe-producers {t}", mask=("PRODUCER-ID", "LAST-TIMESTAMP")),
    Step("transactions find-hanging -t {t} --max-transaction-timeout 0"),
    Step("transactions abort -t {t} -p 1 --start-offset 0"),
    Step("transactions fence {x}"),
    # The coordinator ends the transaction with its markers (PrepareAbort, then
    # CompleteAbort): described once the producer was told it is fenced.
    Do(finish),
    Do(settled),
    Step("transactions describe {x} --json", mask=("PRODUCER-ID", "TRANSACTION-START-TIME-MS")),
    Step("transactions describe-producers {t}", mask=("PRODUCER-ID", "LAST-TIMESTAMP")),
    Step("transactions abort -t {t} -p 1 --producer-id 999999 --producer-epoch 0"),
    Step("transactions describe {x}y"),
    Step("transactions describe-producers {t}y"),
    # Log directories: the peer's own one is {dir}.
    Do(log_dir),
    Step("log-dirs describe --topic {t}", mask=("LOG-DIR", "SIZE")),
    Step("log-dirs replica {t} 0 1", mask=("SIZE",)),
    Step("log-dirs move {t} 0 1 {dir}"),
    Step("log-dirs move {t} 0 1 /nowhere/{token}"),
    Step("log-dirs move {t} 7 1 {dir}"),
    # SCRAM users.
    Step("users set-password {u} --password-stdin --iterations 8192", stdin="secret\n"),
    Step("users set-password {u} -M SCRAM-SHA-256 --password-stdin --iterations 100", stdin="x\n"),
    Step("users describe {u}"),
    Step("users list --json", ours=True),
    Step("users delete {u} -M SCRAM-SHA-512"),
    Step("users describe {u} --json"),
    Step("users delete {u}"),
    Step("users describe {u}"),
    # Client quotas.
    Step("quotas alter --user {u} --add-config producer_byte_rate=1048576,consumer_byte_rate=2048"),
    Step("quotas alter --user {u} --client-id {c} --add-config request_percentage=25"),
    Step("quotas alter --user {u} --add-config connection_creation_rate=5"),
    Step("quotas alter --client-id {c} --add-config producer_byte_rate=1.5 --dry-run"),
    Step("quotas describe --user {u}"),
    Step("quotas describe --user {u} --strict --json"),
    Step("quotas alter --user {u} --delete-config consumer_byte_rate"),
    Step("quotas alter --user {u} --delete-config producer_byte_rate"),
    Step("quotas alter --user {u} --client-id {c} --delete-config request_percentage"),
    Step("quotas describe --user {u}"),
    Step("topics delete {t}"),
]


@pytest.mark.compat("CLI", "topic configs, transactions, log-dirs, users, quotas: as on brokerlite")
def test_configs_transactions_log_dirs_users_quotas(
    brokerlite_peer: str, kafka: KafkaCluster
) -> None:
    differential(
        ADMIN,
        brokerlite_peer,
        kafka,
        names(x="cli-x-{token}", u="cli-u-{token}", c="cli-c-{token}"),
    )


# -- share groups, group configs, client metrics, features -------------------------------------

ON_4 = frozenset({"4"})

GROUPS_4 = [
    Step("topics create {t} -p 1"),
    Step("produce {t}", stdin="".join(f"job-{i}\n" for i in range(5))),
    Step("groups set-config {s} share.auto.offset.reset=earliest"),
    Step("groups set-config {s} share.record.lock.duration.ms=10"),
    Step("groups configs {s} --overrides"),
    Step("share-consume {t} -G {s} -c 5 --ack release -J", mask=("TIMESTAMP",)),
    Step("share-consume {t} -G {s} -c 2 -f json", mask=("TIMESTAMP",)),
    Step("groups list -t share", ours=True),
    # Kafka's share coordinator bumps the group epoch more often than brokerlite's
    # (docs/cli.md, "The CLI against Apache Kafka").
    Step("groups describe {s}", hide=(r"(Group|Assignment)Epoch: \d+",)),
    Step("groups describe {s} --json", mask=("GROUP-EPOCH", "ASSIGNMENT-EPOCH")),
    Step("groups reset-offsets {s} -t {t} --to-offset 1"),
    Step("groups reset-offsets {s} -t {t} --to-earliest --execute"),
    Step("share-consume {t} -G {s} -c 5 -q"),
    Step("groups delete-offsets {s} -t {t}"),
    Step("groups delete-offsets {s} -t {t}"),
    Step("groups delete {s}"),
    # Client-metrics subscriptions (KIP-714).
    Step("client-metrics --alter --name {m} --metrics org.apache.kafka.producer. --interval 1000"),
    Step("client-metrics --describe --name {m}"),
    Step("client-metrics --list", ours=True),
    Step("client-metrics --alter --name {m} --interval 10"),
    Step("client-metrics --delete --name {m}"),
    Step("topics delete {t}"),
]


@pytest.mark.compat("CLI", "share groups, share group configs, client-metrics: as on brokerlite")
def test_share_groups_group_configs_client_metrics(
    brokerlite_peer: str, kafka4: KafkaCluster
) -> None:
    differential(GROUPS_4, brokerlite_peer, kafka4, names(s="cli-s-{token}", m="cli-m-{token}"))


FEATURES_4 = [
    # brokerlite has the features it implements: group.version is one of them.
    Step("features", ours="group.version", mask=("EPOCH",)),
    Step("features upgrade --feature group.version=1 --dry-run"),
    Step("features upgrade --feature group.version=7"),
    Step("features downgrade --feature group.version=0 --dry-run"),
    Step("features disable --feature no.such.feature --dry-run"),
]


def test_features_of_a_zookeeper_broker(kafka3: KafkaCluster) -> None:
    """Kafka 3.9 on ZooKeeper has KIP-584 (2.7) but reports no feature: the
    command says so without blaming the broker's age."""
    done = CliRunner().invoke(main, ["features", "-b", kafka3.bootstrap_servers])
    assert (done.exit_code, done.stdout) == (0, "")
    assert done.stderr == "the broker reports no features (Kafka before 2.7, or 3.x on ZooKeeper)\n"


CONSUMER_GROUP_CONFIGS = [
    Step("groups set-config {g} consumer.session.timeout.ms=50000"),
    # Not asked again: the difference is known, and lasts.
    Step("groups configs {g} --overrides --json", settle=False),
    Step("groups set-config {g} --delete consumer.session.timeout.ms"),
]


@pytest.mark.compat("CLI", "features: as on brokerlite")
def test_features(brokerlite_peer: str, kafka4: KafkaCluster) -> None:
    differential(FEATURES_4, brokerlite_peer, kafka4, names())


@pytest.mark.compat("CLI", "consumer group configs (KIP-848): as on brokerlite")
def test_consumer_group_configs(brokerlite_peer: str, kafka4: KafkaCluster) -> None:
    differential(CONSUMER_GROUP_CONFIGS, brokerlite_peer, kafka4, names())


# -- ACLs and delegation tokens (a Kafka node of the module's own) ------------------------------

USERS = {"admin": "admin-pw", "bob": "bob-pw"}


@pytest.fixture(scope="module")
def secured_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    """One Kafka 4.x node for the ACL and the token scenarios, with what each
    needs: Kafka's StandardAuthorizer (anonymous clients and ``admin`` super
    users), a SASL_PLAINTEXT listener (PLAIN, SCRAM-SHA-256) beside the plain
    one, and ``delegation.token.secret.key``. One node start (two JVMs) for
    both: the token scenario's client is ``admin``, a super user, whom Kafka
    authorizes every token call a broker without an authorizer allows (KafkaApis
    checks DESCRIBE on each token, or DESCRIBE_TOKENS on its owner), and the
    ACL scenario removes every ACL it adds."""
    from trafka.brokerlite.cli import STANDARD_AUTHORIZER

    if os.environ.get(SKIP_ENV) == "1":
        pytest.skip(f"{SKIP_ENV}=1: Apache Kafka tests skipped")
    why = missing("kafka", KAFKA_4)
    if why is not None:
        pytest.fail(why, pytrace=False)
    users = " ".join(f'user_{name}="{password}"' for name, password in USERS.items())
    jaas = (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="admin" password="{USERS["admin"]}" {users};'
    )
    kafka = KafkaCluster(
        KAFKA_4,
        tmp_path_factory.mktemp("cli-kafka-secured"),
        # The first listener is the one readiness is checked on, in plain text.
        listeners={"PLAINTEXT": "PLAINTEXT", "SASL_PLAINTEXT": "SASL_PLAINTEXT"},
        config={
            "authorizer.class.name": STANDARD_AUTHORIZER,
            "super.users": "User:ANONYMOUS;User:admin",
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas,
            "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": (
                "org.apache.kafka.common.security.scram.ScramLoginModule required;"
            ),
            "delegation.token.secret.key": "token-secret-" + uuid.uuid4().hex,
        },
    )
    with kafka:
        yield kafka


ACLS = [
    Step("acls list"),
    Step(
        "acls add --allow --principal User:alice --operation read --operation Describe --topic {t}"
    ),
    Step("acls add --allow --principal User:alice --operation read --group {g}"),
    Step(
        "acls add --deny --principal User:* --operation write --topic secret- --prefixed"
        " --host 10.0.0.1"
    ),
    Step("acls add --allow --principal User:bob --operation idempotent-write --cluster"),
    Step(
        "acls add --allow --principal User:bob --operation write --transactional-id tx- --prefixed"
    ),
    Step("acls add --allow --principal User:bob --operation all --topic *"),
    Step("acls list"),
    Step("acls list --json"),
    Step("acls list --topic secret-plans --pattern-type match"),
    Step("acls list --topic {t} --pattern-type match"),
    Step("acls list --principal User:alice"),
    Step("acls list --pattern-type prefixed --deny"),
    Step("acls remove --principal User:alice --topic {t} --dry-run"),
    Step("acls remove --principal User:alice --topic {t}"),
    Step("acls remove --operation all --topic *"),
    Step("acls remove"),
    Step("acls remove --all --json"),
    Step("acls list"),
    Step("acls add --allow --principal alice --operation read --topic {t}"),
    Step("acls add --allow --principal User:alice --operation fly --topic {t}"),
]


@pytest.mark.compat("CLI", "acls (StandardAuthorizer): as on brokerlite", peer="Kafka 4.x")
@pytest.mark.slow
@pytest.mark.kafka
def test_acls(tmp_path: Path, secured_kafka: KafkaCluster) -> None:
    """With Kafka's StandardAuthorizer on both (anonymous clients super users)."""
    from trafka.brokerlite import broker_in_thread
    from trafka.brokerlite.cli import STANDARD_AUTHORIZER

    kafka = secured_kafka
    with broker_in_thread(
        port=0,
        host="127.0.0.1",
        data_dir=tmp_path / "brokerlite",
        authorizer_class_name=STANDARD_AUTHORIZER,
        super_users=("User:ANONYMOUS",),
    ) as brokerlite:
        differential(ACLS, brokerlite.bootstrap_servers, kafka, names())


# -- reassign, elect-leaders (three brokers) -----------------------------------------------------


def plan_files(run: Run) -> None:
    """The scenario's JSON files, in a folder of the run's own: ``{topics}``,
    ``{plan}`` (partition 0 onto every broker, partition 1 too, 3 preferred)."""
    folder = Path(run.names["tmp"]) / run.bootstrap.replace(":", "-").replace(",", "_")
    folder.mkdir(parents=True)
    topic = run.names["t"]
    (folder / "topics.json").write_text(json.dumps({"version": 1, "topics": [{"topic": topic}]}))
    replicas = {0: [1, 2, 3], 1: [3, 1, 2]}
    plan = [{"topic": topic, "partition": p, "replicas": r} for p, r in replicas.items()]
    (folder / "plan.json").write_text(json.dumps({"version": 1, "partitions": plan}))
    run.names |= {"topics": str(folder / "topics.json"), "plan": str(folder / "plan.json")}
    run.own[str(folder)] = "FOLDER"


async def served(admin: Any, topic: str, partitions: int) -> None:
    """Waits until the brokers serve ``topic``'s partitions (a ListOffsets of
    each succeeds): Kafka's CreateTopics answers before they all do."""
    while True:
        try:
            await admin.list_offsets(
                {TopicPartition(topic, p): "latest" for p in range(partitions)}
            )
            return
        except KafkaError as exc:
            if exc.code not in (
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                ErrorCode.NOT_LEADER_OR_FOLLOWER,
                ErrorCode.LEADER_NOT_AVAILABLE,
            ):
                raise
            await anyio.sleep(0.2)


async def settle(admin: Any, topic: str, replicas: list[list[int]], leaders: list[int]) -> str:
    """Waits until ``topic``'s partitions have ``replicas``, all in sync, led by
    ``leaders``, and no reassignment is under way, as two answers in a row say
    (a broker's metadata may lag the controller's)."""
    seen = 0
    while seen < 2:
        described = (await admin.describe_topics([topic]))[topic]
        now = [(list(p.replicas), sorted(p.isr), p.leader) for p in described.partitions]
        done = now == [(r, sorted(r), lead) for r, lead in zip(replicas, leaders, strict=True)]
        if done and not await admin.list_partition_reassignments():
            seen += 1
        else:
            seen = 0
            await anyio.sleep(0.2)
    return f"replicas {replicas}, in sync, leaders {leaders}"


def place(run: Run) -> str:
    """Partition 0 on broker 1, partition 1 on broker 2 (Kafka places new topics
    from a random broker), once the new partitions are served everywhere."""
    topic = run.names["t"]

    async def move() -> str:
        with anyio.fail_after(60):
            async with open_admin(bootstrap_servers=run.bootstrap) as admin:
                await served(admin, topic, 2)
                await admin.alter_partition_reassignments({(topic, 0): [1], (topic, 1): [2]})
                return await settle(admin, topic, [[1], [2]], [1, 2])

    return anyio.run(move)


def in_sync(run: Run) -> str:
    """Waits until both partitions have every broker in their ISR."""
    topic = run.names["t"]

    async def wait() -> str:
        with anyio.fail_after(60):
            async with open_admin(bootstrap_servers=run.bootstrap) as admin:
                # The leaders stay: each is among its partition's new replicas.
                return await settle(admin, topic, [[1, 2, 3], [3, 1, 2]], [1, 2])

    return anyio.run(wait)


REASSIGN = [
    Step("topics create {t} -p 2 -r 1"),
    Do(plan_files),
    Do(place),
    Step("topics describe {t}", mask=("SIZE",), sets=("ISR",)),
    Step(
        "reassign generate --topics-to-move-json-file {topics} --broker-list 1,2,3",
        # trafka's proposal starts from a random broker, as Kafka's tool does.
        hide=(r"(?s)(?<=Proposed partition reassignment configuration\n).*",),
    ),
    Step("reassign execute --reassignment-json-file {plan}"),
    Do(in_sync),
    Step("reassign verify --reassignment-json-file {plan}"),
    Step("topics describe {t}", mask=("SIZE",), sets=("ISR",)),
    Step("topics describe {t} --under-replicated-partitions"),
    Step("elect-leaders --topic {t} --partition 0"),
    Step("elect-leaders --topic {t}"),
    Step("topics describe {t}", mask=("SIZE",), sets=("ISR",)),
    Step("elect-leaders --topic {t} --json"),
    Step("elect-leaders --topic {t} --partition 7"),
    Step("elect-leaders --topic {t} --election-type unclean"),
    Step("log-dirs describe --topic {t} --broker 3", mask=("LOG-DIR", "SIZE")),
    Step("topics delete {t}"),
]


@pytest.mark.compat("CLI", "reassign, elect-leaders (3 brokers): as on brokerlite")
@pytest.mark.slow
def test_reassign_and_elect_leaders(tmp_path: Path, zk: str, kafka4_cluster: KafkaCluster) -> None:
    """On three brokers: brokerlite's (in-process, on ZooKeeper) and Kafka 4.x's."""
    from trafka.brokerlite.dev.local_cluster import serve_cluster

    with in_thread(serve_cluster(3, zookeeper_connect=zk)) as cluster:
        scenario = names(tmp=str(tmp_path))
        differential(REASSIGN, cluster.bootstrap_servers, kafka4_cluster, scenario)


# -- delegation tokens (a SASL listener and a token secret) --------------------------------------


def as_user(user: str) -> tuple[str, ...]:
    sasl = ("security.protocol=SASL_PLAINTEXT", "sasl.mechanism=PLAIN")
    login = (f"sasl.username={user}", f"sasl.password={USERS[user]}")
    return tuple(arg for setting in (*sasl, *login) for arg in ("-X", setting))


def new_token(run: Run) -> str:
    """A token of admin's with bob its renewer: ``{hmac}``, and its id and HMAC
    as placeholders in the outputs."""
    done = CliRunner().invoke(
        main,
        ["tokens", "create", "--renewer", "User:bob", "--json", "-b", run.bootstrap, *run.extra],
    )
    assert done.exit_code == 0, done.output
    token = json.loads(done.stdout)
    run.names["hmac"] = token["hmac"]
    run.own |= {token["token_id"]: "TOKEN-ID", token["hmac"]: "HMAC"}
    run.names["token_id"] = token["token_id"]
    wait_listed(run, True)
    return f"created a token for {token['owner']}, renewers {token['renewers']}"


def wait_listed(run: Run, present: bool) -> None:
    """Waits until ``tokens describe`` lists ``{token_id}`` (or no longer does).
    Kafka 4.x answers a token's creation and expiry once its controller has
    them; its broker describes (and renews) the token when the metadata reaches it."""
    for _ in range(150):
        listed = CliRunner().invoke(
            main, ["tokens", "describe", "--json", "-b", run.bootstrap, *run.extra]
        )
        if (run.names["token_id"] in listed.stdout) == present:
            return
        time.sleep(0.2)
    raise AssertionError(f"the broker's tokens did not change within 30 s: {listed.output}")


def gone(run: Run) -> None:
    wait_listed(run, False)


TOKENS = [
    Step("tokens describe"),
    Do(new_token),
    Step("tokens describe", mask=("TOKEN-ID",)),
    Step("tokens describe --show-hmac --json", mask=("TOKEN-ID", "HMAC")),
    Step("tokens describe --owner-principal User:bob"),
    Step("tokens renew --hmac-stdin --renew-time-period 600000", stdin="{hmac}\n"),
    Step("tokens renew --hmac-stdin --json", stdin="{hmac}\n"),
    Step("tokens expire --hmac-stdin --expiry-time-period 600000", stdin="{hmac}\n"),
    Step("tokens expire --hmac-stdin", stdin="{hmac}\n"),
    Do(gone),
    Step("tokens describe"),
    Step("tokens renew --hmac-stdin", stdin="{hmac}\n"),
    Step("tokens expire --hmac-stdin", stdin="bm90IGEgdG9rZW4=\n"),
    Step("tokens renew --hmac not-base64!"),
    Step(
        "tokens create --max-life-time-period 3600000 --renewer bob --json",
        mask=("TOKEN-ID", "HMAC"),
    ),
]


@pytest.mark.compat("CLI", "delegation tokens (SASL): as on brokerlite", peer="Kafka 4.x")
@pytest.mark.slow
@pytest.mark.kafka
def test_delegation_tokens(tmp_path: Path, secured_kafka: KafkaCluster) -> None:
    """On a SASL PLAIN listener, with delegation.token.secret.key set."""
    from trafka.brokerlite import broker_in_thread

    kafka = secured_kafka
    secret = kafka.config["delegation.token.secret.key"]
    with broker_in_thread(
        port=0,
        host="127.0.0.1",
        data_dir=tmp_path / "brokerlite",
        security_protocol="SASL_PLAINTEXT",
        sasl_users=USERS,
        delegation_token_secret_key=secret,
    ) as brokerlite:
        sasl = f"{kafka.host}:{kafka.node(1).ports['SASL_PLAINTEXT']}"
        differential(
            TOKENS,
            brokerlite.bootstrap_servers,
            kafka,
            names(),
            extra=as_user("admin"),
            kafka_at=sasl,
        )
