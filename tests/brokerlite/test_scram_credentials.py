"""SCRAM credentials through DescribeUserScramCredentials and
AlterUserScramCredentials (KIP-554) in the sans-IO broker core: Kafka's error
codes, logins with what the API set, durability across restarts, and the
journal that keeps them (:mod:`trafka.brokerlite.security.scram`).

Requests go through the real codec both ways (``Core.call``); logins are SCRAM
exchanges driven by :class:`trafka.codec.sasl.ScramClient`.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from trafka.brokerlite.outcomes import Close
from trafka.brokerlite.security.scram import SCRAM_JOURNAL, ScramCredentialStore, ScramStoreError
from trafka.brokerlite.storage.journal import CrcJournal
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k03_metadata as metadata
from trafka.codec.messages import k17_sasl_handshake as handshake
from trafka.codec.messages import k18_api_versions as api_versions
from trafka.codec.messages import k36_sasl_authenticate as authenticate
from trafka.codec.messages import k50_describe_user_scram_credentials as describe
from trafka.codec.messages import k51_alter_user_scram_credentials as alter
from trafka.codec.sasl import ScramClient, ScramCredential, plain_message, salted_password

CONFIG_USERS = {"alice": "alice-secret", "carol": "carol-secret"}
SASL = {"security_protocol": "SASL_PLAINTEXT", "sasl_users": CONFIG_USERS}
SHA256, SHA512 = 1, 2
NAMES = {SHA256: "SCRAM-SHA-256", SHA512: "SCRAM-SHA-512"}

Upsertion = alter.AlterUserScramCredentialsRequest.ScramCredentialUpsertion
Deletion = alter.AlterUserScramCredentialsRequest.ScramCredentialDeletion


def upsertion(
    name: str,
    password: str,
    mechanism: int = SHA256,
    iterations: int = 4096,
    salt: bytes | None = None,
) -> Upsertion:
    """What a client sends: its own salt, and the password salted with it."""
    salt = os.urandom(20) if salt is None else salt
    hashed = (
        salted_password(NAMES[mechanism], password, salt, iterations)
        if mechanism in NAMES and iterations > 0
        else b"x" * 32
    )
    return Upsertion(
        name=name, mechanism=mechanism, iterations=iterations, salt=salt, salted_password=hashed
    )


def alter_call(
    core: Any, upsertions: Sequence[Upsertion] = (), deletions: Sequence[Deletion] = ()
) -> dict[str, tuple[int, str | None]]:
    """Send AlterUserScramCredentials; the results by user (one per user, checked)."""
    response = core.call(
        51,
        0,
        alter.AlterUserScramCredentialsRequest(
            upsertions=list(upsertions), deletions=list(deletions)
        ),
    )
    users = [r.user for r in response.results]
    assert len(users) == len(set(users)), "one result per user"
    return {r.user: (r.error_code, r.error_message) for r in response.results}


def described(core: Any, users: list[str] | None = None) -> dict[str, Any]:
    """DescribeUserScramCredentials: ``{user: {mechanism: iterations}}``, or
    ``{user: error code}`` for a user that failed."""
    request = describe.DescribeUserScramCredentialsRequest(
        users=None
        if users is None
        else [describe.DescribeUserScramCredentialsRequest.UserName(name=u) for u in users]
    )
    response = core.call(50, 0, request)
    assert response.error_code == ErrorCode.NONE
    out: dict[str, Any] = {}
    for r in response.results:
        if r.error_code:
            assert r.credential_infos == [] and r.error_message
            out[r.user] = ErrorCode(r.error_code)
        else:
            out[r.user] = {NAMES[c.mechanism]: c.iterations for c in r.credential_infos}
    return out


def try_login(core: Any, mechanism: str, user: str, password: str, conn_id: int) -> bool:
    """A SCRAM login on a new connection; True when the broker accepted it."""
    response = core.call(
        17, 1, handshake.SaslHandshakeRequest(mechanism=mechanism), conn_id=conn_id
    )
    assert response.error_code == ErrorCode.NONE
    if mechanism == "PLAIN":
        tokens = [plain_message(user, password)]
        client = None
    else:
        client = ScramClient(mechanism, user, password)
        tokens = [client.first_message()]
    answer = b""
    for step in range(2 if client is not None else 1):
        if step == 1:
            assert client is not None
            tokens.append(client.final_message(answer))
        outcome = core.send(
            36, 2, authenticate.SaslAuthenticateRequest(auth_bytes=tokens[-1]), conn_id=conn_id
        )
        if isinstance(outcome, Close):
            body = core.decode(outcome.reply)
            assert body.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
            return False
        body = core.decode(outcome)
        assert body.error_code == ErrorCode.NONE
        answer = body.auth_bytes
    if client is not None:
        client.verify(answer)  # the broker proved it holds the same credential
    return True


class Logins:
    """Fresh connection ids for login attempts, one per attempt."""

    def __init__(self, core: Any) -> None:
        self.core = core
        self.next_conn = 100

    def __call__(self, mechanism: str, user: str, password: str) -> bool:
        self.next_conn += 1
        return try_login(self.core, mechanism, user, password, self.next_conn)


def open_admin_core(open_core: Any, **settings: Any) -> Any:
    """A core whose connection 1 (where ``Core.call`` sends) has logged in, on a
    SASL listener as alice with PLAIN, so that admin requests are served."""
    core = open_core(**settings)
    if settings.get("security_protocol"):
        assert try_login(core, "PLAIN", "alice", CONFIG_USERS["alice"], conn_id=1)
    return core


@pytest.fixture
def sasl(open_core: Any) -> Any:
    return open_admin_core(open_core, **SASL)


# -- advertised ---------------------------------------------------------------------------


def test_both_apis_are_advertised_at_version_0(sasl: Any) -> None:
    response = sasl.call(18, 3, api_versions.ApiVersionsRequest())
    ranges = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert ranges[50] == (0, 0)
    assert ranges[51] == (0, 0)


# -- describe ------------------------------------------------------------------------------


def test_describe_lists_the_configured_users_for_every_enabled_mechanism(sasl: Any) -> None:
    both = {"SCRAM-SHA-256": 4096, "SCRAM-SHA-512": 4096}
    assert described(sasl) == {"alice": both, "carol": both}
    # An empty list is "every user" too, as in Kafka.
    assert described(sasl, []) == described(sasl)
    assert described(sasl, ["carol"]) == {"carol": both}


def test_describe_lists_only_the_enabled_scram_mechanisms(open_core: Any) -> None:
    core = open_admin_core(open_core, **SASL, sasl_enabled_mechanisms="PLAIN,SCRAM-SHA-512")
    assert described(core) == {
        "alice": {"SCRAM-SHA-512": 4096},
        "carol": {"SCRAM-SHA-512": 4096},
    }


def test_describe_answers_unknown_and_duplicated_users_per_user(sasl: Any) -> None:
    answer = described(sasl, ["nobody", "alice", "carol", "carol", "", "carol"])
    assert answer == {
        "nobody": ErrorCode.RESOURCE_NOT_FOUND,
        "alice": {"SCRAM-SHA-256": 4096, "SCRAM-SHA-512": 4096},
        "carol": ErrorCode.DUPLICATE_RESOURCE,
        "": ErrorCode.RESOURCE_NOT_FOUND,
    }


def test_describe_keeps_the_order_of_the_request(sasl: Any) -> None:
    request = describe.DescribeUserScramCredentialsRequest(
        users=[describe.DescribeUserScramCredentialsRequest.UserName(name=n) for n in "zca"]
    )
    response = sasl.call(50, 0, request)
    assert [r.user for r in response.results] == ["z", "c", "a"]


def test_a_plaintext_broker_has_no_users_until_the_api_sets_some(core: Any) -> None:
    assert described(core) == {}
    assert described(core, ["alice"]) == {"alice": ErrorCode.RESOURCE_NOT_FOUND}
    assert alter_call(core, [upsertion("dave", "pw", SHA512, 8192)]) == {
        "dave": (ErrorCode.NONE, None)
    }
    assert described(core) == {"dave": {"SCRAM-SHA-512": 8192}}


# -- alter: Kafka's error codes ------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "code"),
    [
        (upsertion("dave", "pw", iterations=4095), ErrorCode.UNACCEPTABLE_CREDENTIAL),
        (upsertion("dave", "pw", iterations=16385), ErrorCode.UNACCEPTABLE_CREDENTIAL),
        (upsertion("dave", "pw", iterations=-1), ErrorCode.UNACCEPTABLE_CREDENTIAL),
        (upsertion("", "pw"), ErrorCode.UNACCEPTABLE_CREDENTIAL),
        (upsertion("dave", "pw", mechanism=0), ErrorCode.UNSUPPORTED_SASL_MECHANISM),
        (upsertion("dave", "pw", mechanism=3), ErrorCode.UNSUPPORTED_SASL_MECHANISM),
        (upsertion("dave", "pw", mechanism=-1), ErrorCode.UNSUPPORTED_SASL_MECHANISM),
        (
            Upsertion(
                name="dave", mechanism=SHA256, iterations=4096, salt=b"s", salted_password=b""
            ),
            ErrorCode.UNACCEPTABLE_CREDENTIAL,
        ),
        (Deletion(name="dave", mechanism=SHA256), ErrorCode.RESOURCE_NOT_FOUND),
        (Deletion(name="alice", mechanism=0), ErrorCode.UNSUPPORTED_SASL_MECHANISM),
        (Deletion(name="alice", mechanism=7), ErrorCode.UNSUPPORTED_SASL_MECHANISM),
        (Deletion(name="", mechanism=SHA256), ErrorCode.UNACCEPTABLE_CREDENTIAL),
    ],
    ids=[
        "too-few-iterations",
        "too-many-iterations",
        "negative-iterations",
        "empty-name-upsert",
        "mechanism-0",
        "mechanism-3",
        "mechanism-negative",
        "empty-salted-password",
        "delete-missing",
        "delete-mechanism-0",
        "delete-mechanism-7",
        "empty-name-delete",
    ],
)
def test_a_refused_change_changes_nothing(sasl: Any, change: Any, code: ErrorCode) -> None:
    before = described(sasl)
    if isinstance(change, Upsertion):
        results = alter_call(sasl, [change])
    else:
        results = alter_call(sasl, deletions=[change])
    assert results[change.name][0] == code
    assert results[change.name][1]  # a message saying why
    assert described(sasl) == before


def test_the_iteration_bounds_themselves_are_accepted(sasl: Any) -> None:
    results = alter_call(
        sasl, [upsertion("low", "pw", iterations=4096), upsertion("high", "pw", iterations=16384)]
    )
    assert results == {"low": (ErrorCode.NONE, None), "high": (ErrorCode.NONE, None)}
    assert described(sasl, ["low", "high"]) == {
        "low": {"SCRAM-SHA-256": 4096},
        "high": {"SCRAM-SHA-256": 16384},
    }


def test_a_user_named_twice_is_a_duplicate_and_none_of_its_changes_is_made(sasl: Any) -> None:
    results = alter_call(
        sasl,
        [
            upsertion("dave", "one", SHA256),
            upsertion("dave", "two", SHA512),  # another mechanism: still the same user
            upsertion("erin", "pw", SHA256),
            upsertion("alice", "new", SHA256),  # also deleted below
        ],
        [Deletion(name="alice", mechanism=SHA256), Deletion(name="carol", mechanism=SHA512)],
    )
    assert {user: code for user, (code, _) in results.items()} == {
        "dave": ErrorCode.DUPLICATE_RESOURCE,
        "alice": ErrorCode.DUPLICATE_RESOURCE,
        "erin": ErrorCode.NONE,
        "carol": ErrorCode.NONE,
    }
    both = {"SCRAM-SHA-256": 4096, "SCRAM-SHA-512": 4096}
    assert described(sasl) == {
        "alice": both,  # untouched: its deletion and upsertion were both refused
        "carol": {"SCRAM-SHA-256": 4096},
        "erin": {"SCRAM-SHA-256": 4096},
    }


def test_two_deletions_of_one_user_are_a_duplicate(sasl: Any) -> None:
    results = alter_call(
        sasl,
        deletions=[
            Deletion(name="alice", mechanism=SHA256),
            Deletion(name="alice", mechanism=SHA512),
            Deletion(name="alice", mechanism=SHA512),
        ],
    )
    assert results["alice"][0] == ErrorCode.DUPLICATE_RESOURCE
    assert described(sasl, ["alice"])["alice"] == {"SCRAM-SHA-256": 4096, "SCRAM-SHA-512": 4096}


def test_a_users_first_error_is_the_one_reported(sasl: Any) -> None:
    # Kafka: once a user has an error, its later changes are not looked at.
    results = alter_call(
        sasl,
        [upsertion("dave", "pw", iterations=100), upsertion("dave", "pw")],
        [Deletion(name="erin", mechanism=SHA256)],
    )
    assert results["erin"][0] == ErrorCode.RESOURCE_NOT_FOUND
    assert results["dave"][0] == ErrorCode.UNACCEPTABLE_CREDENTIAL
    results = alter_call(sasl, [upsertion("erin", "pw")], [Deletion(name="erin", mechanism=SHA256)])
    assert results["erin"][0] == ErrorCode.RESOURCE_NOT_FOUND  # not DUPLICATE_RESOURCE
    assert "erin" not in described(sasl)


def test_results_come_in_the_order_the_request_names_the_users(sasl: Any) -> None:
    response = sasl.call(
        51,
        0,
        alter.AlterUserScramCredentialsRequest(
            deletions=[
                Deletion(name="nobody", mechanism=SHA256),
                Deletion(name="carol", mechanism=SHA256),
            ],
            upsertions=[upsertion("zed", "pw"), upsertion("amy", "pw")],
        ),
    )
    assert [r.user for r in response.results] == ["nobody", "carol", "zed", "amy"]


# -- alter: what logins see ----------------------------------------------------------------


@pytest.mark.parametrize("mechanism", [SHA256, SHA512])
def test_an_upserted_credential_logs_in_at_once_and_a_deleted_one_no_more(
    sasl: Any, mechanism: int
) -> None:
    name = NAMES[mechanism]
    login = Logins(sasl)
    assert not login(name, "dave", "dave-pw")
    assert alter_call(sasl, [upsertion("dave", "dave-pw", mechanism, 8192)]) == {
        "dave": (ErrorCode.NONE, None)
    }
    assert login(name, "dave", "dave-pw")
    assert not login(name, "dave", "wrong")
    other = NAMES[SHA512 if mechanism == SHA256 else SHA256]
    assert not login(other, "dave", "dave-pw")  # only the mechanism that was set
    assert not login("PLAIN", "dave", "dave-pw")  # PLAIN passwords come from the config only
    assert alter_call(sasl, deletions=[Deletion(name="dave", mechanism=mechanism)]) == {
        "dave": (ErrorCode.NONE, None)
    }
    assert not login(name, "dave", "dave-pw")


def test_a_new_password_replaces_the_configured_one_and_plain_keeps_its_own(sasl: Any) -> None:
    login = Logins(sasl)
    assert login("SCRAM-SHA-256", "alice", "alice-secret")
    alter_call(sasl, [upsertion("alice", "changed", SHA256)])
    assert login("SCRAM-SHA-256", "alice", "changed")
    assert not login("SCRAM-SHA-256", "alice", "alice-secret")
    assert login("SCRAM-SHA-512", "alice", "alice-secret")  # the other mechanism is untouched
    assert login("PLAIN", "alice", "alice-secret")
    alter_call(sasl, deletions=[Deletion(name="alice", mechanism=SHA512)])
    assert not login("SCRAM-SHA-512", "alice", "alice-secret")
    assert login("PLAIN", "alice", "alice-secret")


def test_a_connection_that_logged_in_stays_when_its_credential_goes(sasl: Any) -> None:
    assert try_login(sasl, "SCRAM-SHA-256", "carol", "carol-secret", conn_id=7)
    alter_call(sasl, deletions=[Deletion(name="carol", mechanism=SHA256)])
    assert sasl.broker.connections.principal(7) == "carol"
    body = sasl.call(3, 12, metadata.MetadataRequest(topics=[]), conn_id=7)
    assert [b.node_id for b in body.brokers] == [1]


def test_the_broker_keeps_the_salt_and_iterations_the_client_chose(sasl: Any) -> None:
    salt = b"chosen-by-the-client"
    alter_call(sasl, [upsertion("dave", "pw", SHA512, 5000, salt=salt)])
    credential = sasl.broker.sasl_users.scram_credential("SCRAM-SHA-512", "dave")
    expected = ScramCredential.from_password("SCRAM-SHA-512", "pw", salt=salt, iterations=5000)
    assert credential == expected


# -- durability ----------------------------------------------------------------------------


def test_changes_survive_a_restart_and_win_over_the_configuration(
    open_core: Any, data_dir: Path
) -> None:
    core = open_admin_core(open_core, **SASL)
    alter_call(
        core,
        [upsertion("dave", "dave-pw", SHA512), upsertion("alice", "changed", SHA256)],
        [Deletion(name="carol", mechanism=SHA256)],
    )
    alter_call(core, deletions=[Deletion(name="carol", mechanism=SHA512)])
    expected = described(core)
    assert "carol" not in expected
    core.broker.close()

    again = open_admin_core(open_core, **SASL)
    assert described(again) == expected
    login = Logins(again)
    assert login("SCRAM-SHA-512", "dave", "dave-pw")
    assert login("SCRAM-SHA-256", "alice", "changed")
    assert not login("SCRAM-SHA-256", "alice", "alice-secret")
    assert login("SCRAM-SHA-512", "alice", "alice-secret")
    assert not login("SCRAM-SHA-256", "carol", "carol-secret")  # its deletion holds
    assert not login("SCRAM-SHA-512", "carol", "carol-secret")
    assert login("PLAIN", "carol", "carol-secret")  # PLAIN is the configuration's


def test_a_deleted_api_user_stays_deleted_and_a_configured_one_can_come_back(
    open_core: Any,
) -> None:
    core = open_admin_core(open_core, **SASL)
    alter_call(core, [upsertion("dave", "pw")])
    alter_call(core, deletions=[Deletion(name="dave", mechanism=SHA256)])
    alter_call(core, deletions=[Deletion(name="alice", mechanism=SHA256)])
    alter_call(core, [upsertion("alice", "back", SHA256)])
    core.broker.close()
    again = open_admin_core(open_core, **SASL)
    assert "dave" not in described(again)
    assert Logins(again)("SCRAM-SHA-256", "alice", "back")


def test_credentials_set_without_sasl_are_there_when_sasl_is_turned_on(
    open_core: Any,
) -> None:
    plain = open_core()
    alter_call(plain, [upsertion("dave", "pw", SHA512)])
    plain.broker.close()
    secured = open_admin_core(open_core, **SASL)
    assert described(secured)["dave"] == {"SCRAM-SHA-512": 4096}
    assert Logins(secured)("SCRAM-SHA-512", "dave", "pw")


def test_the_journal_holds_no_password_nor_salted_password(open_core: Any, data_dir: Path) -> None:
    core = open_admin_core(open_core, **SASL)
    password = "a-very-recognisable-password"
    change = upsertion("dave", password, SHA256)
    alter_call(core, [change])
    data = (data_dir / SCRAM_JOURNAL).read_bytes()
    assert b"dave" in data
    assert password.encode() not in data
    assert change.salted_password not in data
    assert base64.b64encode(change.salted_password) not in data


def test_a_failed_write_changes_nothing_and_says_so(sasl: Any) -> None:
    before = described(sasl)
    sasl.broker.scram.store.close()  # every write now fails
    results = alter_call(
        sasl,
        [upsertion("dave", "pw"), upsertion("erin", "pw", iterations=1)],
        [Deletion(name="alice", mechanism=SHA256)],
    )
    assert results["dave"][0] == ErrorCode.KAFKA_STORAGE_ERROR
    assert results["alice"][0] == ErrorCode.KAFKA_STORAGE_ERROR
    assert results["erin"][0] == ErrorCode.UNACCEPTABLE_CREDENTIAL
    assert described(sasl) == before
    assert not Logins(sasl)("SCRAM-SHA-256", "dave", "pw")


def test_secrets_stay_out_of_the_logs(sasl: Any, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("DEBUG")
    change = upsertion("dave", "log-me-not", SHA512)
    alter_call(sasl, [change])
    text = caplog.text
    assert "dave" in text  # the change is logged...
    assert "log-me-not" not in text  # ...without its secrets
    assert repr(change.salted_password) not in text
    credential = sasl.broker.sasl_users.scram_credential("SCRAM-SHA-512", "dave")
    assert repr(credential.stored_key) not in repr(credential)


# -- the journal store ---------------------------------------------------------------------


def _credential(password: str = "pw", mechanism: str = "SCRAM-SHA-256") -> ScramCredential:
    return ScramCredential.from_password(mechanism, password)


def test_store_replays_sets_hides_and_forgets(tmp_path: Path) -> None:
    path = tmp_path / "scram.journal"
    one, two = _credential("one"), _credential("two", "SCRAM-SHA-512")
    with ScramCredentialStore(path) as store:
        store.alter(sets=[("a", one), ("b", two)])
        store.alter(hides=[("c", "SCRAM-SHA-256")], forgets=[("b", "SCRAM-SHA-512")])
        store.alter(sets=[("a", two)])
        expected = dict(store.changes())
    assert expected == {
        ("a", "SCRAM-SHA-512"): two,
        ("a", "SCRAM-SHA-256"): one,
        ("c", "SCRAM-SHA-256"): None,
    }
    with ScramCredentialStore(path) as store:
        assert dict(store.changes()) == expected


def test_store_compaction_keeps_the_state(tmp_path: Path) -> None:
    path = tmp_path / "scram.journal"
    with ScramCredentialStore(path, compact_min_bytes=0) as store:
        for i in range(50):
            store.alter(sets=[(f"u{i % 3}", _credential(str(i)))])
        store.alter(hides=[("gone", "SCRAM-SHA-512")])
        expected = dict(store.changes())
        store.compact()
        assert store.journal_bytes < 3000
    with ScramCredentialStore(path) as store:
        assert dict(store.changes()) == expected


def test_a_torn_last_entry_is_dropped_whole(tmp_path: Path) -> None:
    path = tmp_path / "scram.journal"
    with ScramCredentialStore(path) as store:
        store.alter(sets=[("a", _credential())])
        size = store.journal_bytes
        store.alter(sets=[("b", _credential()), ("c", _credential())])
    with open(path, "r+b") as f:
        f.truncate(size + 20)  # the second request's entry, torn
    with ScramCredentialStore(path) as store:
        assert set(store.changes()) == {("a", "SCRAM-SHA-256")}


def test_an_entry_from_a_newer_brokerlite_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "scram.journal"
    ScramCredentialStore(path).close()
    journal = CrcJournal(path, format_name="scram-credentials", version=1)
    journal.open()
    journal.append({"kind": "rename", "user": "a"})
    journal.close()
    with pytest.raises(ScramStoreError, match="unknown entry kind 'rename'"):
        ScramCredentialStore(path)
