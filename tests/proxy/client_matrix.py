"""Kafka's Java producer, confluent-kafka and trafka's SDK through the proxy's
TLS features (tenants by certificate, mutual TLS, one port by SNI), plain,
idempotent and transactional (issue #83, "Done when"): what those tests share.

* :func:`java_producer`: tests/interop/java/ReportingProducer's command
  (compiled once with the rest of tests/interop/java, tests/java_harness.py),
  run once for all three modes by :func:`java_sends` with client properties
  (``ssl.keystore.type=PEM``... KIP-651) as trailing ``NAME=VALUE`` arguments.
* :func:`sdk_and_confluent_sends`: both Python clients, each mode, keyed as
  the Java producer keys (``key-<i % 29>``, librdkafka's CRC32 partition).
* :func:`read_committed`: a read_committed consumer (trafka's SDK) reading
  until it has every value sent (Kafka writes a transaction's markers after
  it answers EndTxn), then to the partitions' ends.
* :func:`in_own_hosts`: a client run as a process whose /etc/hosts is a file
  of the test's (a private mount namespace, util-linux ``unshare``), for the
  clients that resolve names in C (librdkafka) or in the JDK (17: no hosts
  file property).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
from encryption_helpers import confluent_reports
from proxy_helpers import Report, sdk_reports

from trafka.sdk import TopicPartition, open_consumer

#: Every mode of ReportingProducer, in one JVM.
MODES = ("plain", "idempotent", "transactional")
#: How many keys the Java producer cycles through (``key-<i % 29>``).
KEYS = 29


def java_producer() -> list[str]:
    """The command running ReportingProducer (Kafka 4.4's kafka-clients)."""
    import java_harness
    from kafka_peers import java_command

    home = java_harness.compiled()
    argv = java_command("ReportingProducer", heap="-Xmx128m")
    cp = argv.index("-cp") + 1
    argv[cp] = f"{argv[cp]}{os.pathsep}{home}"  # Kafka's jars first: their CDS archive applies
    argv.insert(cp - 1, f"-Dlog4j2.configurationFile={home / 'log4j2.properties'}")
    return argv


def java_sends(
    command: Sequence[str],
    servers: str,
    topic: str,
    n: int,
    prefix: str,
    txn_id: str,
    properties: dict[str, str],
    *,
    wrap: Sequence[str] = (),
) -> tuple[list[Report], list[bytes]]:
    """ReportingProducer sending ``n`` records in each of :data:`MODES` (the
    transactional one: committed, aborted, committed) in one JVM, run under
    ``wrap`` (:func:`in_own_hosts`): its delivery reports, and the values a
    read_committed consumer must read."""
    props = [f"{k}={v}" for k, v in properties.items()]
    argv = [*wrap, *command, servers, topic, str(n), prefix, ",".join(MODES), txn_id, *props]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.split("\n")
    assert lines[-2:] == [f"ok {n}", ""], done.stdout[-2000:]
    reports: list[Report] = []
    for line in lines[:-2]:
        value, partition, offset = line.split()
        reports.append((value.encode(), int(partition), int(offset)))
    rounds = [f"{prefix}-{m}" for m in MODES] + [f"{prefix}-transactional-again"]
    sent = [b"%s-%d" % (r.encode(), i) for r in rounds for i in range(n)]
    return reports, sent


def pem_keystore(cert: str, key: str, out: Path) -> str:
    """A PEM key store for Kafka's Java client (``ssl.keystore.type=PEM``,
    KIP-651): the private key as PKCS#8, which Kafka's PEM store requires
    (trustme writes SEC1 or PKCS#1 keys), then the certificate."""
    from cryptography.hazmat.primitives import serialization

    loaded = serialization.load_pem_private_key(Path(key).read_bytes(), password=None)
    pkcs8 = loaded.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    out.write_bytes(pkcs8 + Path(cert).read_bytes())
    return str(out)


def java_tls(ca: str, keystore: str | None = None) -> dict[str, str]:
    """The Java client's TLS properties: PEM trust store, PEM key store (KIP-651)."""
    props = {
        "security.protocol": "SSL",
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": ca,
    }
    if keystore is not None:
        props |= {"ssl.keystore.type": "PEM", "ssl.keystore.location": keystore}
    return props


def sdk_and_confluent_sends(
    servers: str,
    topic: str,
    tag: str,
    n: int,
    sdk: dict[str, Any],
    librdkafka: dict[str, Any] | None,
) -> tuple[list[Report], list[bytes]]:
    """trafka's SDK and confluent-kafka, each plain, idempotent and in a
    transaction, ``n`` records keyed as the Java producer keys them (``sdk``,
    ``librdkafka``: each client's settings, TLS...; ``librdkafka`` None: the
    SDK alone, for names only the SDK's lookups resolve): reports and values."""
    ways: list[tuple[str, Any, dict[str, Any]]] = [
        ("sdk-plain", sdk_reports, {**sdk, "enable_idempotence": False, "acks": 1}),
        ("sdk-idempotent", sdk_reports, {**sdk, "enable_idempotence": True}),
        ("sdk-transactional", sdk_reports, {**sdk, "transactional_id": f"{tag}-sdk"}),
    ]
    if librdkafka is not None:
        ways += [
            ("ck-plain", confluent_reports, {**librdkafka, "enable.idempotence": False, "acks": 1}),
            ("ck-idempotent", confluent_reports, {**librdkafka, "enable.idempotence": True}),
            (
                "ck-transactional",
                confluent_reports,
                {**librdkafka, "transactional.id": f"{tag}-ck"},
            ),
        ]
    reports: list[Report] = []
    sent: list[bytes] = []
    for way, send, settings in ways:
        sends = [
            (b"%s-%s-%d" % (tag.encode(), way.encode(), i), b"key-%d" % (i % KEYS))
            for i in range(n)
        ]
        reports += send(servers, topic, sends, **settings)
        sent += [v for v, _ in sends]
    return reports, sent


def read_committed(
    servers: str, topic: str, partitions: int, sent: Sequence[bytes], **settings: Any
) -> list[Any]:
    """Every committed record of the topic (trafka's SDK, read_committed,
    ``settings`` for TLS...), read until each value of ``sent`` is in, then
    to each partition's end."""
    want = Counter(sent)

    async def go() -> list[Any]:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        out: list[Any] = []
        async with open_consumer(
            bootstrap_servers=servers,
            isolation_level="read_committed",
            fetch_max_wait_ms=50,
            **settings,
        ) as consumer:
            consumer.assign(tps)
            consumer.seek_to_beginning(*tps)
            with anyio.move_on_after(60):
                while not want <= Counter(r.value for r in out):
                    for recs in (await consumer.getmany(timeout_ms=500)).values():
                        out.extend(recs)
            missing = want - Counter(r.value for r in out)
            assert not missing, f"{sum(missing.values())} not read, first {sorted(missing)[:5]}"
            ends = await consumer.end_offsets(tps)
            with anyio.fail_after(30):
                for tp in tps:
                    while await consumer.position(tp) < ends[tp]:
                        for recs in (await consumer.getmany(tp, timeout_ms=500)).values():
                            out.extend(recs)
        return out

    result: list[Any] = anyio.run(go, backend="trio")
    return result


def by_partition(records: Sequence[Any], partitions: int) -> dict[int, list[bytes]]:
    """The records' values per partition, in offset order."""
    out: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    for r in sorted(records, key=lambda r: (r.partition, r.offset)):
        out[r.partition].append(r.value)
    return out


def hosts_unavailable() -> str | None:
    """Why :func:`in_own_hosts` cannot run here (None when it can)."""
    if os.geteuid() != 0:
        return "a private mount namespace for /etc/hosts needs root"
    if shutil.which("unshare") is None:
        return "util-linux's unshare is not installed"
    done = subprocess.run(
        ["unshare", "--mount", "--", "true"], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        return f"no private mount namespace: {done.stderr.strip()}"
    return None


def in_own_hosts(hosts: Path) -> list[str]:
    """The prefix that runs a command with ``hosts`` bind-mounted over
    /etc/hosts in a mount namespace of its own (private propagation, unshare's
    default: nothing is seen outside it, nothing to undo)."""
    script = 'mount --bind "$0" /etc/hosts && exec "$@"'
    return ["unshare", "--mount", "--", "sh", "-c", script, str(hosts)]
