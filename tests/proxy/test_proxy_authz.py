"""The proxy's authorization and audit filter (``trafka.proxy.authz``, issue
#83 item 5; docs/proxy.md, "Authorization and audit").

The decision is Kafka's StandardAuthorizer's (KIP-11 ACLs, KIP-290 prefixed
patterns): deny wins over allow, READ/WRITE/DELETE/ALTER imply DESCRIBE,
ALTER_CONFIGS implies DESCRIBE_CONFIGS, a resource no ACL names follows
``allow.everyone.if.no.acl.found``; an idempotent producer needs
IDEMPOTENT_WRITE or WRITE on some topic (KIP-679). Through the proxy to a
brokerlite that authorizes nothing, clients (trafka's SDK and confluent-kafka,
logged in with SASL PLAIN) meet exactly the refusals the rules give, the audit
file's lines say what happened, and the metric counts the decisions.
(tests/proxy/test_proxy_authz_kafka.py holds the differential test against
Apache Kafka 4.4 with the same ACLs.)
"""

from __future__ import annotations

import json
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import confluent_kafka
import confluent_kafka.admin
import pytest
from click.testing import CliRunner
from proxy_helpers import fresh

from trafka.brokerlite import RunningBroker, broker_in_thread
from trafka.codec import ApiKey, ErrorCode, KafkaError
from trafka.proxy import RunningProxy, proxy_in_thread
from trafka.proxy.audit import AuditLog
from trafka.proxy.authz import Authorization
from trafka.proxy.authz_rules import Rule, Rules, check
from trafka.proxy.cli import command
from trafka.sdk import (
    ConfigError,
    NewTopic,
    open_admin,
    open_consumer,
    open_producer,
    open_share_consumer,
)

pytestmark = pytest.mark.timeout(180)

USERS = {"admin": "admin-pw", "alice": "alice-pw", "bob": "bob-pw"}
#: The client id of this file's confluent-kafka clients: the audit events of
#: their connections are told by it from a stranger's (another test's client,
#: left retrying an address whose port the proxy's listener now holds).
RDKAFKA_ID = f"authz-rdkafka-{uuid.uuid4().hex[:12]}"

RULES: list[dict[str, Any]] = [
    # alice: every topic starting ok-, but never ok-secret; her group and transactional id.
    {"principal": "User:alice", "operation": "All", "resource": "topic", "name": "ok-",
     "pattern": "prefixed"},
    {"principal": "User:alice", "permission": "deny", "operation": "Write", "resource": "topic",
     "name": "ok-secret"},
    {"principal": "User:alice", "operation": "Read", "resource": "group", "name": "g-ok"},
    {"principal": "User:alice", "operation": "Write", "resource": "transactional_id",
     "name": "tx-ok"},
    # everyone may read the public topic (bob included: it is all he may do)
    {"principal": "User:*", "operation": "Read", "resource": "topic", "name": "public"},
    # her share group (a group id is a classic, consumer or share group's, not several)
    {"principal": "User:alice", "operation": "Read", "resource": "group", "name": "sg-ok"},
    # alice may see the peek- topics, not read them
    {"principal": "User:alice", "operation": "Describe", "resource": "topic", "name": "peek-",
     "pattern": "prefixed"},
]  # fmt: skip


# -- the decision ------------------------------------------------------------------------------


def rules(*extra: dict[str, Any], **settings: Any) -> Rules:
    return check({"rules": [*RULES, *extra], **settings})


def test_deny_wins_and_operations_imply_describe() -> None:
    r = rules()
    alice = ("User:alice", "10.0.0.1")
    assert r.allowed(*alice, "WRITE", "topic", "ok-orders")
    assert not r.allowed(*alice, "WRITE", "topic", "ok-secret")  # deny wins over the prefix
    assert r.allowed(*alice, "READ", "topic", "ok-secret")  # a deny names its operation only
    assert r.allowed(*alice, "DESCRIBE", "topic", "ok-secret")
    assert not r.allowed(*alice, "WRITE", "topic", "orders")  # named by no rule: default deny
    assert r.allowed(*alice, "DESCRIBE", "group", "g-ok")  # READ implies DESCRIBE
    assert not r.allowed(*alice, "DELETE", "group", "g-ok")
    assert r.allowed("User:bob", None, "DESCRIBE", "topic", "public")
    assert not r.allowed("User:bob", None, "WRITE", "topic", "public")
    assert r.allowed("User:ANONYMOUS", None, "READ", "topic", "public")  # User:* is anyone


def test_default_allow_only_where_no_rule_names_the_resource() -> None:
    """allow.everyone.if.no.acl.found: once any ACL names a resource, only a
    matching allow lets a principal in (KIP-11)."""
    r = rules(default="allow")
    assert r.allowed("User:bob", None, "WRITE", "topic", "elsewhere")
    assert not r.allowed("User:bob", None, "WRITE", "topic", "ok-orders")  # alice's prefix names it
    assert rules(super_users=["User:root"]).allowed("User:root", None, "ALTER", "cluster",
                                                    "kafka-cluster")  # fmt: skip


def test_hosts_and_describe_configs() -> None:
    r = rules(
        {"principal": "User:carol", "operation": "AlterConfigs", "resource": "topic",
         "name": "*", "host": "10.0.0.7"},
    )  # fmt: skip
    assert r.allowed("User:carol", "10.0.0.7", "DESCRIBE_CONFIGS", "topic", "any")
    assert not r.allowed("User:carol", "10.0.0.8", "DESCRIBE_CONFIGS", "topic", "any")


def test_idempotent_write_by_resource_type() -> None:
    """KIP-679: an InitProducerId without a transactional id needs
    IDEMPOTENT_WRITE on the cluster or WRITE on some topic, where a deny that
    covers the whole allowed pattern takes it away."""
    r = rules()
    assert r.allowed_on_any("User:alice", None, "WRITE", "topic")
    assert not r.allowed_on_any("User:bob", None, "WRITE", "topic")
    covered = Rules(
        [
            Rule("User:dan", True, "WRITE", "topic", "a-", prefixed=True),
            Rule("User:dan", False, "WRITE", "topic", "a", prefixed=True),
        ]
    )
    assert not covered.allowed_on_any("User:dan", None, "WRITE", "topic")


def test_every_problem_of_the_rules_is_named(tmp_path: Path) -> None:
    bad_file = tmp_path / "acls.toml"
    bad_file.write_text('[[rules]]\nprincipal = "alice"\noperation = "Read"\nresource = "topic"\n'
                        'name = "t"\n')  # fmt: skip
    with pytest.raises(ConfigError) as refused:
        check(
            {
                "rules": [
                    {"principal": "User:a", "operation": "Raed", "resource": "topic", "name": "t"},
                    {"principal": "User:a", "operation": "Read", "resource": "topics",
                     "name": "t", "pattern": "glob"},
                ],
                "rules_file": str(bad_file),
                "default": "maybe",
            }
        )  # fmt: skip
    problems = refused.value.problems
    assert any("'Raed' is not one of" in p for p in problems)
    assert any("resource 'topics'" in p for p in problems)
    assert any("pattern 'glob'" in p for p in problems)
    assert any(p.startswith(f"{bad_file}: rules[0]: principal 'alice'") for p in problems)
    assert any("default 'maybe'" in p for p in problems)
    assert len(problems) == 5


def test_check_config_names_every_rule_problem(tmp_path: Path) -> None:
    toml = tmp_path / "proxy.toml"
    toml.write_text(
        'upstream = "127.0.0.1:9092"\n'
        "[[filter]]\n"
        'use = "trafka.proxy.authz:Authorization"\n'
        "[filter.settings]\n"
        'super_users = ["User:admin"]\n'
        f'audit = {{path = "{tmp_path}/no/such/dir/audit.jsonl"}}\n'
        "[[filter.settings.rules]]\n"
        'principal = "User:alice"\n'
        'operation = "Wirte"\n'
        'resource = "topic"\n'
        'name = "orders"\n'
    )
    result = CliRunner().invoke(command, ["--config", str(toml), "--check-config"])
    assert result.exit_code == 1, result.output
    lines = [line[4:] for line in result.output.splitlines() if line.startswith("  - ")]
    use = "filter trafka.proxy.authz:Authorization"
    assert any(f"{use}: rules[0]: operation 'Wirte' is not one of" in line for line in lines)
    assert any(f"{use}: audit: path" in line and "folder does not exist" in line for line in lines)


def test_audit_file_rotates_at_its_bound(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    audit = AuditLog(str(path), max_bytes=400, backups=2)
    for i in range(20):
        audit.write("authorization", n=i, padding="x" * 40)
    audit.close()
    files = [path, Path(f"{path}.1"), Path(f"{path}.2")]
    assert all(f.stat().st_size <= 400 for f in files)
    assert not Path(f"{path}.3").exists()
    newest = [json.loads(line)["n"] for line in path.read_text().splitlines()]
    older = [json.loads(line)["n"] for line in files[1].read_text().splitlines()]
    assert newest[-1] == 19 and older[-1] == newest[0] - 1  # nothing lost between files


def test_audit_to_stdout_is_a_json_line_per_event(capsys: pytest.CaptureFixture[str]) -> None:
    """``path = "-"``: each event one JSON line on stdout, with its time."""
    audit = AuditLog("-")
    audit.write("authorization", principal="User:alice", decision="deny")
    audit.write("connection_open", client="127.0.0.1:5")
    lines = capsys.readouterr().out.splitlines()
    events = [json.loads(line) for line in lines]
    assert [e["event"] for e in events] == ["authorization", "connection_open"]
    assert events[0]["principal"] == "User:alice" and all("time" in e for e in events)
    assert audit.written == 2 and audit.failed == 0


# -- through the proxy, to brokerlite ------------------------------------------------------------


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    """A SASL brokerlite that authorizes nothing: the proxy's rules are all
    that stand between a client and a topic."""
    with broker_in_thread(
        port=0,
        host="127.0.0.1",
        data_dir=tmp_path_factory.mktemp("authz"),
        security_protocol="SASL_PLAINTEXT",
        sasl_users=USERS,
        group_initial_rebalance_delay_ms=0,
    ) as running:
        yield running


@pytest.fixture
def guarded(
    secured: RunningBroker, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[tuple[RunningProxy, Path]]:
    """The proxy with the rules, routing by key (or as ``request.param``
    says: ``route_keys``), its audit log in the test's folder."""
    audit = tmp_path / "audit.jsonl"
    az = Authorization()
    az.configure({"rules": RULES, "super_users": ["User:admin"], "audit": {"path": str(audit)}})
    # The logins the proxy holds, so each client's records are routed as itself
    # (docs/proxy.md, "SASL clients, routed as themselves").
    credentials = tmp_path / "principals.json"
    credentials.write_text(json.dumps({
        f"User:{user}": {"mechanism": "PLAIN", "username": user, "password": password}
        for user, password in USERS.items()
    }))  # fmt: skip
    with proxy_in_thread(
        upstream=(secured.bootstrap_servers,),
        port=0,
        filters=(az,),
        principal_credentials=str(credentials),
        metrics_listen="127.0.0.1:0",
        route_keys=getattr(request, "param", "murmur2"),
    ) as px:
        yield px, audit


def login(px: RunningProxy, user: str) -> dict[str, Any]:
    return {
        "bootstrap_servers": px.bootstrap_servers,
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "PLAIN",
        "sasl_plain_username": user,
        "sasl_plain_password": USERS[user],
    }


def librdkafka(px: RunningProxy, user: str, **more: Any) -> dict[str, Any]:
    return {
        "bootstrap.servers": px.bootstrap_servers,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": "PLAIN",
        "sasl.username": user,
        "sasl.password": USERS[user],
        "client.id": RDKAFKA_ID,
        **more,
    }


def events(audit: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in audit.read_text().splitlines()]


def exposed(px: RunningProxy) -> dict[tuple[str, str, str], float]:
    """The decisions ``/metrics`` shows."""
    from prometheus_client.parser import text_string_to_metric_families

    assert px.metrics_address is not None
    host, port = px.metrics_address
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as answer:
        page = answer.read().decode()
    return {
        (s.labels["decision"], s.labels["operation"], s.labels["resource_type"]): s.value
        for family in text_string_to_metric_families(page)
        for s in family.samples
        if s.name == "trafka_proxy_authorization_decisions_total"
    }


def decisions(px: RunningProxy) -> dict[tuple[str, str, str], int]:
    counted: dict[tuple[str, str, str], int] = px.statistics.filters["authorization"]
    return dict(counted)


async def _code(coro: Any) -> int:
    with pytest.raises(KafkaError) as refused:
        await coro
    return int(refused.value.code)


def test_sdk_clients_meet_the_rules(guarded: tuple[RunningProxy, Path]) -> None:
    px, audit = guarded
    ok, secret, other = fresh("ok-"), "ok-secret", fresh("no-")

    async def main() -> None:
        with anyio.fail_after(120):
            async with open_admin(**login(px, "admin")) as admin:
                await admin.create_topics(
                    [NewTopic(t, 2, 1) for t in (ok, secret, other, "public")]
                )
            async with open_producer(**login(px, "alice")) as producer:  # idempotent
                assert (await producer.send_and_wait(ok, b"v1", key=b"k")).offset == 0
                code = await _code(producer.send_and_wait(secret, b"x"))
                assert code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
            async with open_producer(**login(px, "alice"), transactional_id="tx-ok") as producer:
                await producer.init_transactions()
                producer.begin_transaction()
                await producer.send(ok, b"v2", key=b"k")
                await producer.commit_transaction()
            async with open_producer(**login(px, "alice"), transactional_id="tx-no") as producer:
                code = await _code(producer.init_transactions())
                assert code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            # bob may write no topic: no producer id for an idempotent producer (KIP-679).
            async with open_producer(**login(px, "bob")) as producer:
                code = await _code(producer.send_and_wait("public", b"x"))
                assert code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
            async with open_consumer(
                ok, group_id="g-ok", auto_offset_reset="earliest", **login(px, "alice")
            ) as consumer:
                got: list[bytes] = []
                while len(got) < 2:
                    got += [m.value async for m in _batch(consumer)]
                assert got == [b"v1", b"v2"]
                await consumer.commit()
            async with open_consumer(ok, group_id="g-no", **login(px, "alice")) as consumer:
                code = await _code(consumer.getmany(timeout_ms=10_000))
                assert code == ErrorCode.GROUP_AUTHORIZATION_FAILED
            async with open_admin(**login(px, "alice")) as admin:
                listed = await admin.list_topics()
                assert ok in listed and secret in listed and other not in listed
                await admin.create_topics([NewTopic(fresh("ok-"), 1, 1)])
                code = await _code(admin.create_topics([NewTopic(fresh("no-"), 1, 1)]))
                assert code == ErrorCode.TOPIC_AUTHORIZATION_FAILED

    anyio.run(main, backend="trio")
    counted = decisions(px)
    assert exposed(px) == {k: v for k, v in counted.items() if v}
    # Refused at FindCoordinator already (DESCRIBE), as Kafka does.
    assert counted[("deny", "DESCRIBE", "transactional_id")] >= 1
    assert counted[("deny", "DESCRIBE", "group")] >= 1
    assert counted[("allow", "WRITE", "topic")] >= 2
    lines = events(audit)
    denials = [e for e in lines if e["event"] == "authorization"]
    # Every denial counted is written, and only those.
    assert len(denials) == sum(n for (d, _, _), n in counted.items() if d == "deny")
    assert {
        (e["principal"], e["operation"], e["resource_type"], e["resource"]) for e in denials
    } >= {
        ("User:alice", "WRITE", "topic", secret),
        ("User:alice", "DESCRIBE", "transactional_id", "tx-no"),
        ("User:alice", "DESCRIBE", "group", "g-no"),
        ("User:bob", "IDEMPOTENT_WRITE", "cluster", "kafka-cluster"),
    }
    logins = [e for e in lines if e["event"] == "authentication"]
    assert {(e["principal"], e["outcome"], e["mechanism"]) for e in logins} == {
        ("User:admin", "success", "PLAIN"),
        ("User:alice", "success", "PLAIN"),
        ("User:bob", "success", "PLAIN"),
    }
    admin_ops = [e for e in lines if e["event"] == "admin" and e["api"] == "CreateTopics"]
    by_resource = {r["resource"]: r["error"] for e in admin_ops for r in e["resources"]}
    assert by_resource[ok] == by_resource[secret] == "NONE"
    assert sorted(by_resource.values()).count("TOPIC_AUTHORIZATION_FAILED") == 1


@pytest.mark.parametrize("guarded", ["murmur2", "none"], indirect=True)
def test_every_client_in_every_mode_meets_the_rules(
    guarded: tuple[RunningProxy, Path], request: pytest.FixtureRequest
) -> None:
    """The client matrix (issue #83, "Done when"; tests/proxy/client_matrix.py)
    through the rules: Kafka's Java producer (4.4, SASL PLAIN), confluent-kafka
    and trafka's SDK log in as alice and produce plain, idempotent and in
    transactions (the Java producer's second aborted) to an ``ok-`` topic, with
    transactional ids a rule added for the test lets her use (``ok-``,
    prefixed), routed as themselves and forwarded: a read_committed consumer
    as alice reads every committed record once, each producer's keys in order
    (routed: on their murmur2 partitions), every report where its record is;
    the writes were judged, and allowed, by the proxy."""
    from client_matrix import (
        KEYS,
        by_partition,
        java_producer,
        java_sends,
        read_committed,
        sdk_and_confluent_sends,
    )
    from encryption_helpers import once_in_order
    from proxy_helpers import misreported

    from trafka.sdk.partitioners import murmur2_partition

    px, audit = guarded
    az = next(f for f in _filters(px) if isinstance(f, Authorization))
    txn_ids = {"principal": "User:alice", "operation": "Write", "resource": "transactional_id",
               "name": "ok-", "pattern": "prefixed"}  # fmt: skip
    az.configure(
        {"rules": [*RULES, txn_ids], "super_users": ["User:admin"], "audit": {"path": str(audit)}}
    )
    topic, tag, partitions = fresh("ok-matrix"), fresh("ok-mx"), 3

    async def create() -> None:
        with anyio.fail_after(60):
            async with open_admin(**login(px, "admin")) as admin:
                await admin.create_topics([NewTopic(topic, partitions, 1)])

    anyio.run(create, backend="trio")
    jaas = (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="alice" password="{USERS["alice"]}";'
    )
    java = {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.jaas.config": jaas,
    }
    servers = px.bootstrap_servers
    reports, sent = java_sends(java_producer(), servers, topic, 20, "java", f"{tag}-j", java)
    alice = {k: v for k, v in login(px, "alice").items() if k != "bootstrap_servers"}
    ck = {k: v for k, v in librdkafka(px, "alice").items() if k != "bootstrap.servers"}
    more, values = sdk_and_confluent_sends(servers, topic, tag, 20, alice, ck)
    reports, sent = reports + more, sent + values
    records = read_committed(servers, topic, partitions, sent, **alice)
    once_in_order(by_partition(records, partitions), sent, keys=KEYS)
    assert misreported(records, reports) is None, misreported(records, reports)
    if request.node.callspec.params["guarded"] != "none":
        assert [r for r in records if r.partition != murmur2_partition(r.key, partitions)] == []
    counted = decisions(px)
    assert counted[("allow", "WRITE", "transactional_id")] >= 3
    assert not [k for k, n in counted.items() if k[0] == "deny" and n]


def test_share_consumers_meet_the_rules(guarded: tuple[RunningProxy, Path]) -> None:
    """Share groups (KIP-932) through the proxy, as Kafka 4.4 authorizes them
    (tests/proxy/test_proxy_authz_kafka.py compares the answers): alice reads
    an ok- topic in her share group sg-ok; in g-no her heartbeat is refused
    (GROUP_AUTHORIZATION_FAILED); subscribed to a topic she may not describe,
    TOPIC_AUTHORIZATION_FAILED; to a peek- topic she may describe but not read,
    her share fetches get TOPIC_AUTHORIZATION_FAILED for its partitions and
    none of its records, though the broker judges nothing."""
    px, _ = guarded
    ok, peek = fresh("ok-share-"), fresh("peek-")

    async def main() -> None:
        with anyio.fail_after(120):
            async with open_admin(**login(px, "admin")) as admin:
                await admin.create_topics([NewTopic(t, 1, 1) for t in (ok, peek)])
                await admin.alter_group_configs({"sg-ok": {"share.auto.offset.reset": "earliest"}})
            async with open_producer(**login(px, "admin")) as producer:
                for topic in (ok, peek):
                    await producer.send_and_wait(topic, b"secret of " + topic.encode())
            async with open_share_consumer(ok, group_id="sg-ok", **login(px, "alice")) as share:
                got: list[bytes] = []
                while not got:
                    got = [r.value for r in await share.poll(timeout_ms=1000)]
                assert got == [b"secret of " + ok.encode()]
            for topic, group, refused in (
                (ok, "g-no", ErrorCode.GROUP_AUTHORIZATION_FAILED),
                ("no-share", "sg-ok", ErrorCode.TOPIC_AUTHORIZATION_FAILED),
                (peek, "sg-ok", ErrorCode.TOPIC_AUTHORIZATION_FAILED),
            ):
                async with open_share_consumer(
                    topic, group_id=group, **login(px, "alice")
                ) as share:
                    with pytest.raises(KafkaError) as caught:
                        while True:
                            assert await share.poll(timeout_ms=1000) == []
                    assert caught.value.code == refused, (topic, group, caught.value)

    anyio.run(main, backend="trio")
    counted = decisions(px)
    assert counted[("deny", "READ", "topic")] >= 1  # the peek- topic's share fetch
    assert counted[("deny", "DESCRIBE", "topic")] >= 1  # the heartbeat's no-share


async def _batch(consumer: Any) -> Any:
    for records in (await consumer.getmany(timeout_ms=1000)).values():
        for record in records:
            yield record


def test_confluent_clients_meet_the_rules(guarded: tuple[RunningProxy, Path]) -> None:
    px, audit = guarded
    ok, secret = fresh("ok-"), "ok-secret"
    admin = confluent_kafka.admin.AdminClient(librdkafka(px, "admin"))
    for future in admin.create_topics([confluent_kafka.admin.NewTopic(ok, 1, 1)]).values():
        future.result(30)
    reports: list[Any] = []
    producer = confluent_kafka.Producer(librdkafka(px, "alice", **{"enable.idempotence": True}))
    for topic in (ok, secret):
        producer.produce(topic, b"v", on_delivery=lambda err, msg: reports.append((msg.topic(),
                                                                                   err)))  # fmt: skip
    assert producer.flush(60) == 0
    outcome = {topic: None if err is None else err.code() for topic, err in reports}
    assert outcome == {ok: None, secret: confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED}
    consumer = confluent_kafka.Consumer(
        librdkafka(px, "alice", **{"group.id": "g-ok", "auto.offset.reset": "earliest"})
    )
    consumer.subscribe([ok])
    try:
        message = None
        while message is None or message.error():
            message = consumer.poll(1)
        assert message.value() == b"v"
        consumer.commit(message, asynchronous=False)
    finally:
        consumer.close()
    refused = confluent_kafka.Consumer(librdkafka(px, "bob", **{"group.id": "g-bob"}))
    refused.subscribe([ok])
    try:
        error = None
        while error is None:
            message = refused.poll(1)
            if message is not None and message.error():
                error = message.error()
        assert error.code() in (
            confluent_kafka.KafkaError.GROUP_AUTHORIZATION_FAILED,
            confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED,
        )
    finally:
        refused.close()
    opens = [
        e for e in events(audit) if e["event"] == "connection_open" and e["client_id"] == RDKAFKA_ID
    ]
    # Each logs in at once: its authentication event, not its opening, names it.
    named = [e for e in opens if e["principal"] is not None]
    assert opens and not named, events(audit)


def test_reload_changes_the_rules(guarded: tuple[RunningProxy, Path]) -> None:
    """configure() again (what SIGHUP does with the file's new settings): the
    next request is judged by the new rules."""
    px, audit = guarded
    az = next(f for f in _filters(px) if isinstance(f, Authorization))
    topic = fresh("new-")

    async def send() -> int:
        with anyio.fail_after(60):
            async with open_producer(enable_idempotence=False, **login(px, "bob")) as producer:
                try:
                    await producer.send_and_wait(topic, b"x")
                except KafkaError as exc:
                    return int(exc.code)
                return 0

    assert anyio.run(send, backend="trio") == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    az.configure({"rules": [*RULES, {"principal": "User:bob", "operation": ["Write", "Create"],
                                      "resource": "topic", "name": "new-", "pattern": "prefixed"}],
                  "audit": {"path": str(audit)}})  # fmt: skip
    assert anyio.run(send, backend="trio") == 0


def _filters(px: RunningProxy) -> list[Any]:
    return list(px.filters)


def test_sighup_reloads_the_rules_and_refuses_a_bad_file(tmp_path: Path) -> None:
    """The file's rules are read again at SIGHUP (:class:`~trafka.proxy.reload.Reloader`):
    new rules apply, a file with a bad rule is refused whole and the old rules stay."""
    from trafka.proxy.reload import Reloader, load
    from trafka.proxy.settings import Sources

    toml = tmp_path / "proxy.toml"

    def write(operation: str) -> None:
        toml.write_text(
            'upstream = "127.0.0.1:9092"\n'
            "[[filter]]\n"
            'use = "trafka.proxy.authz:Authorization"\n'
            "[[filter.settings.rules]]\n"
            'principal = "User:alice"\n'
            f'operation = "{operation}"\n'
            'resource = "topic"\n'
            'name = "orders"\n'
        )

    write("Read")
    sources = Sources({}, {}, str(toml))
    loaded = load(sources)
    az = loaded.config.filters[0]
    assert isinstance(az, Authorization)
    reloader = Reloader(sources, loaded.values, loaded.config.filters, None)
    assert not az.rules.allowed("User:alice", None, "WRITE", "topic", "orders")
    write("Write")
    assert reloader.reload()
    assert az.rules.allowed("User:alice", None, "WRITE", "topic", "orders")
    write("Wirte")
    assert not reloader.reload()
    assert az.rules.allowed("User:alice", None, "WRITE", "topic", "orders")


def test_the_docs_example_is_a_valid_configuration(tmp_path: Path) -> None:
    """docs/proxy.md's "Authorization and audit" example, as written (its audit
    folder moved here), passes --check-config and means what its comments say."""
    from trafka.proxy.reload import load
    from trafka.proxy.settings import Sources

    docs = (Path(__file__).parents[2] / "docs" / "proxy.md").read_text()
    section = docs.split("## Authorization and audit", 1)[1]
    example = section.split("```toml\n", 1)[1].split("```", 1)[0]
    toml = tmp_path / "proxy.toml"
    toml.write_text(example.replace("/var/log/trafka", str(tmp_path)))
    result = CliRunner().invoke(command, ["--config", str(toml), "--check-config"])
    assert result.exit_code == 0, result.output
    az = load(Sources({}, {}, str(toml))).config.filters[0]
    assert isinstance(az, Authorization)
    r = az.rules
    assert r.allowed("User:alice", None, "WRITE", "topic", "orders-eu")
    assert not r.allowed("User:alice", None, "WRITE", "topic", "orders-audit")
    assert r.allowed("User:alice", None, "READ", "topic", "orders-audit")
    assert r.allowed("User:alice", None, "WRITE", "transactional_id", "billing-1")
    assert r.allowed("User:ANONYMOUS", None, "READ", "topic", "status")
    assert not r.allowed("User:bob", None, "READ", "topic", "orders-eu")


def test_unauthenticated_clients_are_anonymous(broker: RunningBroker, tmp_path: Path) -> None:
    """A client that did not log in is ``User:ANONYMOUS`` (Kafka's principal for
    PLAINTEXT): rules for it, or for ``User:*``, apply; the rest is refused."""
    audit = tmp_path / "audit.jsonl"
    az = Authorization()
    az.configure(
        {
            "rules": [
                {"principal": "User:ANONYMOUS", "operation": ["Write", "Create"],
                 "resource": "topic", "name": "anon-", "pattern": "prefixed"},
            ],
            "audit": {"path": str(audit)},
        }
    )  # fmt: skip
    allowed, refused = fresh("anon-"), fresh("other-")

    async def main() -> None:
        with anyio.fail_after(60):
            async with open_producer(bootstrap_servers=px.bootstrap_servers) as producer:
                await producer.send_and_wait(allowed, b"x")  # idempotent: WRITE on some topic
                code = await _code(producer.send_and_wait(refused, b"x"))
                assert code == ErrorCode.TOPIC_AUTHORIZATION_FAILED

    with proxy_in_thread(upstream=(broker.bootstrap_servers,), port=0, filters=(az,)) as px:
        anyio.run(main, backend="trio")
    lines = events(audit)
    assert {e["principal"] for e in lines} == {"User:ANONYMOUS"}
    # The proxy stopped: every connection that was opened is closed, and said so.
    opened = [e["client"] for e in lines if e["event"] == "connection_open"]
    closed = [e["client"] for e in lines if e["event"] == "connection_close"]
    assert sorted(opened) == sorted(closed) and opened
    assert az.decisions[("allow", "IDEMPOTENT_WRITE", "cluster")] == 1
    # One alternative refused is no denial: only the topic's refusals are.
    assert {e["resource"] for e in lines if e["event"] == "authorization"} == {refused}


def test_a_refused_login_is_audited(guarded: tuple[RunningProxy, Path]) -> None:
    px, audit = guarded

    async def main() -> None:
        with anyio.fail_after(60), pytest.raises(Exception, match=r"(?i)auth"):
            async with open_admin(**{**login(px, "alice"), "sasl_plain_password": "wrong"}) as a:
                await a.list_topics()

    anyio.run(main, backend="trio")
    logins = [e for e in events(audit) if e["event"] == "authentication"]
    assert {(e["outcome"], e["mechanism"], e["error"], e["principal"]) for e in logins} == {
        ("failure", "PLAIN", "SASL_AUTHENTICATION_FAILED", None)
    }
    az = next(f for f in px.filters if isinstance(f, Authorization))
    assert az.authentications == {"failure": len(logins)}
    assert px.statistics.filters["authorization"] == {}  # nothing judged: it never logged in


def test_audit_logs_of_two_workers_share_one_bounded_file(tmp_path: Path) -> None:
    """``--workers``: each worker's filter has its own AuditLog on the same path;
    their lines interleave whole, and a rotation by one is followed by the other."""
    path = tmp_path / "audit.jsonl"
    a, b = (AuditLog(str(path), max_bytes=1000, backups=5) for _ in range(2))
    for i in range(40):
        (a if i % 2 else b).write("authorization", n=i, padding="y" * 30)
    a.close()
    b.close()
    files = [path, *(Path(f"{path}.{k}") for k in range(1, 6))]
    seen = sorted(
        json.loads(line)["n"] for f in files if f.exists() for line in f.read_text().splitlines()
    )
    assert seen == list(range(40))  # nothing lost, nothing torn
    assert all(f.stat().st_size <= 1000 for f in files if f.exists())


def test_an_acks_0_produce_refused_closes_the_connection(broker: RunningBroker) -> None:
    """Kafka answers no acks=0 Produce, and closes the connection of one that
    failed (KafkaApis' produce callback), so the client learns of it; the proxy
    does the same for one its rules refuse, and the broker never sees it."""
    import socket

    from proxy_helpers import call, request

    az = Authorization()
    az.configure({"default": "deny"})
    with proxy_in_thread(upstream=(broker.bootstrap_servers,), port=0, filters=(az,)) as px:
        host, port = px.address
        with (
            socket.create_connection((host, port), timeout=20) as sock,
            pytest.raises(AssertionError, match="closed the connection"),
        ):
            call(sock, ApiKey.PRODUCE, 9, request({0: [b""]}, acks=0, topic="guarded"))
    assert az.decisions == {("deny", "WRITE", "topic"): 1}


def test_a_client_logged_in_as_no_one_the_proxy_can_name_is_refused() -> None:
    """A SASL login the proxy cannot read a principal from (a delegation
    token's SCRAM login names a token id) is refused all that is judged, even
    what ``User:*`` may do: the proxy cannot tell which deny would apply."""
    from trafka.codec.messages import k01_fetch as fm
    from trafka.proxy.filters import FilterContext, Respond, Session

    az = Authorization()
    az.configure({"rules": RULES})
    fetch = fm.FetchRequest(
        replica_id=-1,
        session_epoch=-1,
        topics=[fm.FetchRequest.FetchTopic(topic="public",
                                           partitions=[fm.FetchRequest.FetchPartition(partition=0)])],
    )  # fmt: skip

    def asked_by(session: Session) -> Any:
        ctx = FilterContext(ApiKey.FETCH, 12, 1, "c", ("10.0.0.1", 1), 0, {}, session)
        return az.on_request(ctx, fetch)

    assert asked_by(Session(False)) is fetch  # ANONYMOUS: User:* may read it
    assert asked_by(Session(True, "User:bob")) is fetch
    refused = asked_by(Session(True, None))
    assert isinstance(refused, Respond)
    codes = [p.error_code for t in refused.body.responses for p in t.partitions]
    assert codes == [ErrorCode.TOPIC_AUTHORIZATION_FAILED]
