"""Kafka's security scripts against brokerlite, their output compared with the
same scripts against Apache Kafka 3.9 (ZooKeeper), both with a SASL_PLAINTEXT
listener (PLAIN and SCRAM-SHA-256), Kafka's ACL authorizer (``User:admin`` a
super user) and delegation tokens on.

* kafka-configs: client and user quotas (``--entity-type clients``/``users``,
  a user's client, the users' default), SCRAM users (KIP-554: ``--add-config
  'SCRAM-SHA-256=[iterations=8192,password=...]'``, describe, delete), and a
  client logging in with that user, then refused once it is deleted.
* kafka-acls (KIP-140's patterns, KIP-290's prefixed ones): ``--add``,
  ``--list``, ``--remove`` for topics, groups, the cluster and transactional
  ids, the ``--producer`` and ``--consumer`` conveniences; what the ACLs grant
  is allowed and what they do not is refused (a topic created, a group joined).
* kafka-delegation-tokens (KIP-48): create, describe, a client logging in with
  the token (SCRAM with ``tokenauth=true``), renew, expire.

The same two brokers then get one differential conversation
(:mod:`differential`, logged in with SASL/PLAIN) from a principal the ACLs
refuse, compared field by field (``test_refused_calls_answer_as_kafka``).

The steps run in one ScriptRunner JVM per broker, in two phases (the token's
HMAC, printed by the first phase, is an argument of the second), the two
brokers at once. Normalised besides tests/brokerlite/kafka_scripts.py's: the token's id,
HMAC and dates, which are each broker's own.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from differential import Talk
from differential import assert_same as assert_same_answers
from differential_requests import BROKER, Kafka, records
from java_harness import ScriptSession
from kafka_peers import KAFKA_3, KafkaCluster
from kafka_scripts import (
    ACLS,
    CONFIGS,
    CONSOLE_CONSUMER,
    CONSOLE_PRODUCER,
    TOKENS,
    TOPICS,
    Outcome,
    Step,
    assert_same,
    on_both,
    require_kafka,
    run_steps,
)

from trafka.brokerlite import broker_in_thread
from trafka.codec.acl import AclOperation, AclPermissionType, AclResourceType, PatternType
from trafka.codec.messages import k03_metadata as metadata
from trafka.codec.messages import k30_create_acls as create_acls

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(600)]

_RUN = uuid.uuid4().hex[:8]
TOPIC = f"sec-{_RUN}"
BOB_TOPIC = f"sec-bob-{_RUN}"
GROUP = f"sec-g-{_RUN}"
BOB_GROUP = f"sec-bg-{_RUN}"
USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
AUTHORIZER = "kafka.security.authorizer.AclAuthorizer"
PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"


def _login(path: Path, module: str, mechanism: str, user: str, password: str, *extra: str) -> str:
    path.write_text(
        "security.protocol=SASL_PLAINTEXT\n"
        f"sasl.mechanism={mechanism}\n"
        f'sasl.jaas.config={module} required username="{user}" password="{password}"'
        + "".join(f" {e}" for e in extra)
        + ";\n"
    )
    return str(path)


def _first_phase(bs: str, logins: dict[str, str]) -> list[Step]:
    """ACLs, quotas, SCRAM users, a token created: (name, main, arguments, stdin)."""
    b = ["--bootstrap-server", bs, "--command-config", logins["admin"]]
    allow_alice = [*b, "--add", "--allow-principal", "User:alice"]
    carol = ["--entity-type", "users", "--entity-name", "carol"]
    app = ["--entity-type", "clients", "--entity-name", "app-1"]

    def as_user(user: str, group: str, wait_ms: int = 30_000) -> list[str]:
        return [
            "--bootstrap-server", bs, "--command-config", logins[user], "--topic", TOPIC,
            "--group", group, "--from-beginning", "--max-messages", "2", "--timeout-ms", str(wait_ms),
        ]  # fmt: skip

    return [
        ("topics-create", TOPICS, [*b, "--create", "--topic", TOPIC, "--partitions", "1"], None),
        ("console-producer", CONSOLE_PRODUCER, [*b, "--topic", TOPIC], "r1\nr2\n"),
        ("acls-add-topic", ACLS, [*allow_alice, "--operation", "Read", "--topic", TOPIC], None),
        ("acls-add-group", ACLS, [*allow_alice, "--operation", "Read", "--group", GROUP], None),
        ("acls-add-cluster", ACLS, [*allow_alice, "--operation", "DescribeConfigs", "--cluster"], None),
        (
            "acls-add-transactional-id",
            ACLS,
            [*allow_alice, "--operation", "Write", "--operation", "Describe", "--transactional-id", "tx-1"],
            None,
        ),
        (
            "acls-add-prefixed",
            ACLS,
            [*allow_alice, "--operation", "Write", "--topic", "pre-", "--resource-pattern-type", "prefixed"],
            None,
        ),
        (
            "acls-add-deny",
            ACLS,
            [*b, "--add", "--deny-principal", "User:alice", "--deny-host", "10.0.0.1", "--operation", "Write", "--topic", TOPIC],
            None,
        ),
        (
            "acls-add-carol",
            ACLS,
            [*b, "--add", "--allow-principal", "User:carol", "--operation", "Describe", "--topic", TOPIC],
            None,
        ),
        (
            "acls-add-producer",
            ACLS,
            [*b, "--add", "--allow-principal", "User:bob", "--producer", "--topic", BOB_TOPIC, "--transactional-id", "tx-bob"],
            None,
        ),
        (
            "acls-add-consumer",
            ACLS,
            [*b, "--add", "--allow-principal", "User:bob", "--consumer", "--topic", BOB_TOPIC, "--group", BOB_GROUP],
            None,
        ),
        ("acls-list", ACLS, [*b, "--list"], None),
        ("acls-list-topic", ACLS, [*b, "--list", "--topic", TOPIC], None),
        ("acls-list-principal", ACLS, [*b, "--list", "--principal", "User:bob"], None),
        ("acls-list-prefixed", ACLS, [*b, "--list", "--resource-pattern-type", "prefixed"], None),
        ("acls-list-match", ACLS, [*b, "--list", "--topic", "pre-x", "--resource-pattern-type", "match"], None),
        ("acls-allowed-consume", CONSOLE_CONSUMER, as_user("alice", GROUP), None),
        ("acls-refused-group", CONSOLE_CONSUMER, as_user("alice", f"other-{_RUN}", 10_000), None),
        (
            "acls-refused-create",
            TOPICS,
            ["--bootstrap-server", bs, "--command-config", logins["alice"], "--create", "--topic", f"alice-{_RUN}"],
            None,
        ),
        (
            "acls-remove-prefixed",
            ACLS,
            [*b, "--remove", "--allow-principal", "User:alice", "--operation", "Write", "--topic", "pre-", "--resource-pattern-type", "prefixed", "--force"],
            None,
        ),
        (
            "acls-remove-consumer",
            ACLS,
            [*b, "--remove", "--allow-principal", "User:bob", "--consumer", "--topic", BOB_TOPIC, "--group", BOB_GROUP, "--force"],
            None,
        ),
        ("acls-remove-group", ACLS, [*b, "--remove", "--group", GROUP, "--force"], None),
        ("acls-list-removed", ACLS, [*b, "--list"], None),
        ("acls-refused-removed", CONSOLE_CONSUMER, as_user("alice", GROUP, 10_000), None),
        (
            "configs-alter-client",
            CONFIGS,
            [*b, "--alter", "--add-config", "producer_byte_rate=1048576,consumer_byte_rate=2097152", *app],
            None,
        ),
        ("configs-describe-client", CONFIGS, [*b, "--describe", *app], None),
        (
            "configs-alter-user",
            CONFIGS,
            [*b, "--alter", "--add-config", "request_percentage=50,producer_byte_rate=4096", *carol],
            None,
        ),
        (
            "configs-alter-user-client",
            CONFIGS,
            [*b, "--alter", "--add-config", "consumer_byte_rate=8192", *carol, *app],
            None,
        ),
        (
            "configs-alter-user-default",
            CONFIGS,
            [*b, "--alter", "--add-config", "producer_byte_rate=65536", "--entity-type", "users", "--entity-default"],
            None,
        ),
        ("configs-describe-user", CONFIGS, [*b, "--describe", *carol], None),
        ("configs-describe-user-client", CONFIGS, [*b, "--describe", *carol, *app], None),
        ("configs-describe-clients", CONFIGS, [*b, "--describe", "--entity-type", "clients"], None),
        ("configs-describe-users", CONFIGS, [*b, "--describe", "--entity-type", "users"], None),
        (
            "configs-alter-scram",
            CONFIGS,
            [*b, "--alter", "--add-config", "SCRAM-SHA-256=[iterations=8192,password=carol-secret]", *carol],
            None,
        ),
        ("configs-describe-scram", CONFIGS, [*b, "--describe", *carol], None),
        ("scram-login", TOPICS, ["--bootstrap-server", bs, "--command-config", logins["carol"], "--list"], None),
        (
            "configs-delete-user",
            CONFIGS,
            [*b, "--alter", "--delete-config", "request_percentage,producer_byte_rate", *carol],
            None,
        ),
        (
            "configs-delete-client",
            CONFIGS,
            [*b, "--alter", "--delete-config", "producer_byte_rate,consumer_byte_rate", *app],
            None,
        ),
        ("configs-delete-scram", CONFIGS, [*b, "--alter", "--delete-config", "SCRAM-SHA-256", *carol], None),
        ("configs-describe-deleted", CONFIGS, [*b, "--describe", *carol], None),
        ("scram-login-refused", TOPICS, ["--bootstrap-server", bs, "--command-config", logins["carol"], "--list"], None),
        (
            "tokens-create",
            TOKENS,
            [*b, "--create", "--max-life-time-period", "-1", "--renewer-principal", "User:admin"],
            None,
        ),
        ("tokens-describe", TOKENS, [*b, "--describe"], None),
        ("tokens-describe-owner", TOKENS, [*b, "--describe", "--owner-principal", "User:admin"], None),
    ]  # fmt: skip


def _second_phase(bs: str, logins: dict[str, str], hmac: str) -> list[Step]:
    """The token created by the first phase: logged in with, renewed, expired."""
    b = ["--bootstrap-server", bs, "--command-config", logins["admin"]]
    return [
        ("tokens-login", TOPICS, ["--bootstrap-server", bs, "--command-config", logins["token"], "--list"], None),
        ("tokens-renew", TOKENS, [*b, "--renew", "--hmac", hmac, "--renew-time-period", "-1"], None),
        ("tokens-describe-renewed", TOKENS, [*b, "--describe"], None),
        ("tokens-expire", TOKENS, [*b, "--expire", "--hmac", hmac, "--expiry-time-period", "-1"], None),
        ("tokens-describe-expired", TOKENS, [*b, "--describe"], None),
        ("tokens-renew-expired", TOKENS, [*b, "--renew", "--hmac", hmac, "--renew-time-period", "-1"], None),
        ("tokens-login-expired", TOPICS, ["--bootstrap-server", bs, "--command-config", logins["token"], "--list"], None),
    ]  # fmt: skip


def _token(create: Outcome) -> tuple[str, str]:
    """The token id and HMAC kafka-delegation-tokens --create printed."""
    lines = [line for line in create["out"].splitlines() if line.strip()]
    head = next(i for i, line in enumerate(lines) if line.startswith("TOKENID"))
    token_id, hmac = lines[head + 1].split()[:2]
    return token_id, hmac


def _run(bs: str, folder: Path) -> dict[str, Outcome]:
    folder.mkdir()
    logins = {
        user: _login(folder / f"{user}.properties", PLAIN, "PLAIN", user, password)
        for user, password in USERS.items()
    }
    logins["carol"] = _login(
        folder / "carol.properties", SCRAM, "SCRAM-SHA-256", "carol", "carol-secret"
    )
    with ScriptSession() as session:
        found = run_steps(_first_phase(bs, logins), session=session)
        if found["tokens-create"]["exit"] != 0:
            return found
        token_id, hmac = _token(found["tokens-create"])
        login = folder / "token.properties"
        logins["token"] = _login(login, SCRAM, "SCRAM-SHA-256", token_id, hmac, 'tokenauth="true"')
        found |= run_steps(_second_phase(bs, logins, hmac), session=session)
    found["token"] = {"id": token_id, "hmac": hmac}
    return found


@pytest.fixture(scope="module")
def brokers(tmp_path_factory: pytest.TempPathFactory, zookeeper: Any) -> Iterator[dict[str, str]]:
    """brokerlite and Kafka 3.9 with the same SASL users, authorizer and token
    secret: each one's SASL_PLAINTEXT address by name."""
    require_kafka()
    data = tmp_path_factory.mktemp("scripts-security")
    secret = "token-secret-" + uuid.uuid4().hex
    users = " ".join(f'user_{name}="{password}"' for name, password in USERS.items())
    kafka = KafkaCluster(
        KAFKA_3,
        data / "kafka",
        zookeeper=f"{zookeeper.connect_string}/kafka-{uuid.uuid4().hex[:12]}",
        # the first listener is the brokers' own and the fixture's readiness check's
        listeners={"PLAINTEXT": "PLAINTEXT", "SASL_PLAINTEXT": "SASL_PLAINTEXT"},
        config={
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": (
                f'{PLAIN} required username="admin" password="{USERS["admin"]}" {users};'
            ),
            "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": f"{SCRAM} required;",
            "authorizer.class.name": AUTHORIZER,
            "super.users": "User:admin;User:ANONYMOUS",
            "delegation.token.secret.key": secret,
        },
    )
    with (
        kafka,
        broker_in_thread(
            port=0,
            host="127.0.0.1",
            data_dir=data / "brokerlite",
            security_protocol="SASL_PLAINTEXT",
            sasl_users=USERS,
            sasl_enabled_mechanisms="PLAIN,SCRAM-SHA-256",
            authorizer_class_name=AUTHORIZER,
            super_users=("User:admin",),
            delegation_token_secret_key=secret,
            group_initial_rebalance_delay_ms=0,
            log_segment_bytes=16 << 20,  # as kafka_peers' brokers have it: topics list it
        ) as running,
    ):
        yield {
            "brokerlite": running.bootstrap_servers,
            "kafka": f"{kafka.host}:{kafka.node(1).ports['SASL_PLAINTEXT']}",
            "data": str(data),
        }


@pytest.fixture(scope="module")
def outputs(brokers: dict[str, str]) -> dict[str, tuple[Outcome, Outcome]]:
    """Each step's outcome on brokerlite and on Kafka 3.9, run at the same time."""
    data = Path(brokers["data"])
    return on_both(
        lambda: _run(brokers["brokerlite"], data / "on-brokerlite"),
        lambda: _run(brokers["kafka"], data / "on-kafka"),
    )


def _tokens_hidden(text: str, token: dict[str, str]) -> str:
    """The token's id and HMAC, each broker's own, and this era's dates (the
    moments of each run) hidden."""
    if "id" in token:
        text = text.replace(token["id"], "<id>").replace(token["hmac"], "<hmac>")
    return re.sub(r"20\d\d-\d\d-\d\dT\d\d:\d\d", "<date>", text)


def _acl_order(text: str) -> str:
    """kafka-acls' resources, and each one's ACLs, sorted: the tool prints them
    from Java hash sets keyed by enums, whose hash codes are identities that
    differ from one JVM to the next (the same --producer command printed its
    two resources in opposite orders in the two runs, before either broker
    answered)."""
    free: list[str] = []
    blocks: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if line.startswith(("\t", " \t")) and blocks:
            blocks[-1][1].append(line.strip())
        elif "ResourcePattern(" in line:
            blocks.append((line, []))
        elif line.strip():
            free.append(line)
    return "\n".join(free + [h + "\n" + "\n".join(sorted(e)) for h, e in sorted(blocks)])


def _differences_written_down(name: str, text: str) -> str:
    """What docs/brokerlite.md ("Through Apache Kafka's own client and scripts")
    lists as deliberate: a single node's configured SASL users have SCRAM
    credentials too (Kafka's PLAIN JAAS users have none)."""
    lines = text.splitlines(keepends=True)
    if name == "configs-describe-users":
        config_users = tuple(f"user-principal '{user}' are SCRAM" for user in USERS)
        lines = [line for line in lines if not any(u in line for u in config_users)]
    return "".join(lines)


FEATURES = {
    "topics-create": None,
    "console-producer": None,
    **{
        name: "kafka-acls --add"
        for name in (
            "acls-add-topic", "acls-add-group", "acls-add-cluster", "acls-add-transactional-id",
            "acls-add-prefixed", "acls-add-deny", "acls-add-carol",
        )
    },
    "acls-add-producer": "kafka-acls --add --producer",
    "acls-add-consumer": "kafka-acls --add --consumer",
    **{
        name: "kafka-acls --list"
        for name in (
            "acls-list", "acls-list-topic", "acls-list-principal", "acls-list-prefixed",
            "acls-list-match", "acls-list-removed",
        )
    },
    **{
        name: "kafka-acls: allowed and refused as the ACLs say"
        for name in ("acls-allowed-consume", "acls-refused-group", "acls-refused-create", "acls-refused-removed")
    },
    **{name: "kafka-acls --remove" for name in ("acls-remove-prefixed", "acls-remove-consumer", "acls-remove-group")},
    **{
        name: "kafka-configs --entity-type clients/users (quotas)"
        for name in (
            "configs-alter-client", "configs-describe-client", "configs-alter-user", "configs-alter-user-client",
            "configs-alter-user-default", "configs-describe-user", "configs-describe-user-client",
            "configs-describe-clients", "configs-describe-users", "configs-delete-user", "configs-delete-client",
        )
    },
    **{
        name: "kafka-configs --entity-type users: SCRAM credentials, then a login"
        for name in (
            "configs-alter-scram", "configs-describe-scram", "scram-login", "configs-delete-scram",
            "configs-describe-deleted", "scram-login-refused",
        )
    },
    **{
        name: "kafka-delegation-tokens --create, --describe"
        for name in ("tokens-create", "tokens-describe", "tokens-describe-owner")
    },
    **{
        name: "kafka-delegation-tokens --renew, --expire; a login with the token"
        for name in (
            "tokens-login", "tokens-renew", "tokens-describe-renewed",
            "tokens-describe-expired", "tokens-renew-expired", "tokens-login-expired",
        )
    },
    "tokens-expire": "kafka-delegation-tokens --expire --expiry-time-period -1 (its answer)",
}  # fmt: skip


def _step(name: str) -> Any:
    feature = FEATURES[name]
    if feature is None:
        return name
    mark = pytest.mark.compat("Kafka scripts", feature, peer=("brokerlite", "Kafka 3.9"))
    return pytest.param(name, marks=mark)


@pytest.mark.parametrize("name", [_step(n) for n in FEATURES])
def test_script_output_is_kafkas(outputs: dict[str, tuple[Outcome, Outcome]], name: str) -> None:
    mine, theirs = outputs.get("token", ({}, {}))

    def seen(outcome: Outcome, token: dict[str, str]) -> Outcome:
        def text(t: str) -> str:
            t = _differences_written_down(name, _tokens_hidden(t, token))
            return _acl_order(t) if name.startswith("acls-") else t

        return {**outcome, "out": text(outcome["out"]), "err": text(outcome["err"])}

    ours, kafka = outputs[name]
    assert_same(name, seen(ours, mine), seen(kafka, theirs))


@pytest.mark.compat(
    "Kafka scripts", FEATURES["acls-allowed-consume"], peer=("brokerlite", "Kafka 3.9")
)
def test_what_the_acls_grant_is_allowed_and_the_rest_refused(
    outputs: dict[str, tuple[Outcome, Outcome]],
) -> None:
    """On Kafka 3.9 (and so on brokerlite, whose output is the same): alice reads
    the topic in the group she may read (Kafka's authorization docs: READ on the
    topic and on the group), is refused another group and the topic's creation,
    and, the group's ACLs removed, the group too; carol logs in with the SCRAM
    credential set by kafka-configs, and not once it is deleted; the token
    logs in until it is expired."""
    kafka = {name: pair[1] for name, pair in outputs.items()}
    assert kafka["acls-allowed-consume"]["exit"] == 0, kafka["acls-allowed-consume"]
    assert "Processed a total of 2 messages" in kafka["acls-allowed-consume"]["err"]
    # the console consumer logs the group's refusal and reads nothing until its timeout
    for refused in ("acls-refused-group", "acls-refused-removed"):
        assert "Processed a total of 0 messages" in kafka[refused]["err"], kafka[refused]
    assert "Authorization failed" in kafka["acls-refused-create"]["out"], kafka[
        "acls-refused-create"
    ]
    assert kafka["scram-login"]["exit"] == 0 and TOPIC in kafka["scram-login"]["out"]
    assert kafka["scram-login-refused"]["exit"] not in (0, "lost")
    assert kafka["tokens-login"]["exit"] == 0, kafka["tokens-login"]
    assert kafka["tokens-login-expired"]["exit"] not in (0, "lost")


# -- the differential conversation with a principal the ACLs refuse -----------------------------


def _grant(admin: Kafka, principal: str, kind: int, name: str, operation: int) -> Any:
    req = create_acls.CreateAclsRequest
    acl = req.AclCreation(
        resource_type=kind,
        resource_name=name,
        resource_pattern_type=PatternType.LITERAL,
        principal=principal,
        host="*",
        operation=operation,
        permission_type=AclPermissionType.ALLOW,
    )
    return admin.ask(30, req(creations=[acl]), version=3)


def _wait_coordinator(admin: Kafka, group: str) -> None:
    """Until the group's coordinator serves (unrecorded: Kafka answers
    COORDINATOR_NOT_AVAILABLE until it has made ``__consumer_offsets``)."""
    admin.talk.recording = False
    deadline = time.monotonic() + 120
    try:
        while admin.coordinator(group).error_code:
            assert time.monotonic() < deadline, "no group coordinator"
            time.sleep(0.2)
    finally:
        admin.talk.recording = True


@pytest.mark.compat(
    "Protocol",
    "Authorization errors (ACLs refused, then granted)",
    peer=("brokerlite", "Kafka 3.9"),
)
def test_refused_calls_answer_as_kafka(brokers: dict[str, str]) -> None:
    """The same conversation with Kafka 3.9 (``AclAuthorizer``) and brokerlite (its
    equivalent), compared field by field (:mod:`differential`): ``User:bob``,
    without ACLs for any name the conversation uses, asks for a topic that
    ``User:admin`` (a super user) made. Kafka's authorization docs and KIP-11:
    without DESCRIBE a topic is TOPIC_AUTHORIZATION_FAILED in Metadata whether
    or not it exists, and missing from an all-topics Metadata; Produce (WRITE),
    Fetch and ListOffsets (READ), DeleteRecords (DELETE), DescribeConfigs
    (DESCRIBE_CONFIGS), AlterConfigs (ALTER_CONFIGS) and CreateTopics (CREATE)
    are TOPIC_AUTHORIZATION_FAILED per topic; a broker's configs
    CLUSTER_AUTHORIZATION_FAILED; OffsetCommit, OffsetFetch, FindCoordinator and
    JoinGroup without READ on the group GROUP_AUTHORIZATION_FAILED; a
    transactional InitProducerId without WRITE on the transactional id
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED. Then admin grants bob READ on the
    topic and on the group (CreateAcls): Metadata shows the topic (READ implies
    DESCRIBE), Fetch and ListOffsets answer, Produce is still refused, and the
    group's offsets can be committed and fetched."""

    def script(talk: Talk) -> None:
        admin, bob = Kafka(talk, conn="admin"), Kafka(talk)
        topic, group, tid = talk.name("topic"), talk.name("group"), talk.name("txn")
        missing = talk.name("missing")
        admin.create(topic, 1)
        admin.produce(topic, records([b"a", b"b"]))
        bob.metadata(topic, missing)
        bob.metadata(missing, auto=True)
        req = metadata.MetadataRequest
        listed = bob.ask(3, req(topics=None, allow_auto_topic_creation=False))
        talk.note("listed", sorted(t.name for t in listed.topics if t.name in talk.names.values()))
        bob.create(talk.name("bobs"), 1)
        bob.produce(topic, records([b"x"]))
        bob.fetch(topic)
        bob.list_offsets(topic, -1)
        bob.delete_records(topic, 1)
        bob.describe_configs(topic, "retention.ms")
        bob.describe_configs("", "log.retention.ms", kind=BROKER)
        bob.alter_configs(topic, **{"retention.ms": "1000"})
        bob.commit(group, topic, 1)
        bob.offsets(group, topic)
        bob.coordinator(group)
        bob.join(group)
        bob.init_pid(tid)
        _grant(admin, "User:bob", AclResourceType.TOPIC, topic, AclOperation.READ)
        _grant(admin, "User:bob", AclResourceType.GROUP, group, AclOperation.READ)
        _wait_coordinator(admin, group)
        bob.metadata(topic)
        bob.fetch(topic)
        bob.list_offsets(topic, -1)
        bob.produce(topic, records([b"x"]))
        bob.commit(group, topic, 1)
        bob.offsets(group, topic)

    logins = {"admin": ("admin", USERS["admin"]), "": ("bob", USERS["bob"])}
    assert_same_answers(brokers["kafka"], brokers["brokerlite"], script, logins)
