"""The record-encryption filter run as operators run it (issue #83, items 1
and 7): configured in ``trafka proxy``'s file, every problem of its table
reported at once by ``--check-config`` (an unknown name with the nearest known
one), new topic rules taken on SIGHUP, and a proxy killed with SIGKILL and
started again losing and doubling nothing an idempotent or a transactional
producer sent through it, across a KEK rotation (a read_committed consumer
through the new proxy reads each record once, in order, those wrapped by the
old version and by the new).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest
from click.testing import CliRunner
from encryption_helpers import frames, key_file, once_in_order, plaintext_in_files, read_in_order
from proxy_helpers import create, free_port, fresh, placement, sdk_reports

from trafka.brokerlite import RunningBroker
from trafka.brokerlite.server import broker_in_thread
from trafka.proxy import proxy_in_thread
from trafka.proxy.cli import command
from trafka.proxy.encryption import add_key_version
from trafka.proxy.reload import load
from trafka.proxy.settings import Sources

pytestmark = pytest.mark.timeout(180)

USE = "trafka.proxy.encryption:RecordEncryption"
# librdkafka reconnects to the restarted proxy soon (its backoff grows to 10 s by default).
_RECONNECT = {"reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 250}


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("encryption-ops")


@pytest.fixture(scope="module")
def broker(data: Path) -> Iterator[RunningBroker]:
    with broker_in_thread(port=0, host="127.0.0.1", data_dir=data) as running:
        yield running


def _until(
    what: str, condition: Callable[[], bool], proc: subprocess.Popen[bytes], log: Path
) -> None:
    deadline = time.monotonic() + 60
    while not condition():
        assert proc.poll() is None, f"the proxy ended: {log.read_text()}"
        assert time.monotonic() < deadline, f"no {what}: {log.read_text()}"
        time.sleep(0.05)


def _toml(path: Path, upstream: str, keys: Path, topics: dict[str, str], **more: Any) -> None:
    """The proxy's file; ``more`` goes to its top level (``journal``...)."""
    rules = ", ".join(f'"{k}" = "{v}"' for k, v in topics.items())
    extra = "".join(f"{k} = {v!r}\n".replace("'", '"') for k, v in more.items())
    path.write_text(
        f'upstream = "{upstream}"\n'
        f"{extra}"
        "[[filter]]\n"
        f'use = "{USE}"\n'
        "[filter.settings]\n"
        'kms = "keyfile"\n'
        f'key_file = "{keys}"\n'
        f"topics = {{ {rules} }}\n"
    )


def test_check_config_names_every_problem_of_the_filters_table(tmp_path: Path) -> None:
    keys = key_file(tmp_path, "orders")
    toml = tmp_path / "proxy.toml"
    toml.write_text(
        'upstream = "127.0.0.1:9092"\n'
        "[[filter]]\n"
        f'use = "{USE}"\n'
        "[filter.settings]\n"
        'kms = "keyfile"\n'
        f'key_file = "{keys}"\n'
        'topics = { "orders-.*" = "orders", "((" = "orders", "pay-.*" = "payments" }\n'
        "dek_max_record = 10\n"
        "dek_max_age_s = -1\n"
    )
    result = CliRunner().invoke(
        command, ["--config", str(toml), "--check-config"], catch_exceptions=False
    )
    assert result.exit_code == 1, result.output
    problems = [line[4:] for line in result.output.splitlines() if line.startswith("  - ")]
    where = f"{toml}: filter: filter {USE}: "
    (pattern,) = [p for p in problems if "((" in p]
    assert pattern.startswith(where + "topics: '((' is not a regular expression")
    assert sorted(set(problems) - {pattern}) == sorted(
        [
            where + "unknown setting 'dek_max_record' (did you mean dek_max_records?)",
            where + "dek_max_age_s: -1 is not a positive number",
            where + f"topics: KEK 'payments' is not in the key file {keys}",
        ]
    )
    toml.write_text(
        toml.read_text()
        .replace('"((" = "orders", ', "")
        .replace("dek_max_record ", "dek_max_records ")
        .replace("= -1", "= 60")
    )
    toml.write_text(toml.read_text().replace('"payments"', '"orders"'))
    result = CliRunner().invoke(
        command, ["--config", str(toml), "--check-config"], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output


def _produce(
    servers: str, topic: str, values: list[bytes], then: Callable[[int], None] | None = None
) -> None:
    """An idempotent confluent-kafka producer sending ``values`` (keys k0..k6) in
    order; ``then(n)`` runs once ``n`` of them are delivered (half of them)."""
    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": servers,
            "enable.idempotence": True,
            "linger.ms": 5,
            "message.timeout.ms": 60000,
            **_RECONNECT,
        }
    )
    failures: list[Any] = []
    delivered = [0]

    def report(err: Any, _msg: Any) -> None:
        if err:
            failures.append(err)
        delivered[0] += 1

    half = len(values) // 2
    for i, value in enumerate(values):
        producer.produce(topic, value=value, key=b"k%d" % (i % 7), on_delivery=report)
        if i == half and then is not None:
            while delivered[0] < half // 2:
                producer.poll(0.05)
            then(delivered[0])
    assert producer.flush(60) == 0
    assert failures == []


def _transactions(
    servers: str, topic: str, rounds: int, kill_at: int, kill: Callable[[int], None]
) -> list[bytes]:
    """confluent-kafka's transactional producer: ``rounds`` transactions of 50
    records; before transaction ``kill_at`` commits, ``kill(0)``. A transaction
    the broker made abortable is aborted and sent again, as Kafka's guide
    says. The values committed."""
    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": servers,
            "transactional.id": fresh("tx"),
            "linger.ms": 5,
            **_RECONNECT,
        }
    )
    producer.init_transactions(60)
    committed: list[bytes] = []
    for t in range(rounds):
        values = [b"SECRET-t%d-%d" % (t, i) for i in range(50)]
        while True:
            producer.begin_transaction()
            for i, value in enumerate(values):
                producer.produce(topic, value=value, key=b"k%d" % (i % 7))
            if t == kill_at:
                kill(0)
                kill_at = -1
            try:
                producer.commit_transaction(60)
                break
            except confluent_kafka.KafkaException as exc:
                if not exc.args[0].txn_requires_abort():
                    raise
                producer.abort_transaction(60)
        committed += values
    return committed


def test_sighup_takes_new_topics_and_a_sigkilled_proxy_restarted_loses_and_doubles_nothing(
    broker: RunningBroker, data: Path, tmp_path: Path
) -> None:
    keys = key_file(tmp_path, "orders")
    toml = tmp_path / "proxy.toml"
    first, second, third = fresh("ops-a"), fresh("ops-b"), fresh("ops-t")
    for topic in (first, second, third):
        create(broker.bootstrap_servers, topic, 3)
    # The proxy routes by key (its default): without a journal a batch whose answer
    # the kill lost is placed anew when retried, and can be written twice
    # (docs/proxy.md, "A restart of the proxy, without a journal"); with one, never.
    journal = {"journal": str(tmp_path / "journal")}
    _toml(toml, broker.bootstrap_servers, keys, {first: "orders"}, **journal)
    port = free_port()
    servers = f"127.0.0.1:{port}"
    log = tmp_path / "proxy.log"
    cmd = [
        sys.executable,
        "-m",
        "trafka.tools.cli",
        "proxy",
        "--config",
        str(toml),
        "--listen",
        servers,
    ]
    procs: list[subprocess.Popen[bytes]] = []

    def start() -> subprocess.Popen[bytes]:
        starts = log.read_bytes().count(b"proxy on") if log.exists() else 0
        with log.open("ab") as out:
            proc = subprocess.Popen(
                cmd, stdout=out, stderr=subprocess.STDOUT, env=os.environ.copy()
            )
        procs.append(proc)
        _until("start", lambda: log.read_bytes().count(b"proxy on") > starts, proc, log)
        return proc

    try:
        proc = start()
        # SIGHUP: a second topic's rule taken without a restart.
        rules = {first: "orders", second: "orders", third: "orders"}
        _toml(toml, broker.bootstrap_servers, keys, rules, **journal)
        proc.send_signal(signal.SIGHUP)
        _until(
            "reload",
            lambda: b"SIGHUP: configuration reloaded (filter)" in log.read_bytes(),
            proc,
            log,
        )
        _produce(servers, second, [b"SECRET-b-%d" % i for i in range(50)])
        assert {k for k, _ in frames(placement(broker.bootstrap_servers, second, 3))} == {"orders"}

        # SIGKILL half-way through a producer's records, then a new proxy on the same ports.
        def kill_and_restart(_: int) -> None:
            procs[-1].kill()
            procs[-1].wait()
            start()

        values = [b"SECRET-a-%d" % i for i in range(200)]
        _produce(servers, first, values, then=kill_and_restart)
        once_in_order(read_in_order(servers, first, 3), values)
        assert len(placement(broker.bootstrap_servers, first, 3)) == len(values)

        # A KEK rotation (issue #83, "Done when": a kill -9 and a key rotation),
        # then SIGKILL in the middle of a transaction: the proxy killed holds a
        # DEK of the old version, the one started after it wraps with the new;
        # committed ones read once, in order, and the records of before both too.
        version = add_key_version(keys, "orders")
        committed = _transactions(servers, third, 3, kill_at=1, kill=kill_and_restart)
        once_in_order(read_in_order(servers, third, 3), committed)
        once_in_order(read_in_order(servers, first, 3), values)
        straight = placement(broker.bootstrap_servers, third, 3, isolation_level="read_committed")
        assert {v for _, v in frames(straight)} == {str(version - 1), str(version)}
        assert plaintext_in_files(data, b"SECRET-") == []
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def test_the_pages_example_runs(broker: RunningBroker, tmp_path: Path) -> None:
    """docs/proxy.md's "Record encryption" example, with its key file made by
    the command the page gives, passes ``--check-config``; served (its
    upstream and listener this test's), an ``orders`` record and a
    ``payments-eu`` one reach the broker as frames of their KEKs and read
    back as plaintext through it."""
    page = (Path(__file__).parents[2] / "docs" / "proxy.md").read_text()
    section = page[page.index("## Record encryption") :]
    example = section.split("```toml\n", 1)[1].split("```", 1)[0]
    keys = tmp_path / "keks.toml"
    for kek in ("orders", "payments"):
        done = subprocess.run(
            [sys.executable, "-m", "trafka.proxy.encryption.kms", str(keys), kek],
            capture_output=True,
            text=True,
            check=True,
        )
        assert done.stdout == f"{kek}: version 1 added\n"
    toml = tmp_path / "proxy.toml"
    toml.write_text(example.replace("/etc/trafka/keks.toml", str(keys)))
    result = CliRunner().invoke(
        command, ["--config", str(toml), "--check-config"], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    for was, now in (
        ('"kafka-1.internal:9092"', f'"{broker.bootstrap_servers}"'),
        ('"0.0.0.0:19092"', '"127.0.0.1:0"'),
        ('"proxy.internal"', '"127.0.0.1"'),
    ):
        assert was in example, was
        example = example.replace(was, now)
    toml.write_text(example.replace("/etc/trafka/keks.toml", str(keys)))
    config = load(Sources(path=str(toml))).config
    # The example's topic names, made unique on this module's broker.
    suffix = fresh("")
    orders, payments = "orders", f"payments-eu{suffix}"
    for topic in (orders, payments):
        create(broker.bootstrap_servers, topic, 1)
    with proxy_in_thread(config) as px:
        for topic in (orders, payments):
            sdk_reports(px.bootstrap_servers, topic, [(b"SECRET-docs-" + topic.encode(), b"k")])
            got = read_in_order(px.bootstrap_servers, topic, 1)[0]
            assert got[-1] == b"SECRET-docs-" + topic.encode()
    assert [k for k, _ in frames(placement(broker.bootstrap_servers, orders, 1))][-1:] == ["orders"]
    assert [k for k, _ in frames(placement(broker.bootstrap_servers, payments, 1))] == ["payments"]


def test_a_filter_never_given_settings_refuses_to_start(broker: RunningBroker) -> None:
    """Never plaintext because the settings were forgotten."""
    from trafka.proxy.encryption import RecordEncryption

    with (
        pytest.raises(ValueError, match="no settings"),
        proxy_in_thread(
            upstream=(broker.bootstrap_servers,), port=0, filters=(RecordEncryption(),)
        ),
    ):
        pass
