"""``trafka acls`` against brokerlite with the authorizer on (anonymous clients
are super users) and without one (SECURITY_DISABLED explained), and as a SASL
principal that may not manage ACLs; ``trafka broker``'s authorizer options."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import click
import pytest
from click.testing import CliRunner, Result

from trafka.brokerlite import RunningBroker, broker_in_thread
from trafka.brokerlite.cli import STANDARD_AUTHORIZER, build_config
from trafka.brokerlite.cli import command as broker_command
from trafka.brokerlite.config import ConfigError
from trafka.sdk import AclOperation, open_admin
from trafka.tools.cli import main
from trafka.tools.cli_acls import parse_operation

pytestmark = pytest.mark.timeout(120)

USERS = {"admin": "admin-pw", "alice": "alice-pw"}


@pytest.fixture
def authz(tmp_path: Path) -> Iterator[RunningBroker]:
    """Its own broker per test: the ACLs are the broker's state."""
    with broker_in_thread(
        port=0,
        host="127.0.0.1",
        data_dir=tmp_path / "data",
        authorizer_class_name=STANDARD_AUTHORIZER,
        super_users=("User:ANONYMOUS",),
    ) as running:
        yield running


def acls(broker: RunningBroker, *args: str, extra: tuple[str, ...] = ()) -> Result:
    return CliRunner().invoke(main, ["acls", *args, "-b", broker.bootstrap_servers, *extra])


def ok(result: Result) -> Result:
    assert result.exit_code == 0, (result.output, result.exception)
    return result


def listed(broker: RunningBroker, *filters: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = json.loads(ok(acls(broker, "list", "--json", *filters)).stdout)
    return rows


def row(rtype: str, name: str, pattern: str, principal: str, host: str, op: str, perm: str) -> Any:
    return {
        "resource_type": rtype,
        "name": name,
        "pattern_type": pattern,
        "principal": principal,
        "host": host,
        "operation": op,
        "permission": perm,
    }


READ = row("TOPIC", "orders", "LITERAL", "User:alice", "*", "READ", "ALLOW")
DESCRIBE = row("TOPIC", "orders", "LITERAL", "User:alice", "*", "DESCRIBE", "ALLOW")
DENY_WRITE = row("TOPIC", "secret-", "PREFIXED", "User:*", "10.0.0.1", "WRITE", "DENY")
GROUP = row("GROUP", "billing", "LITERAL", "User:bob", "*", "READ", "ALLOW")
CLUSTER = row("CLUSTER", "kafka-cluster", "LITERAL", "User:bob", "*", "IDEMPOTENT_WRITE", "ALLOW")
TXN = row("TRANSACTIONAL_ID", "tx-", "PREFIXED", "User:bob", "*", "WRITE", "ALLOW")


def add_all(broker: RunningBroker) -> None:
    for args in (
        ["--allow", "--principal", "User:alice", "--operation", "read", "--operation",
         "Describe", "--topic", "orders"],
        ["--deny", "--principal", "User:*", "--operation", "WRITE", "--topic", "secret-",
         "--prefixed", "--host", "10.0.0.1"],
        ["--allow", "--principal", "User:bob", "--operation", "READ", "--group", "billing"],
        ["--allow", "--principal", "User:bob", "--operation", "idempotent-write", "--cluster"],
        ["--allow", "--principal", "User:bob", "--operation", "write", "--transactional-id",
         "tx-", "--prefixed"],
    ):  # fmt: skip
        ok(acls(broker, "add", *args))


def test_add_then_list_as_a_table_and_as_json(authz: RunningBroker) -> None:
    added = ok(
        acls(
            authz, "add", "--allow", "--principal", "User:alice", "--principal", "User:bob",
            "--operation", "read", "--operation", "DESCRIBE", "--topic", "orders",
        )
    )  # fmt: skip
    assert added.stdout == ""  # notes go to stderr
    assert "added ALLOW User:alice READ on topic orders" in added.stderr
    assert added.stderr.count("added ") == 4
    table = ok(acls(authz, "list")).stdout.splitlines()
    assert table[0].split() == [
        "RESOURCE-TYPE", "NAME", "PATTERN", "PRINCIPAL", "HOST", "OPERATION", "PERMISSION",
    ]  # fmt: skip
    assert table[1].split() == ["TOPIC", "orders", "LITERAL", "User:alice", "*", "READ", "ALLOW"]
    assert len(table) == 5
    # Adding again is no error and no duplicate.
    ok(acls(authz, "add", "--allow", "--principal", "User:bob", "--operation", "read", "--topic", "orders"))  # fmt: skip
    assert len(listed(authz)) == 4


def test_list_filters(authz: RunningBroker) -> None:
    add_all(authz)
    everything = [READ, DESCRIBE, DENY_WRITE, GROUP, CLUSTER, TXN]
    assert sorted(map(str, listed(authz))) == sorted(map(str, everything))
    assert listed(authz, "--topic", "orders") == [READ, DESCRIBE]
    assert listed(authz, "--topic", "secret-x") == []  # exact name, either pattern type
    assert listed(authz, "--topic", "secret-x", "--pattern-type", "match") == [DENY_WRITE]
    assert listed(authz, "--prefixed") == [DENY_WRITE, TXN]
    assert listed(authz, "--pattern-type", "literal", "--principal", "User:bob") == [CLUSTER, GROUP]
    assert listed(authz, "--cluster") == [CLUSTER]
    assert listed(authz, "--group", "billing") == [GROUP]
    assert listed(authz, "--transactional-id", "tx-", "--prefixed") == [TXN]
    assert listed(authz, "--deny") == [DENY_WRITE]
    assert listed(authz, "--allow", "--operation", "describe") == [DESCRIBE]
    assert listed(authz, "--host", "10.0.0.1") == [DENY_WRITE]
    nothing = ok(acls(authz, "list", "--principal", "User:nobody"))
    assert nothing.stdout == "" and "no ACLs match" in nothing.stderr


def test_remove_needs_a_filter_or_all_and_prints_what_it_removed(authz: RunningBroker) -> None:
    add_all(authz)
    refused = acls(authz, "remove")
    assert refused.exit_code == 2 and "--all" in refused.output
    dry = ok(acls(authz, "remove", "--principal", "User:bob", "--dry-run", "--json"))
    assert sorted(map(str, json.loads(dry.stdout))) == sorted(map(str, [GROUP, CLUSTER, TXN]))
    assert "nothing changed" in dry.stderr
    assert len(listed(authz)) == 6
    removed = ok(acls(authz, "remove", "--topic", "orders", "--operation", "READ"))
    assert removed.stdout.splitlines()[1].split()[:2] == ["TOPIC", "orders"]
    assert "removed 1 ACL(s)" in removed.stderr
    removed = ok(acls(authz, "remove", "--topic", "secret-plans", "--pattern-type", "match", "--json"))  # fmt: skip
    assert json.loads(removed.stdout) == [DENY_WRITE]
    everything = ok(acls(authz, "remove", "--all", "--json"))
    assert len(json.loads(everything.stdout)) == 4
    assert listed(authz) == []
    assert "no ACLs" in ok(acls(authz, "list")).stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--principal", "User:a", "--operation", "read", "--topic", "t"], "--allow or --deny"),
        (["--allow", "--principal", "a", "--operation", "read", "--topic", "t"], "Type:Name"),
        (["--allow", "--principal", "User:a", "--operation", "reed", "--topic", "t"], "reed"),
        (["--allow", "--principal", "User:a", "--operation", "any", "--topic", "t"], "'any'"),
        (["--allow", "--principal", "User:a", "--operation", "read"], "give the resource"),
        (["--allow", "--principal", "User:a", "--operation", "read", "--topic", ""], "empty"),
        (
            [
                "--allow",
                "--principal",
                "User:a",
                "--operation",
                "read",
                "--topic",
                "t",
                "--cluster",
            ],
            "one of",
        ),
        (["--allow", "--operation", "read", "--topic", "t"], "--principal"),
        (
            [
                "--deny",
                "--principal",
                "User:a",
                "--operation",
                "read",
                "--topic",
                "t",
                "--host",
                "",
            ],
            "host",
        ),
    ],
)
def test_add_usage_errors(authz: RunningBroker, args: list[str], message: str) -> None:
    result = acls(authz, "add", *args)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert listed(authz) == []


def test_list_usage_errors(authz: RunningBroker) -> None:
    both = acls(authz, "list", "--prefixed", "--pattern-type", "literal")
    assert both.exit_code == 2 and "disagree" in both.output
    assert acls(authz, "list", "--operation", "nope").exit_code == 2
    assert acls(authz, "list", "--principal", "bob").exit_code == 2


def test_acls_without_an_authorizer_explain_security_disabled(tmp_path: Path) -> None:
    with broker_in_thread(port=0, host="127.0.0.1", data_dir=tmp_path) as plain:
        for args in (
            ["list"],
            ["add", "--allow", "--principal", "User:a", "--operation", "read", "--topic", "t"],
            ["remove", "--all"],
            ["remove", "--all", "--dry-run"],
        ):
            result = acls(plain, *args)
            assert result.exit_code == 1, result.output
            assert "no authorizer" in result.stderr, result.stderr
            assert "SECURITY_DISABLED" in result.stderr
            assert "trafka broker --authorizer" in result.stderr


def test_acls_as_a_principal_that_may_not_manage_them(tmp_path: Path) -> None:
    with broker_in_thread(
        port=0,
        host="127.0.0.1",
        data_dir=tmp_path,
        security_protocol="SASL_PLAINTEXT",
        sasl_users=USERS,
        authorizer_class_name=STANDARD_AUTHORIZER,
        super_users=("User:admin",),
    ) as running:

        def as_user(user: str) -> tuple[str, ...]:
            return (
                "-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanism=PLAIN",
                "-X", f"sasl.username={user}", "-X", f"sasl.password={USERS[user]}",
            )  # fmt: skip

        add = ["add", "--allow", "--principal", "User:alice", "--operation", "read", "--topic", "t"]
        for args, needs in ((["list"], "DESCRIBE"), (add, "ALTER"), (["remove", "--all"], "ALTER")):
            result = acls(running, *args, extra=as_user("alice"))
            assert result.exit_code == 1, result.output
            assert "CLUSTER_AUTHORIZATION_FAILED" in result.stderr
            assert f"needs {needs} on the cluster" in result.stderr
        ok(acls(running, *add, extra=as_user("admin")))
        assert "User:alice" in ok(acls(running, "list", extra=as_user("admin"))).stdout


@pytest.mark.parametrize(
    ("text", "op"),
    [
        ("read", AclOperation.READ),
        ("ALL", AclOperation.ALL),
        ("describe-configs", AclOperation.DESCRIBE_CONFIGS),
        ("DescribeConfigs", AclOperation.DESCRIBE_CONFIGS),
        ("IDEMPOTENT_WRITE", AclOperation.IDEMPOTENT_WRITE),
        (" ClusterAction ", AclOperation.CLUSTER_ACTION),
    ],
)
def test_parse_operation(text: str, op: AclOperation) -> None:
    assert parse_operation(text) is op


def test_parse_operation_refuses_filter_values() -> None:
    for text in ("any", "unknown", "", "reads"):
        with pytest.raises(click.BadParameter):
            parse_operation(text)


# -- trafka broker --------------------------------------------------------------------


def test_broker_authorizer_options() -> None:
    config = build_config(
        None,
        {
            "authorizer": True,
            "super_user": ("User:admin", "User:CN=ops,O=Acme"),
            "allow_everyone_if_no_acl_found": True,
        },
    )
    assert config.authorizer_class_name == STANDARD_AUTHORIZER
    assert config.super_users == ("User:admin", "User:CN=ops,O=Acme")
    assert config.allow_everyone_if_no_acl_found is True
    plain = build_config(None, {"authorizer": None, "super_user": (), "allow_everyone_if_no_acl_found": None})  # fmt: skip
    assert plain.authorizer_class_name is None and plain.super_users == ()
    assert not plain.allow_everyone_if_no_acl_found
    for options in ({"super_user": ("User:admin",)}, {"allow_everyone_if_no_acl_found": True}):
        with pytest.raises(ConfigError, match="needs an authorizer"):
            build_config(None, options)
    with pytest.raises(ConfigError, match="Type:Name"):
        build_config(None, {"authorizer": True, "super_user": ("admin",)})


def test_broker_authorizer_from_a_file_with_super_users_from_options(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text(
        "authorizer.class.name=kafka.security.authorizer.AclAuthorizer\nsuper.users=User:a;User:b\n"
    )
    config = build_config(path, {})
    assert config.authorizer_class_name == "kafka.security.authorizer.AclAuthorizer"
    assert config.super_users == ("User:a", "User:b")
    assert build_config(path, {"super_user": ("User:c",)}).super_users == ("User:c",)


def test_broker_command_line(tmp_path: Path) -> None:
    help_text = CliRunner().invoke(broker_command, ["--help"]).output
    for option in ("--authorizer", "--super-user", "--allow-everyone-if-no-acl-found"):
        assert option in help_text
    result = CliRunner().invoke(
        broker_command, ["--data-dir", str(tmp_path), "--super-user", "User:admin"]
    )
    assert result.exit_code == 2 and "--super-user needs an authorizer" in result.output
    result = CliRunner().invoke(
        broker_command, ["--data-dir", str(tmp_path), "--authorizer", "--super-user", "admin"]
    )
    assert result.exit_code == 2 and "Type:Name" in result.output


def test_a_broker_started_with_the_options_enforces_them(tmp_path: Path) -> None:
    """The options' config, served: the super user manages ACLs, anyone else is refused."""
    config = build_config(
        None,
        {
            "listen": "SASL_PLAINTEXT://127.0.0.1:0",
            "sasl_user": ("admin:admin-pw", "alice:alice-pw"),
            "data_dir": tmp_path,
            "announce": False,
            "authorizer": True,
            "super_user": ("User:admin",),
        },
    )
    settings = {
        f: getattr(config, f)
        for f in (
            "host", "port", "security_protocol", "sasl_users", "data_dir",
            "authorizer_class_name", "super_users",
        )
    }  # fmt: skip
    with broker_in_thread(**settings) as running:

        async def may_describe(user: str) -> bool:
            from trafka.codec import KafkaError

            with anyio.fail_after(30):
                async with open_admin(
                    bootstrap_servers=running.bootstrap_servers,
                    security_protocol="SASL_PLAINTEXT",
                    sasl_username=user,
                    sasl_password=USERS[user],
                ) as admin:
                    try:
                        await admin.describe_acls()
                    except KafkaError:
                        return False
                    return True

        assert anyio.run(may_describe, "admin")
        assert not anyio.run(may_describe, "alice")


def test_listing_order_is_the_bindings_not_the_brokers(capsys: pytest.CaptureFixture[str]) -> None:
    """Kafka answers DescribeAcls in no set order (4.x's StandardAuthorizer gave
    one principal's READ and DESCRIBE on a topic either way round,
    tests/tools/test_cli_kafka.py): the listing is ordered by every field, the
    operations and permissions by their codes (READ before DESCRIBE)."""
    from trafka.sdk import AclBinding, AclPermissionType, AclResourceType, PatternType
    from trafka.tools.cli_acls import _show

    def binding(op: AclOperation, perm: AclPermissionType, host: str = "*") -> AclBinding:
        return AclBinding(
            AclResourceType.TOPIC, "orders", PatternType.LITERAL, "User:alice", host, op, perm
        )

    allow, deny = AclPermissionType.ALLOW, AclPermissionType.DENY
    answers = [
        binding(AclOperation.DESCRIBE, allow, "10.0.0.1"),
        binding(AclOperation.DESCRIBE, deny),
        binding(AclOperation.DESCRIBE, allow),
        binding(AclOperation.READ, allow),
    ]
    printed = []
    for order in (answers, answers[::-1]):
        _show(order, as_json=True)
        rows = json.loads(capsys.readouterr().out)
        printed.append([(r["host"], r["operation"], r["permission"]) for r in rows])
    assert (
        printed[0]
        == printed[1]
        == [
            ("*", "READ", "ALLOW"),
            ("*", "DESCRIBE", "DENY"),  # DENY is 2, ALLOW 3
            ("*", "DESCRIBE", "ALLOW"),
            ("10.0.0.1", "DESCRIBE", "ALLOW"),
        ]
    )
