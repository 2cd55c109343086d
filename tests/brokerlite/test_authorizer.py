"""brokerlite's ACL authorizer without sockets: Kafka's decision rules, KIP-679's
authorize-by-type, the KIP-430 bits, filters, validation, the durable ACL journal,
the decision cache, and the helpers that name principals and hosts.

The reference for the rules is Kafka's ``AclAuthorizer`` (``authorizeAction``,
``matchingAcls``, ``authorizeByResourceType``) and ``ResourcePatternFilter``.
A property test compares :meth:`Authorizer.authorize` with a plain model of
those rules written from their statement, and :meth:`Authorizer.authorize_by_type`
with "some resource of the type is allowed" where Kafka's rule means exactly that.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trafka.brokerlite.config import BrokerConfig, ConfigError
from trafka.brokerlite.security.authorizer import (
    ACLS_JOURNAL,
    ANONYMOUS,
    CLUSTER_NAME,
    RESOURCE_OPERATIONS,
    AclBinding,
    AclFilter,
    AclStore,
    AclStoreError,
    Authorizer,
    authorizer_enabled,
    binding_problem,
    certificate_subject,
    host_of,
    parse_super_users,
    principal_for,
)
from trafka.codec.acl import AclOperation as Op
from trafka.codec.acl import AclPermissionType as Perm
from trafka.codec.acl import AclResourceType as Res
from trafka.codec.acl import PatternType as Pat
from trafka.codec.errors import ErrorCode

ALICE, BOB = "User:alice", "User:bob"
ANYONE = "User:*"
HOST, OTHER_HOST = "10.0.0.1", "10.0.0.2"
LIT, PRE = Pat.LITERAL, Pat.PREFIXED
ALLOW, DENY = Perm.ALLOW, Perm.DENY


def acl(
    name: str,
    op: int = Op.READ,
    perm: int = ALLOW,
    *,
    principal: str = ALICE,
    host: str = "*",
    pattern: int = LIT,
    rtype: int = Res.TOPIC,
) -> AclBinding:
    # Plain numbers, as the codec decodes them (see test_enum_members_...).
    return AclBinding(int(rtype), name, int(pattern), principal, host, int(op), int(perm))


def authorizer(*acls: AclBinding, **kwargs: object) -> Authorizer:
    a = Authorizer(None, **kwargs)  # type: ignore[arg-type]
    assert a.create(acls) == [(ErrorCode.NONE, None)] * len(acls)
    return a


def may(a: Authorizer, op: int, name: str, *, principal: str = ALICE, host: str = HOST) -> bool:
    return a.authorize(principal, host, op, Res.TOPIC, name)


# -- decisions ---------------------------------------------------------------------------


def test_no_acls_denies_unless_allow_everyone_if_no_acl_found() -> None:
    assert not may(authorizer(), Op.READ, "t")
    assert may(authorizer(allow_everyone_if_no_acl_found=True), Op.READ, "t")


def test_allow_everyone_only_covers_resources_no_acl_names() -> None:
    a = authorizer(acl("t", principal=BOB), allow_everyone_if_no_acl_found=True)
    assert not may(a, Op.READ, "t")  # an ACL names t, for someone else: denied
    assert may(a, Op.READ, "u")  # nothing names u
    assert may(a, Op.READ, "t", principal=BOB)
    # A wildcard or a prefix names a resource too.
    a = authorizer(acl("*", principal=BOB), allow_everyone_if_no_acl_found=True)
    assert not may(a, Op.READ, "anything")
    a = authorizer(acl("log", principal=BOB, pattern=PRE), allow_everyone_if_no_acl_found=True)
    assert not may(a, Op.READ, "logs") and may(a, Op.READ, "lo")
    # Other resource types are other resources.
    assert a.authorize(ALICE, HOST, Op.READ, Res.GROUP, "logs")


def test_super_users_are_allowed_everything_even_against_a_deny() -> None:
    a = authorizer(acl("*", Op.ALL, DENY, principal=ANYONE), super_users=["User:admin"])
    assert may(a, Op.DELETE, "t", principal="User:admin")
    assert a.authorize("User:admin", HOST, Op.ALTER, Res.CLUSTER, CLUSTER_NAME)
    assert not may(a, Op.DELETE, "t")
    assert a.authorize_by_type("User:admin", HOST, Op.WRITE, Res.TOPIC)


def test_literal_wildcard_and_prefixed_patterns() -> None:
    a = authorizer(
        acl("orders"),
        acl("*", Op.WRITE),
        acl("logs-", Op.DELETE, pattern=PRE),
    )
    assert may(a, Op.READ, "orders") and not may(a, Op.READ, "orders2")
    assert not may(a, Op.READ, "order")
    assert may(a, Op.WRITE, "anything") and may(a, Op.WRITE, "orders")
    assert may(a, Op.DELETE, "logs-a") and may(a, Op.DELETE, "logs-")
    assert not may(a, Op.DELETE, "logs") and not may(a, Op.DELETE, "xlogs-a")
    # A literal "*" ACL is the wildcard, a prefixed "*" only names "*..." names.
    b = authorizer(acl("*", pattern=PRE))
    assert may(b, Op.READ, "*x") and not may(b, Op.READ, "x")
    # Asking about the resource literally named "*" finds the wildcard ACLs.
    assert may(a, Op.WRITE, "*")


def test_deny_beats_allow_across_patterns() -> None:
    a = authorizer(
        acl("*", Op.ALL),
        acl("secret-", Op.READ, DENY, pattern=PRE),
        acl("plans", Op.ALL, DENY),
    )
    assert may(a, Op.READ, "orders")
    assert not may(a, Op.READ, "secret-x")
    assert may(a, Op.WRITE, "secret-x")  # the DENY is of READ only
    assert not may(a, Op.WRITE, "plans") and not may(a, Op.DESCRIBE, "plans")


def test_all_allows_and_denies_every_operation() -> None:
    a = authorizer(acl("t", Op.ALL))
    for op in RESOURCE_OPERATIONS[Res.TOPIC]:
        assert may(a, op, "t"), op.name
    b = authorizer(acl("t", Op.ALL), acl("t", Op.ALL, DENY, principal=ANYONE))
    assert not any(may(b, op, "t") for op in RESOURCE_OPERATIONS[Res.TOPIC])


@pytest.mark.parametrize("op", [Op.READ, Op.WRITE, Op.DELETE, Op.ALTER])
def test_read_write_delete_and_alter_imply_describe(op: Op) -> None:
    a = authorizer(acl("t", op))
    assert may(a, Op.DESCRIBE, "t")
    assert not may(a, Op.DESCRIBE_CONFIGS, "t")
    others = {Op.READ, Op.WRITE, Op.DELETE, Op.ALTER, Op.CREATE} - {op}
    assert not any(may(a, other, "t") for other in others)


def test_alter_configs_implies_describe_configs_only() -> None:
    a = authorizer(acl("t", Op.ALTER_CONFIGS))
    assert may(a, Op.DESCRIBE_CONFIGS, "t")
    assert not may(a, Op.DESCRIBE, "t") and not may(a, Op.ALTER, "t")
    # DESCRIBE does not imply anything; CREATE does not imply DESCRIBE.
    assert not may(authorizer(acl("t", Op.DESCRIBE)), Op.READ, "t")
    assert not may(authorizer(acl("t", Op.CREATE)), Op.DESCRIBE, "t")


def test_a_deny_of_read_does_not_deny_describe() -> None:
    a = authorizer(acl("t", Op.ALL), acl("t", Op.READ, DENY))
    assert not may(a, Op.READ, "t")
    assert may(a, Op.DESCRIBE, "t")
    # ...and an ALLOW of READ is no ALLOW of DESCRIBE when DESCRIBE itself is denied.
    b = authorizer(acl("t", Op.READ), acl("t", Op.DESCRIBE, DENY))
    assert may(b, Op.READ, "t") and not may(b, Op.DESCRIBE, "t")
    c = authorizer(acl("t", Op.ALTER_CONFIGS), acl("t", Op.DESCRIBE_CONFIGS, DENY))
    assert not may(c, Op.DESCRIBE_CONFIGS, "t") and may(c, Op.ALTER_CONFIGS, "t")


def test_wildcard_principal_and_host_matching() -> None:
    a = authorizer(
        acl("t", principal=ANYONE, host=HOST),
        acl("u", host=OTHER_HOST),
        acl("v", principal=ANYONE),
        acl("v", Op.READ, DENY, principal=BOB, host=OTHER_HOST),
    )
    assert may(a, Op.READ, "t") and may(a, Op.READ, "t", principal=BOB)
    assert not may(a, Op.READ, "t", host=OTHER_HOST)
    assert may(a, Op.READ, "u", host=OTHER_HOST) and not may(a, Op.READ, "u")
    assert not may(a, Op.READ, "u", principal=BOB, host=OTHER_HOST)
    assert may(a, Op.READ, "v", principal=BOB) and not may(
        a, Op.READ, "v", principal=BOB, host=OTHER_HOST
    )
    # Principals and hosts are compared as written (no case folding, no DNS).
    assert not may(a, Op.READ, "u", principal="User:Alice", host=OTHER_HOST)
    assert not may(a, Op.READ, "u", principal="Group:alice", host=OTHER_HOST)


def test_resource_types_are_separate() -> None:
    a = authorizer(acl("g", rtype=Res.GROUP), acl("*", Op.WRITE, rtype=Res.TRANSACTIONAL_ID))
    assert a.authorize(ALICE, HOST, Op.READ, Res.GROUP, "g")
    assert not may(a, Op.READ, "g")
    assert a.authorize(ALICE, HOST, Op.WRITE, Res.TRANSACTIONAL_ID, "tx")
    assert not a.authorize(ALICE, HOST, Op.WRITE, Res.GROUP, "tx")


# -- authorize_by_type (KIP-679) -------------------------------------------------------


def by_type(a: Authorizer, op: int = Op.WRITE, *, principal: str = ALICE) -> bool:
    return a.authorize_by_type(principal, HOST, op, Res.TOPIC)


def test_by_type_without_acls_follows_allow_everyone() -> None:
    assert not by_type(authorizer())
    assert by_type(authorizer(allow_everyone_if_no_acl_found=True))


def test_by_type_an_allow_of_some_topic_is_enough() -> None:
    assert by_type(authorizer(acl("t", Op.WRITE)))
    assert by_type(authorizer(acl("t-", Op.WRITE, pattern=PRE)))
    assert by_type(authorizer(acl("t", Op.ALL, principal=ANYONE)))
    # Another operation, principal, host or type is not.
    assert not by_type(authorizer(acl("t", Op.READ)))
    assert not by_type(authorizer(acl("t", Op.WRITE, principal=BOB)))
    assert not by_type(authorizer(acl("t", Op.WRITE, host=OTHER_HOST)))
    assert not by_type(authorizer(acl("t", Op.WRITE, rtype=Res.GROUP)))
    # No implied operations here (as Kafka): an ALLOW of WRITE is not one of DESCRIBE.
    assert not by_type(authorizer(acl("t", Op.WRITE)), Op.DESCRIBE)


def test_by_type_a_wildcard_deny_denies_even_with_allow_everyone() -> None:
    deny_all = acl("*", Op.WRITE, DENY, principal=ANYONE)
    assert not by_type(authorizer(acl("t", Op.WRITE), deny_all))
    assert not by_type(authorizer(deny_all, allow_everyone_if_no_acl_found=True))
    assert not by_type(authorizer(acl("*", Op.ALL, DENY), acl("t", Op.WRITE)))


def test_by_type_allow_everyone_allows_whatever_other_denies_say() -> None:
    a = authorizer(
        acl("t", Op.WRITE, DENY),
        acl("p", Op.WRITE, DENY, pattern=PRE),
        allow_everyone_if_no_acl_found=True,
    )
    assert by_type(a)


def test_by_type_denies_dominate_allows() -> None:
    # A literal allow denied by the same literal, or by a prefix of it.
    assert not by_type(authorizer(acl("t", Op.WRITE), acl("t", Op.WRITE, DENY)))
    assert not by_type(authorizer(acl("tx", Op.WRITE), acl("t", Op.WRITE, DENY, pattern=PRE)))
    # A prefixed allow dominated by a shorter (or equal) prefixed deny.
    assert not by_type(
        authorizer(acl("tx-", Op.WRITE, pattern=PRE), acl("t", Op.ALL, DENY, pattern=PRE))
    )
    assert not by_type(
        authorizer(acl("tx", Op.WRITE, pattern=PRE), acl("tx", Op.WRITE, DENY, pattern=PRE))
    )
    # A longer prefixed deny, or a literal deny, leaves part of a prefixed allow.
    assert by_type(
        authorizer(acl("t", Op.WRITE, pattern=PRE), acl("tx", Op.WRITE, DENY, pattern=PRE))
    )
    assert by_type(authorizer(acl("t", Op.WRITE, pattern=PRE), acl("t", Op.WRITE, DENY)))
    # A deny of another topic, operation or principal leaves the allow alone.
    assert by_type(authorizer(acl("t", Op.WRITE), acl("u", Op.WRITE, DENY)))
    assert by_type(authorizer(acl("t", Op.WRITE), acl("t", Op.READ, DENY)))
    assert by_type(authorizer(acl("t", Op.WRITE), acl("t", Op.WRITE, DENY, principal=BOB)))
    # A wildcard allow survives literal and prefixed denies (some other name is free).
    assert by_type(
        authorizer(
            acl("*", Op.WRITE), acl("t", Op.WRITE, DENY), acl("a", Op.WRITE, DENY, pattern=PRE)
        )
    )
    # One surviving allow among dominated ones is enough.
    assert by_type(authorizer(acl("t", Op.WRITE), acl("u", Op.WRITE), acl("t", Op.WRITE, DENY)))


def test_by_type_is_how_an_idempotent_producer_without_idempotent_write_gets_in() -> None:
    a = authorizer(acl("orders", Op.WRITE))
    assert not a.authorize(ALICE, HOST, Op.IDEMPOTENT_WRITE, Res.CLUSTER, CLUSTER_NAME)
    assert by_type(a, Op.WRITE)


# -- authorized operations (KIP-430) ---------------------------------------------------


def bits(*ops: int) -> int:
    return sum(1 << op for op in ops)


def test_authorized_operations_bits() -> None:
    a = authorizer(
        acl("t", Op.READ),
        acl("t", Op.ALTER_CONFIGS),
        acl("g", Op.ALL, rtype=Res.GROUP),
        acl(CLUSTER_NAME, Op.IDEMPOTENT_WRITE, rtype=Res.CLUSTER),
    )
    assert a.authorized_operations(ALICE, HOST, Res.TOPIC, "t") == bits(
        Op.READ, Op.DESCRIBE, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS
    )
    assert a.authorized_operations(ALICE, HOST, Res.GROUP, "g") == bits(
        Op.READ, Op.DELETE, Op.DESCRIBE
    )
    assert a.authorized_operations(ALICE, HOST, Res.CLUSTER, CLUSTER_NAME) == bits(
        Op.IDEMPOTENT_WRITE
    )
    assert a.authorized_operations(BOB, HOST, Res.TOPIC, "t") == 0
    # A super user gets every operation of the type, and only those (no ALL bit).
    s = authorizer(super_users=[ALICE])
    assert s.authorized_operations(ALICE, HOST, Res.TOPIC, "x") == bits(
        *RESOURCE_OPERATIONS[Res.TOPIC]
    )
    assert not s.authorized_operations(ALICE, HOST, Res.TOPIC, "x") & bits(Op.ALL, Op.ANY)


# -- filters ---------------------------------------------------------------------------

STORED = [
    acl("orders"),
    acl("*", Op.WRITE, principal=ANYONE),
    acl("ord", Op.DESCRIBE, DENY, pattern=PRE, host=HOST),
    acl("orders-eu", Op.ALL, principal=BOB, pattern=PRE),
    acl("orders", rtype=Res.GROUP),
    acl(CLUSTER_NAME, Op.ALTER, principal=BOB, rtype=Res.CLUSTER),
]


def matched(f: AclFilter) -> list[int]:
    return [i for i, a in enumerate(STORED) if f.matches(a)]


def test_filter_any_matches_everything() -> None:
    assert matched(AclFilter()) == list(range(len(STORED)))
    assert matched(AclFilter(pattern_type=Pat.MATCH)) == list(range(len(STORED)))


def test_filter_literal_and_prefixed_match_patterns_exactly() -> None:
    assert matched(AclFilter(pattern_type=LIT)) == [0, 1, 4, 5]
    assert matched(AclFilter(pattern_type=PRE)) == [2, 3]
    assert matched(AclFilter(Res.TOPIC, "orders", LIT)) == [0]
    assert matched(AclFilter(Res.TOPIC, "ord", PRE)) == [2]
    assert matched(AclFilter(Res.TOPIC, "orders", PRE)) == []
    # ANY with a name: that exact name, either pattern type.
    assert matched(AclFilter(name="orders")) == [0, 4]
    assert matched(AclFilter(Res.TOPIC, "*")) == [1]


def test_filter_match_finds_what_applies_to_a_resource() -> None:
    # The literal name, the wildcard and every prefix of the name.
    assert matched(AclFilter(Res.TOPIC, "orders", Pat.MATCH)) == [0, 1, 2]
    assert matched(AclFilter(Res.TOPIC, "orders-eu-1", Pat.MATCH)) == [1, 2, 3]
    assert matched(AclFilter(Res.TOPIC, "x", Pat.MATCH)) == [1]
    assert matched(AclFilter(name="orders", pattern_type=Pat.MATCH)) == [0, 1, 2, 4]
    # MATCH of "*" itself: the wildcard ACL (a literal "*" names it).
    assert matched(AclFilter(Res.TOPIC, "*", Pat.MATCH)) == [1]


def test_filter_entry_fields() -> None:
    assert matched(AclFilter(principal=BOB)) == [3, 5]
    assert matched(AclFilter(principal=ANYONE)) == [1]  # "User:*" is compared as written
    assert matched(AclFilter(host=HOST)) == [2]
    assert matched(AclFilter(operation=Op.ALL)) == [3]  # ALL in a filter is the ALL ACLs
    assert matched(AclFilter(operation=Op.READ)) == [0, 4]
    assert matched(AclFilter(permission=DENY)) == [2]
    assert matched(AclFilter(Res.CLUSTER)) == [5]
    assert matched(AclFilter(Res.TOPIC, principal=ALICE, permission=ALLOW)) == [0]


def test_filter_problems() -> None:
    assert AclFilter().problem() is None
    assert AclFilter(Res.TOPIC, "t", Pat.MATCH, ALICE, "*", Op.READ, ALLOW).problem() is None
    for bad in (
        AclFilter(resource_type=Res.UNKNOWN),
        AclFilter(resource_type=99),
        AclFilter(pattern_type=Pat.UNKNOWN),
        AclFilter(operation=Op.UNKNOWN),
        AclFilter(operation=200),
        AclFilter(permission=Perm.UNKNOWN),
    ):
        assert bad.problem() is not None, bad
    a = authorizer(acl("t"))
    error, found = a.describe(AclFilter(operation=Op.UNKNOWN))
    assert error is not None and error[0] == ErrorCode.INVALID_REQUEST and found == []
    assert a.describe(AclFilter()) == (None, [acl("t")])


# -- creating and deleting -------------------------------------------------------------


@pytest.mark.parametrize(
    ("binding", "reason"),
    [
        (acl("t", rtype=Res.ANY), "resource type"),
        (acl("t", rtype=Res.UNKNOWN), "resource type"),
        (acl("t", rtype=42), "resource type"),
        (acl("t", pattern=Pat.MATCH), "pattern type"),
        (acl("t", pattern=Pat.ANY), "pattern type"),
        (acl("t", Op.ANY), "operation"),
        (acl("t", Op.UNKNOWN), "operation"),
        (acl("t", perm=Perm.ANY), "permission"),
        (acl("t", perm=Perm.UNKNOWN), "permission"),
        (acl(""), "empty"),
        (acl("my-cluster", Op.ALTER, rtype=Res.CLUSTER), "kafka-cluster"),
        (acl("t", principal="alice"), "Type:Name"),
        (acl("t", principal="User:"), "Type:Name"),
        (acl("t", principal=":alice"), "Type:Name"),
        (acl("t", host=""), "host"),
    ],
)
def test_create_refuses_invalid_bindings_with_a_reason(binding: AclBinding, reason: str) -> None:
    problem = binding_problem(binding)
    assert problem is not None and reason in problem
    a = authorizer()
    good = acl("ok")
    assert a.create([binding, good]) == [
        (ErrorCode.INVALID_REQUEST, problem),
        (ErrorCode.NONE, None),
    ]
    assert a.acls() == [good]


def test_valid_bindings_of_every_kind() -> None:
    for binding in (
        acl(CLUSTER_NAME, Op.IDEMPOTENT_WRITE, rtype=Res.CLUSTER),
        acl("tx", Op.WRITE, rtype=Res.TRANSACTIONAL_ID, pattern=PRE),
        acl("*", Op.ALL, DENY, principal=ANYONE),
        acl("t", principal="User:CN=alice,O=Acme"),  # the name may hold colons and commas
        acl("t", principal="Group:ops", host="::1"),
    ):
        assert binding_problem(binding) is None, binding


def test_duplicates_are_stored_once(tmp_path: Path) -> None:
    store = AclStore(tmp_path / ACLS_JOURNAL, fsync=False)
    a = Authorizer(store)
    one = acl("t")
    assert a.create([one, one]) == [(ErrorCode.NONE, None)] * 2
    assert a.create([one]) == [(ErrorCode.NONE, None)]
    assert a.acls() == [one] and store.acls() == [one]
    a.close()
    reopened = AclStore(tmp_path / ACLS_JOURNAL, fsync=False)
    assert reopened.acls() == [one]
    reopened.close()


def test_delete_reports_an_acl_under_the_first_filter_that_matches() -> None:
    a = authorizer(acl("t"), acl("u"), acl("t", Op.WRITE, principal=BOB))
    by_name = AclFilter(Res.TOPIC, "t")
    results = a.delete([AclFilter(principal=BOB), by_name, AclFilter(), AclFilter(operation=99)])
    assert results[0] == (ErrorCode.NONE, None, [acl("t", Op.WRITE, principal=BOB)])
    assert results[1] == (ErrorCode.NONE, None, [acl("t")])
    assert results[2] == (ErrorCode.NONE, None, [acl("u")])
    assert results[3][0] == ErrorCode.INVALID_REQUEST and results[3][2] == []
    assert a.acls() == []
    assert a.delete([AclFilter()]) == [(ErrorCode.NONE, None, [])]


def test_delete_with_a_match_filter_removes_what_applies() -> None:
    a = authorizer(acl("orders"), acl("ord", pattern=PRE), acl("*"), acl("other"))
    (result,) = a.delete([AclFilter(Res.TOPIC, "orders", Pat.MATCH)])
    assert result[2] == [acl("orders"), acl("ord", pattern=PRE), acl("*")]
    assert a.acls() == [acl("other")]


# -- the journal -----------------------------------------------------------------------


def test_acls_survive_a_reopen_in_creation_order(tmp_path: Path) -> None:
    path = tmp_path / ACLS_JOURNAL
    first = Authorizer(AclStore(path))
    wanted = [acl("t"), acl("p-", Op.ALL, DENY, pattern=PRE), acl("g", rtype=Res.GROUP)]
    first.create(wanted)
    first.create([acl("gone")])
    first.delete([AclFilter(Res.TOPIC, "gone")])
    first.close()
    again = Authorizer(AclStore(path), super_users=["User:admin"])
    assert again.acls() == wanted
    assert may(again, Op.READ, "t") and not may(again, Op.READ, "p-x")
    assert not may(again, Op.READ, "gone")
    again.close()


def test_a_torn_tail_loses_only_the_last_change(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / ACLS_JOURNAL
    store = AclStore(path)
    store.add([acl("kept")])
    before = store.journal_bytes  # the file itself is preallocated
    store.add([acl("torn")])
    store.close()
    data = path.read_bytes()
    assert len(data) > before
    path.write_bytes(data[: before + (len(data) - before) // 2])  # a crash mid-write
    with caplog.at_level(logging.WARNING):
        store = AclStore(path)
    assert store.acls() == [acl("kept")]
    assert "torn" in caplog.text
    store.add([acl("after")])
    store.close()
    store = AclStore(path)
    assert store.acls() == [acl("kept"), acl("after")]
    store.close()


def test_the_journal_compacts_to_the_live_acls(tmp_path: Path) -> None:
    path = tmp_path / ACLS_JOURNAL
    store = AclStore(path, fsync=False, compact_min_bytes=2048)
    for i in range(200):
        store.add([acl(f"t{i}")])
        store.remove([acl(f"t{i}")])
    store.add([acl("last")])
    assert store.journal_bytes < 4096
    store.close()
    store = AclStore(path, fsync=False)
    assert store.acls() == [acl("last")]
    store.close()


def test_a_malformed_or_foreign_journal_is_an_error(tmp_path: Path) -> None:
    from trafka.brokerlite.storage.journal import CrcJournal

    path = tmp_path / ACLS_JOURNAL
    journal = CrcJournal(path, format_name="acls", version=1, fsync=False)
    journal.open()
    journal.append({"kind": "add", "acls": [[2, "t", 3, "User:a", "*", "READ", 3]]})
    journal.close()
    with pytest.raises(AclStoreError, match="malformed"):
        AclStore(path, fsync=False)
    path.unlink()
    journal = CrcJournal(path, format_name="acls", version=1, fsync=False)
    journal.open()
    journal.append({"kind": "rename", "acls": []})
    journal.close()
    with pytest.raises(AclStoreError, match="unknown entry kind"):
        AclStore(path, fsync=False)
    other = tmp_path / "other"
    CrcJournal(other, format_name="offsets", version=1, fsync=False).open()
    with pytest.raises(AclStoreError):
        AclStore(other, fsync=False)


def test_a_failed_write_changes_nothing(tmp_path: Path) -> None:
    store = AclStore(tmp_path / ACLS_JOURNAL, fsync=False)
    a = Authorizer(store)
    a.create([acl("t")])
    store.close()  # later writes fail
    with pytest.raises(AclStoreError):
        a.create([acl("u")])
    with pytest.raises(AclStoreError):
        a.delete([AclFilter()])
    assert a.acls() == [acl("t")]
    assert may(a, Op.READ, "t") and not may(a, Op.READ, "u")


def test_enum_members_are_stored_like_numbers(tmp_path: Path) -> None:
    path = tmp_path / ACLS_JOURNAL
    a = Authorizer(AclStore(path, fsync=False))
    binding = AclBinding(Res.TOPIC, "t", LIT, ALICE, "*", Op.READ, ALLOW)
    try:
        assert a.create([binding]) == [(ErrorCode.NONE, None)]
        assert a.acls() == [binding]
        assert all(type(v) in (int, str) for v in a.acls()[0])
    finally:
        a.close()
    again = Authorizer(AclStore(path, fsync=False))
    try:
        assert again.acls() == [binding]
    finally:
        again.close()


# -- the decision cache ----------------------------------------------------------------


def test_decisions_follow_changes() -> None:
    a = authorizer()
    assert not may(a, Op.READ, "t")
    a.create([acl("t")])
    assert may(a, Op.READ, "t")
    a.create([acl("t", Op.READ, DENY, principal=ANYONE)])
    assert not may(a, Op.READ, "t")
    a.delete([AclFilter(permission=DENY)])
    assert may(a, Op.READ, "t")
    a.delete([AclFilter()])
    assert not may(a, Op.READ, "t")
    # Prefixed ACLs leave the index when their last binding goes.
    a.create([acl("p", pattern=PRE), acl("p", Op.WRITE, pattern=PRE)])
    assert may(a, Op.WRITE, "px")
    a.delete([AclFilter(operation=Op.WRITE)])
    assert may(a, Op.READ, "px") and not may(a, Op.WRITE, "px")
    a.delete([AclFilter()])
    assert not may(a, Op.READ, "px")
    assert not by_type(a, Op.READ)


def test_a_refused_or_duplicate_create_keeps_the_cache() -> None:
    a = authorizer(acl("t"))
    assert may(a, Op.READ, "t")
    a.create([acl("t"), acl("", Op.READ)])
    assert may(a, Op.READ, "t")


# -- helpers and configuration ---------------------------------------------------------


def test_principal_for() -> None:
    assert principal_for("alice", None) == ALICE
    assert principal_for("alice", "CN=x") == ALICE  # SASL wins over the certificate
    assert principal_for(None, "CN=alice,O=Acme") == "User:CN=alice,O=Acme"
    assert principal_for(None, None) == ANONYMOUS == "User:ANONYMOUS"


@pytest.mark.parametrize(
    ("peer", "host"),
    [
        ("127.0.0.1:54321", "127.0.0.1"),
        # IPv6 as Java's getHostAddress writes it, which Kafka's ACL hosts are.
        ("[::1]:9092", "0:0:0:0:0:0:0:1"),
        ("::1:9092", "0:0:0:0:0:0:0:1"),
        ("[fe80::a:1%eth0]:9092", "fe80:0:0:0:0:0:a:1"),
        ("10.1.2.3", "10.1.2.3"),
        ("?", "?"),
    ],
)
def test_host_of(peer: str, host: str) -> None:
    assert host_of(peer) == host


def test_certificate_subject() -> None:
    cert = {
        "subject": (
            (("countryName", "DE"),),
            (("organizationName", "Acme, Inc."),),
            (("organizationalUnitName", "ops"), ("userId", "7")),
            (("commonName", " alice"),),
        )
    }
    assert certificate_subject(cert) == r"CN=\ alice,OU=ops+UID=7,O=Acme\, Inc.,C=DE"
    assert certificate_subject({"subject": ((("commonName", "#1;a+b"),),)}) == r"CN=\#1\;a\+b"
    assert certificate_subject({"subject": ((("1.2.3.4", "x"),),)}) == "1.2.3.4=x"
    # An e-mail address as Java's X500Principal.getName() writes it (the principal
    # a Kafka broker's SSL listener gives): its OID and the DER of its IA5String.
    email = {"subject": ((("emailAddress", "a@b"),), (("commonName", "app"),))}
    assert certificate_subject(email) == "CN=app,1.2.840.113549.1.9.1=#1603614062"
    assert certificate_subject(None) is None
    assert certificate_subject({}) is None
    assert certificate_subject({"subject": ()}) is None


def test_parse_super_users() -> None:
    assert parse_super_users(None) == ()
    assert parse_super_users("") == ()
    assert parse_super_users("User:admin; User:CN=x,O=y ;;") == ("User:admin", "User:CN=x,O=y")
    assert parse_super_users(["User:a", " User:b "]) == ("User:a", "User:b")
    for bad in ("admin", "User:", "User:a;bob", ":x"):
        with pytest.raises(ValueError, match="Type:Name"):
            parse_super_users(bad)


def test_authorizer_class_names() -> None:
    assert not authorizer_enabled(None) and not authorizer_enabled("  ")
    assert authorizer_enabled("org.apache.kafka.metadata.authorizer.StandardAuthorizer")
    assert authorizer_enabled(" kafka.security.authorizer.AclAuthorizer ")
    with pytest.raises(ValueError, match=r"com\.example\.Custom"):
        authorizer_enabled("com.example.Custom")


def test_broker_config_names_and_errors() -> None:
    config = BrokerConfig.from_mapping(
        {
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "super.users": "User:admin;User:ops",
            "allow.everyone.if.no.acl.found": "true",
        }
    )
    assert config.authorizer_class_name == "kafka.security.authorizer.AclAuthorizer"
    assert config.super_users == ("User:admin", "User:ops")
    assert config.allow_everyone_if_no_acl_found is True
    python = BrokerConfig(
        authorizer_class_name="org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        super_users=("User:admin",),
    )
    assert python.super_users == ("User:admin",) and not python.allow_everyone_if_no_acl_found
    with pytest.raises(ConfigError, match="standard ACL authorizer only"):
        BrokerConfig(authorizer_class_name="com.example.Custom")
    with pytest.raises(ConfigError, match="admin"):
        BrokerConfig.from_mapping({"super.users": "admin"})


# -- the rules against a plain model ---------------------------------------------------

NAMES = st.text(alphabet="ab", min_size=1, max_size=3)
PRINCIPALS = [ALICE, BOB, ANYONE]
HOSTS = [HOST, OTHER_HOST, "*"]
OPS = [Op.ALL, Op.READ, Op.WRITE, Op.DELETE, Op.ALTER, Op.DESCRIBE, Op.CREATE]
OPS += [Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS]
BINDINGS = st.builds(
    AclBinding,
    st.sampled_from([Res.TOPIC, Res.GROUP]),
    st.one_of(NAMES, st.just("*")),
    st.sampled_from([LIT, PRE]),
    st.sampled_from(PRINCIPALS),
    st.sampled_from(HOSTS),
    st.sampled_from(OPS),
    st.sampled_from([ALLOW, DENY]),
)
IMPLIES = {
    Op.DESCRIBE: {Op.READ, Op.WRITE, Op.DELETE, Op.ALTER},
    Op.DESCRIBE_CONFIGS: {Op.ALTER_CONFIGS},
}


def model(
    acls: list[AclBinding], allow_everyone: bool, principal: str, host: str, op: int, name: str
) -> bool:
    """Kafka's rules, read off their statement (topics; no super users)."""
    applying = [
        a
        for a in acls
        if a.resource_type == Res.TOPIC
        and (
            (a.pattern_type == LIT and a.name in (name, "*"))
            or (a.pattern_type == PRE and name.startswith(a.name))
        )
    ]
    if not applying:
        return allow_everyone
    mine = [a for a in applying if a.principal in (principal, ANYONE) and a.host in (host, "*")]
    if any(a.permission == DENY and a.operation in (op, Op.ALL) for a in mine):
        return False
    wanted = {op, Op.ALL} | IMPLIES.get(op, set())  # type: ignore[call-overload]
    return any(a.permission == ALLOW and a.operation in wanted for a in mine)


ASKED = [(p, h, op) for p in (ALICE, BOB) for h in (HOST, OTHER_HOST) for op in OPS[1:]]


@settings(max_examples=300, deadline=None)
@given(
    acls=st.lists(BINDINGS, max_size=12),
    allow_everyone=st.booleans(),
    names=st.lists(st.one_of(NAMES, st.just("*")), min_size=1, max_size=6),
)
def test_authorize_agrees_with_the_model(
    acls: list[AclBinding], allow_everyone: bool, names: list[str]
) -> None:
    """Every principal, host and operation is asked about every name, before
    and after changes (so that the decision cache is tested too)."""
    a = Authorizer(None, allow_everyone_if_no_acl_found=allow_everyone)
    half = len(acls) // 2
    a.create(acls[:half])
    for principal, host, op in ASKED:  # fill the cache, then change the ACLs under it
        for name in names:
            a.authorize(principal, host, op, Res.TOPIC, name)
    a.create(acls[half:])
    gone = AclFilter(Res.TOPIC, names[0], Pat.MATCH)
    for expected_acls in (acls, [x for x in acls if not gone.matches(x)]):
        for principal, host, op in ASKED:
            for name in names:
                expected = model(expected_acls, allow_everyone, principal, host, op, name)
                got = a.authorize(principal, host, op, Res.TOPIC, name)
                assert got == expected, (principal, host, Op(op).name, name)
        a.delete([gone])


@settings(max_examples=300, deadline=None)
@given(acls=st.lists(BINDINGS, max_size=10))
def test_authorize_by_type_means_some_topic_is_allowed(acls: list[AclBinding]) -> None:
    """Without allow_everyone_if_no_acl_found and for operations that nothing
    implies, Kafka's rule is exact: names use the letters a and b, so a name
    ending in c is a witness no ACL but a wildcard or a prefix of it can name."""
    a = authorizer(*dict.fromkeys(acls))
    candidates = {"c"} | {x.name for x in acls if x.name != "*"} | {x.name + "c" for x in acls}
    for principal, host, op in ASKED:
        if op in IMPLIES:
            continue
        some = any(a.authorize(principal, host, op, Res.TOPIC, n) for n in candidates)
        assert a.authorize_by_type(principal, host, op, Res.TOPIC) == some, (principal, host, op)
