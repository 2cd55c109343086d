"""confluent-kafka's admin API without a broker, differential: the same bad
argument gives the same exception type on ``confluent_kafka.admin`` and on
``trafka.compat.confluent.admin``, raised by the call itself (before any
request); the values (enums, ``ConfigResource``, ACL bindings, ``OffsetSpec``)
are equal, ordered, hashed and shown alike; and with no ``bootstrap.servers``
every future fails with ``_TIMED_OUT`` at its ``request_timeout``, as
librdkafka's.
"""

from __future__ import annotations

import concurrent.futures
import importlib
import logging
import types
from collections.abc import Callable, Iterator
from typing import Any

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")

APIS = ["confluent_kafka", "trafka.compat.confluent"]
NO_BROKER = {"socket.timeout.ms": 10, "log_level": 0}


def api(name: str) -> types.SimpleNamespace:
    root = importlib.import_module(name)
    admin = importlib.import_module(f"{name}.admin")
    names = {k: getattr(root, k) for k in dir(root) if not k.startswith("__")}
    names.update({k: getattr(admin, k) for k in dir(admin) if not k.startswith("__")})
    return types.SimpleNamespace(**names)


@pytest.fixture(params=APIS)
def ck(request: pytest.FixtureRequest) -> Iterator[types.SimpleNamespace]:
    yield api(request.param)


def outcome(fn: Callable[[], Any]) -> str:
    """What a call did: ``ok``, or the name of the exception it raised."""
    try:
        fn()
    except Exception as exc:  # the type is what is compared
        return type(exc).__name__
    return "ok"


def bad_calls(ck: types.SimpleNamespace, a: Any) -> dict[str, Callable[[], Any]]:
    """Calls with one bad argument each (and a few good ones), by name."""
    tp = ck.TopicPartition
    cgtp = ck.ConsumerGroupTopicPartitions
    binding = ck.AclBinding(
        ck.ResourceType.TOPIC,
        "t",
        ck.ResourcePatternType.LITERAL,
        "User:u",
        "*",
        ck.AclOperation.READ,
        ck.AclPermissionType.ALLOW,
    )
    flt = ck.AclBindingFilter(
        ck.ResourceType.ANY,
        None,
        ck.ResourcePatternType.ANY,
        None,
        None,
        ck.AclOperation.ANY,
        ck.AclPermissionType.ANY,
    )
    sci = ck.ScramCredentialInfo(ck.ScramMechanism.SCRAM_SHA_256, 8192)
    up = ck.UserScramCredentialUpsertion
    entry = ck.ConfigEntry
    op = ck.AlterConfigOpType
    res = ck.ConfigResource
    return {
        "create_topics None": lambda: a.create_topics(None),
        "create_topics []": lambda: a.create_topics([]),
        "create_topics validate_only str": lambda: a.create_topics(
            [ck.NewTopic("t", 1, 1)], validate_only="yes"
        ),
        "create_topics negative timeout": lambda: a.create_topics(
            [ck.NewTopic("t", 1, 1)], request_timeout=-1
        ),
        "create_topics timeout str": lambda: a.create_topics(
            [ck.NewTopic("t", 1, 1)], operation_timeout="1"
        ),
        "create_topics unknown option": lambda: a.create_topics([ck.NewTopic("t")], nope=1),
        "NewTopic config list": lambda: ck.NewTopic("t", 1, 1, config=["x"]),
        "NewTopic name None": lambda: ck.NewTopic(None),
        "NewTopic count str": lambda: ck.NewTopic("t", "1"),
        "NewPartitions count None": lambda: ck.NewPartitions("t", None),
        "delete_topics str": lambda: a.delete_topics("t"),
        "delete_topics []": lambda: a.delete_topics([]),
        "delete_topics [None]": lambda: a.delete_topics([None]),
        "delete_topics validate_only": lambda: a.delete_topics(["t"], validate_only=True),
        "create_partitions None": lambda: a.create_partitions(None),
        "create_partitions []": lambda: a.create_partitions([]),
        "describe_configs str": lambda: a.describe_configs("t"),
        "describe_configs []": lambda: a.describe_configs([]),
        "describe_configs [None]": lambda: a.describe_configs([None]),
        "incremental None": lambda: a.incremental_alter_configs(None),
        "incremental str": lambda: a.incremental_alter_configs("t"),
        "incremental []": lambda: a.incremental_alter_configs([]),
        "incremental no changes": lambda: a.incremental_alter_configs([res("topic", "t")]),
        "incremental no op": lambda: a.incremental_alter_configs(
            [res("topic", "t", incremental_configs=[entry("a", "b")])]
        ),
        "incremental name int": lambda: a.incremental_alter_configs(
            [res("topic", "t", incremental_configs=[entry(5, "b", incremental_operation=op.SET)])]
        ),
        "incremental value None": lambda: a.incremental_alter_configs(
            [
                res(
                    "topic",
                    "t",
                    incremental_configs=[entry("a", None, incremental_operation=op.SET)],
                )
            ]
        ),
        "create_acls None": lambda: a.create_acls(None),
        "create_acls [str]": lambda: a.create_acls(["t"]),
        "create_acls twice": lambda: a.create_acls([binding, binding]),
        "create_acls []": lambda: a.create_acls([]),
        "delete_acls binding": lambda: a.delete_acls([binding]),
        "describe_acls binding": lambda: a.describe_acls(binding),
        "describe_acls unknown option": lambda: a.describe_acls(flt, nope=1),
        "list_consumer_groups states list": lambda: a.list_consumer_groups(
            states=[ck.ConsumerGroupState.EMPTY]
        ),
        "list_consumer_groups types of str": lambda: a.list_consumer_groups(types={"classic"}),
        "describe_consumer_groups str": lambda: a.describe_consumer_groups("g"),
        "describe_consumer_groups []": lambda: a.describe_consumer_groups([]),
        "describe_consumer_groups [None]": lambda: a.describe_consumer_groups([None]),
        "delete_consumer_groups [1]": lambda: a.delete_consumer_groups([1]),
        "list_group_offsets two groups": lambda: a.list_consumer_group_offsets(
            [cgtp("a"), cgtp("b")]
        ),
        "list_group_offsets with offset": lambda: a.list_consumer_group_offsets(
            [cgtp("g", [tp("t", 0, 5)])]
        ),
        "alter_group_offsets no partitions": lambda: a.alter_consumer_group_offsets([cgtp("g")]),
        "alter_group_offsets negative offset": lambda: a.alter_consumer_group_offsets(
            [cgtp("g", [tp("t", 0, -5)])]
        ),
        "describe_scram tuple": lambda: a.describe_user_scram_credentials(("u",)),
        "describe_scram empty user": lambda: a.describe_user_scram_credentials([""]),
        "alter_scram base class": lambda: a.alter_user_scram_credentials(
            [ck.UserScramCredentialAlteration("u")]
        ),
        "alter_scram str password": lambda: a.alter_user_scram_credentials([up("u", sci, "pw")]),
        "alter_scram empty salt": lambda: a.alter_user_scram_credentials(
            [up("u", sci, b"pw", b"")]
        ),
        "alter_scram zero iterations": lambda: a.alter_user_scram_credentials(
            [up("u", ck.ScramCredentialInfo(ck.ScramMechanism.SCRAM_SHA_256, 0), b"pw")]
        ),
        "describe_topics list": lambda: a.describe_topics(["t"]),
        "describe_topics empty name": lambda: a.describe_topics(ck.TopicCollection([""])),
        "describe_cluster option str": lambda: a.describe_cluster(
            include_authorized_operations="x"
        ),
        "list_offsets list": lambda: a.list_offsets([tp("t", 0)]),
        "list_offsets spec str": lambda: a.list_offsets({tp("t", 0): "earliest"}),
        "list_offsets isolation int": lambda: a.list_offsets(
            {tp("t", 0): ck.OffsetSpec.latest()}, isolation_level=1
        ),
        "delete_records None": lambda: a.delete_records(None),
        "delete_records no partition": lambda: a.delete_records([tp("t")]),
        "elect_leaders type None": lambda: a.elect_leaders(None, [tp("t", 0)]),
        "elect_leaders partitions str": lambda: a.elect_leaders(ck.ElectionType.PREFERRED, "t"),
        "set_sasl_credentials int": lambda: a.set_sasl_credentials(1, "p"),
        "ConfigResource unknown type": lambda: res("nope", "x"),
        "ConfigResource name None": lambda: res("topic", None),
        "AclBinding ANY": lambda: ck.AclBinding(
            ck.ResourceType.ANY,
            "t",
            ck.ResourcePatternType.LITERAL,
            "User:u",
            "*",
            ck.AclOperation.READ,
            ck.AclPermissionType.ALLOW,
        ),
        "AclBinding name int": lambda: ck.AclBinding(
            "topic", 5, "literal", "User:u", "*", "read", "allow"
        ),
        "AclBinding operation float": lambda: ck.AclBinding(
            "topic", "t", "literal", "User:u", "*", 1.5, "allow"
        ),
        "AclBindingFilter UNKNOWN": lambda: ck.AclBindingFilter(
            ck.ResourceType.UNKNOWN, None, "any", None, None, "any", "any"
        ),
    }


CASES = sorted(bad_calls(api("trafka.compat.confluent"), None))


@pytest.fixture(scope="module")
def clients() -> Iterator[dict[str, Any]]:
    made = {name: api(name).AdminClient(dict(NO_BROKER)) for name in APIS}
    yield made
    for client in made.values():
        client.__exit__(None, None, None)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize("case", CASES)
def test_a_bad_argument_raises_what_confluent_kafka_raises(
    clients: dict[str, Any], case: str
) -> None:
    results = {name: outcome(bad_calls(api(name), clients[name])[case]) for name in APIS}
    assert results["trafka.compat.confluent"] == results["confluent_kafka"]


def test_the_module_has_confluent_kafkas_public_names() -> None:
    theirs = {n for n in dir(importlib.import_module("confluent_kafka.admin")) if n[0] != "_"}
    ours = set(dir(importlib.import_module("trafka.compat.confluent.admin")))
    typing_names = {"Any", "Dict", "List", "Optional", "Set", "Tuple", "Union"}
    assert theirs - typing_names - {"concurrent", "warnings", "string_type"} <= ours
    assert importlib.import_module("trafka.compat.confluent.admin")._ElectionType.PREFERRED


def shown(ck: types.SimpleNamespace) -> dict[str, Any]:
    """Values built alike, as each library shows, orders and compares them."""
    binding = ck.AclBinding("topic", "t", "literal", "User:u", "*", "read", "allow")
    flt = ck.AclBindingFilter("any", None, "match", None, None, "any", "any")
    r1, r2 = ck.ConfigResource("topic", "b"), ck.ConfigResource(ck.ResourceType.BROKER, "1")
    return {
        "binding": repr(binding),
        "filter": repr(flt),
        "binding == itself": binding == ck.AclBinding(2, "t", 3, "User:u", "*", 3, 3),
        "resources": (
            repr(r1),
            repr(r2),
            r1 == ck.ConfigResource(2, "b"),
            sorted([r2, r1]) == [r1, r2],
        ),
        "resource len": len(ck.ConfigResource("topic", "t", set_config={"a": "1"})),
        "entry": (repr(ck.ConfigEntry("a", "1")), str(ck.ConfigEntry("a", "1"))),
        "new topic": (
            repr(ck.NewTopic("t", 3, 1)),
            repr(ck.NewTopic("t")),
            ck.NewTopic("t") == ck.NewTopic("t"),
        ),
        "new partitions": repr(ck.NewPartitions("t", 4)),
        "enums": [
            (m.name, m.value)
            for kind in (
                ck.ResourceType,
                ck.ResourcePatternType,
                ck.AclOperation,
                ck.AclPermissionType,
                ck.ConfigSource,
                ck.AlterConfigOpType,
                ck.ScramMechanism,
            )
            for m in kind
        ],
        "ordered": ck.AclOperation.READ < ck.AclOperation.WRITE,
        "specs": (
            ck.OffsetSpec(-1) is ck.OffsetSpec.latest(),
            ck.OffsetSpec(-2) is ck.OffsetSpec.earliest(),
            ck.OffsetSpec(5).timestamp,
            ck.OffsetSpec.earliest() < ck.OffsetSpec.for_timestamp(0),
        ),
        "list offsets info": ck.ListOffsetsResultInfo(5, -1, -1).leader_epoch,
    }


def test_values_are_shown_ordered_and_compared_as_confluent_kafkas() -> None:
    assert shown(api("trafka.compat.confluent")) == shown(api("confluent_kafka"))


def failures(ck: types.SimpleNamespace, a: Any) -> list[tuple[str, int]]:
    """With no broker configured: each call's futures, as (key, code)."""
    tp = ck.TopicPartition
    binding = ck.AclBinding("topic", "t", "literal", "User:u", "*", "read", "allow")
    calls: dict[str, Any] = {
        "create_topics": a.create_topics([ck.NewTopic("t", 1, 1)], request_timeout=0.2),
        "describe_configs": a.describe_configs([ck.ConfigResource("topic", "t")]),
        "create_acls": a.create_acls([binding], request_timeout=0.2),
        "describe_topics": a.describe_topics(ck.TopicCollection(["t", "t"])),
        "list_offsets": a.list_offsets({tp("t", 0): ck.OffsetSpec.latest()}),
        "delete_records": a.delete_records([tp("t", 0, 5), tp("t", 0, 6)]),
        "describe_cluster": {"cluster": a.describe_cluster()},
        "describe_scram": a.describe_user_scram_credentials(["u", "u"]),
    }
    out = []
    for name, futures in calls.items():
        for f in concurrent.futures.as_completed(futures.values(), timeout=5):
            out.append((name, f.exception().args[0].code()))
    return sorted(out)


def test_with_no_broker_futures_fail_as_confluent_kafkas(clients: dict[str, Any]) -> None:
    theirs = failures(api("confluent_kafka"), clients["confluent_kafka"])
    ours = failures(api("trafka.compat.confluent"), clients["trafka.compat.confluent"])
    assert ours == theirs
    assert {code for _, code in ours} == {
        confluent_kafka.KafkaError._TIMED_OUT,
        confluent_kafka.KafkaError._INVALID_ARG,  # a topic, partition or user named twice
    }


def test_a_closed_client_refuses_every_call(ck: types.SimpleNamespace) -> None:
    with ck.AdminClient(dict(NO_BROKER)) as a:
        a.poll(0)
    assert len(a) == 0
    for call in (
        lambda: a.poll(0),
        lambda: a.create_topics([ck.NewTopic("t", 1, 1)]),
        lambda: a.describe_cluster(),
        lambda: a.list_topics(),
        lambda: a.list_groups(),
    ):
        with pytest.raises(RuntimeError, match="has been closed"):
            call()


def test_a_logger_with_debug_hears_init_from_poll(ck: types.SimpleNamespace) -> None:
    heard: list[str] = []
    logger = logging.getLogger(f"admin-init-{id(ck)}")
    logger.setLevel(logging.DEBUG)
    logger.addFilter(lambda record: heard.append(record.getMessage()) or False)
    conf = {"bootstrap.servers": "127.0.0.1:1", "logger": logger, "debug": "admin"}
    with ck.AdminClient(conf) as a:
        a.poll(0)
    assert any(line.startswith("INIT [") for line in heard), heard
