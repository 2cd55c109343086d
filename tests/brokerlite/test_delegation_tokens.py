"""Delegation tokens (KIP-48) in the sans-IO broker core: the four APIs through
the codec both ways (``Core``), SCRAM logins with ``tokenauth=true``, Kafka's
error codes and lifetimes, ACLs, and durability across restarts
(:mod:`trafka.brokerlite.security.delegation_tokens`).

Connection 1 is alice's (PLAIN) unless a test says otherwise; token logins are
SCRAM exchanges driven by :class:`trafka.codec.sasl.ScramClient` with the
extension, on connections of their own.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from typing import Any

import pytest

from trafka.brokerlite.outcomes import Close
from trafka.brokerlite.security.delegation_tokens import TOKENS_JOURNAL
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k17_sasl_handshake as handshake
from trafka.codec.messages import k18_api_versions as api_versions
from trafka.codec.messages import k30_create_acls as create_acls
from trafka.codec.messages import k36_sasl_authenticate as authenticate
from trafka.codec.messages import k38_create_delegation_token as create
from trafka.codec.messages import k39_renew_delegation_token as renew
from trafka.codec.messages import k40_expire_delegation_token as expire
from trafka.codec.messages import k41_describe_delegation_token as describe
from trafka.codec.sasl import ScramClient

pytestmark = pytest.mark.timeout(60)

SECRET = "the-token-secret"
USERS = {"alice": "alice-pw", "bob": "bob-pw", "carol": "carol-pw", "admin": "admin-pw"}
HOUR = 3_600_000
DAY = 24 * HOUR
SASL: dict[str, Any] = {
    "security_protocol": "SASL_PLAINTEXT",
    "sasl_users": USERS,
    "delegation_token_secret_key": SECRET,
}
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
Renewer = create.CreateDelegationTokenRequest.CreatableRenewers
Owner = describe.DescribeDelegationTokenRequest.DescribeDelegationTokenOwner


class Tokens:
    """A core on a SASL listener with connections per user, and the token calls."""

    def __init__(self, core: Any) -> None:
        self.core = core
        self.conns: dict[str, int] = {}
        self.next_conn = 100

    def conn(self, user: str) -> int:
        """A connection logged in as ``user`` with PLAIN (made once per user)."""
        if user not in self.conns:
            self.next_conn += 1
            self.core.login(user, USERS[user], conn_id=self.next_conn)
            self.conns[user] = self.next_conn
        return self.conns[user]

    def create(
        self,
        user: str = "alice",
        *,
        renewers: tuple[str, ...] = (),
        owner: str | None = None,
        max_lifetime_ms: int = -1,
        version: int = 3,
        conn_id: int | None = None,
    ) -> Any:
        kind, _, name = owner.partition(":") if owner else ("", "", "")
        request = create.CreateDelegationTokenRequest(
            owner_principal_type=kind,
            owner_principal_name=name,
            renewers=[
                Renewer(principal_type=r.partition(":")[0], principal_name=r.partition(":")[2])
                for r in renewers
            ],
            max_lifetime_ms=max_lifetime_ms,
        )
        return self.core.call(
            38, version, request, conn_id=self.conn(user) if conn_id is None else conn_id
        )

    def renew(self, user: str, token_hmac: bytes, period: int = -1, version: int = 2) -> Any:
        request = renew.RenewDelegationTokenRequest(hmac=token_hmac, renew_period_ms=period)
        return self.core.call(39, version, request, conn_id=self.conn(user))

    def expire(self, user: str, token_hmac: bytes, period: int = -1, version: int = 2) -> Any:
        request = expire.ExpireDelegationTokenRequest(hmac=token_hmac, expiry_time_period_ms=period)
        return self.core.call(40, version, request, conn_id=self.conn(user))

    def describe(
        self, user: str = "alice", owners: list[str] | None = None, version: int = 3
    ) -> Any:
        request = describe.DescribeDelegationTokenRequest(
            owners=None
            if owners is None
            else [
                Owner(principal_type=o.partition(":")[0], principal_name=o.partition(":")[2])
                for o in owners
            ]
        )
        return self.core.call(41, version, request, conn_id=self.conn(user))

    def ids(self, user: str = "alice", owners: list[str] | None = None) -> list[str]:
        answer = self.describe(user, owners)
        assert answer.error_code == ErrorCode.NONE
        return [t.token_id for t in answer.tokens]

    def login(
        self,
        token_id: str,
        password: str,
        *,
        mechanism: str = "SCRAM-SHA-256",
        tokenauth: bool = True,
    ) -> tuple[int, Any] | None:
        """A SCRAM token login on a new connection: (conn id, the last
        SaslAuthenticate answer), or None when the broker refused it."""
        self.next_conn += 1
        conn_id = self.next_conn
        self.core.broker.connection_opened(conn_id, "127.0.0.1:40000")
        shake = self.core.call(
            17, 1, handshake.SaslHandshakeRequest(mechanism=mechanism), conn_id=conn_id
        )
        assert shake.error_code == ErrorCode.NONE
        client = ScramClient(
            mechanism, token_id, password, extensions={"tokenauth": "true"} if tokenauth else None
        )
        message = client.first_message()
        body: Any = None
        for step in range(2):
            outcome = self.core.send(
                36, 2, authenticate.SaslAuthenticateRequest(auth_bytes=message), conn_id=conn_id
            )
            if isinstance(outcome, Close):
                assert self.core.decode(outcome.reply).error_code == (
                    ErrorCode.SASL_AUTHENTICATION_FAILED
                )
                return None
            body = self.core.decode(outcome)
            assert body.error_code == ErrorCode.NONE
            if step == 0:
                message = client.final_message(body.auth_bytes)
        client.verify(body.auth_bytes)
        return conn_id, body


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@pytest.fixture
def tokens(open_core: Any) -> Tokens:
    return Tokens(open_core(**SASL))


# -- advertised and created ----------------------------------------------------------------


def test_the_four_apis_are_advertised_with_version_0_unless_protocol_4_0(
    tokens: Tokens, open_core: Any
) -> None:
    answer = tokens.core.call(18, 3, api_versions.ApiVersionsRequest())
    ranges = {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}
    # Kafka 3.9's v0 (issue #37), which Kafka 4.0 removed.
    assert [ranges[k] for k in (38, 39, 40, 41)] == [(0, 3), (0, 2), (0, 2), (0, 3)]
    tokens.core.broker.close()
    strict = open_core(protocol_version="4.0", **SASL)
    answer = strict.call(18, 3, api_versions.ApiVersionsRequest())
    ranges = {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}
    assert [ranges[k] for k in (38, 39, 40, 41)] == [(1, 3), (1, 2), (1, 2), (1, 3)]


@pytest.mark.parametrize("version", [1, 2, 3])
def test_create_answers_kafkas_lifetimes_and_the_hmac_of_the_id(
    tokens: Tokens, version: int
) -> None:
    now = tokens.core.now
    answer = tokens.create(renewers=("User:bob",), version=version)
    assert answer.error_code == ErrorCode.NONE
    assert (answer.principal_type, answer.principal_name) == ("User", "alice")
    if version >= 3:
        requester = (answer.token_requester_principal_type, answer.token_requester_principal_name)
        assert requester == ("User", "alice")
    assert answer.issue_timestamp_ms == now
    assert answer.max_timestamp_ms == now + 7 * DAY  # delegation.token.max.lifetime.ms
    assert answer.expiry_timestamp_ms == now + DAY  # delegation.token.expiry.time.ms
    assert re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_-]{21}", answer.token_id)
    expected = hmac.new(SECRET.encode(), answer.token_id.encode(), hashlib.sha512).digest()
    assert answer.hmac == expected
    assert tokens.create().token_id != answer.token_id


def test_a_requested_max_lifetime_counts_only_when_shorter(tokens: Tokens) -> None:
    now = tokens.core.now
    short = tokens.create(max_lifetime_ms=HOUR)
    # The first expiry is capped at the maximum timestamp too.
    assert (short.max_timestamp_ms, short.expiry_timestamp_ms) == (now + HOUR, now + HOUR)
    long = tokens.create(max_lifetime_ms=30 * DAY)
    assert long.max_timestamp_ms == now + 7 * DAY
    assert tokens.create(max_lifetime_ms=0).max_timestamp_ms == now + 7 * DAY


def test_the_broker_settings_set_the_lifetimes(open_core: Any) -> None:
    tokens = Tokens(
        open_core(
            **SASL, delegation_token_max_lifetime_ms=5 * HOUR, delegation_token_expiry_time_ms=HOUR
        )
    )
    now = tokens.core.now
    answer = tokens.create()
    assert (answer.expiry_timestamp_ms, answer.max_timestamp_ms) == (now + HOUR, now + 5 * HOUR)


def test_without_a_secret_key_every_token_call_is_disabled(open_core: Any) -> None:
    settings = {k: v for k, v in SASL.items() if k != "delegation_token_secret_key"}
    tokens = Tokens(open_core(**settings))
    answer = tokens.create()
    assert answer.error_code == ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED
    assert (answer.token_id, answer.hmac, answer.issue_timestamp_ms) == ("", b"", -1)
    assert tokens.renew("alice", b"x" * 64).error_code == ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED
    assert tokens.expire("alice", b"x" * 64).error_code == ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED
    assert tokens.describe().error_code == ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED


def test_kafkas_older_name_of_the_secret_key_is_read(open_core: Any) -> None:
    from trafka.brokerlite.config import BrokerConfig

    config = BrokerConfig.from_mapping({"delegation.token.master.key": "old-name-secret"})
    assert config.delegation_token_secret_key == "old-name-secret"
    assert "old-name-secret" not in repr(config)
    assert "old-name-secret" not in str(config.kafka_entries())


def test_a_plaintext_listener_may_not_ask_for_tokens(open_core: Any) -> None:
    core = open_core(delegation_token_secret_key=SECRET)
    tokens = Tokens(core)
    not_allowed = ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
    assert tokens.create(conn_id=1).error_code == not_allowed
    for key, body in (
        (39, renew.RenewDelegationTokenRequest(hmac=b"h", renew_period_ms=-1)),
        (40, expire.ExpireDelegationTokenRequest(hmac=b"h", expiry_time_period_ms=-1)),
        (41, describe.DescribeDelegationTokenRequest(owners=None)),
    ):
        assert core.call(key, 1, body).error_code == not_allowed


def test_renewers_and_owners_must_be_users(tokens: Tokens) -> None:
    answer = tokens.create(renewers=("User:bob", "Group:ops"))
    assert answer.error_code == ErrorCode.INVALID_PRINCIPAL_TYPE
    assert tokens.create(owner="Service:x").error_code == ErrorCode.INVALID_PRINCIPAL_TYPE
    assert tokens.ids() == []


# -- logging in with a token ---------------------------------------------------------------


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_a_token_logs_in_as_its_owner_until_its_expiry(tokens: Tokens, mechanism: str) -> None:
    token = tokens.create()
    logged = tokens.login(token.token_id, b64(token.hmac), mechanism=mechanism)
    assert logged is not None
    conn_id, answer = logged
    broker = tokens.core.broker
    assert broker.connections.principal_of(conn_id) == "User:alice"
    # KIP-368: the session ends with the token.
    assert answer.session_lifetime_ms == token.expiry_timestamp_ms - tokens.core.now


def test_a_token_login_needs_the_extension_and_the_right_hmac(tokens: Tokens) -> None:
    token = tokens.create()
    assert tokens.login(token.token_id, b64(token.hmac), tokenauth=False) is None
    assert tokens.login(token.token_id, b64(token.hmac[::-1])) is None
    assert tokens.login("no-such-token-id-here", b64(token.hmac)) is None
    # A user's own password is no token either.
    assert tokens.login("alice", USERS["alice"]) is None
    assert tokens.login(token.token_id, b64(token.hmac)) is not None


def test_a_token_login_may_not_create_renew_expire_or_describe_tokens(tokens: Tokens) -> None:
    token = tokens.create()
    logged = tokens.login(token.token_id, b64(token.hmac))
    assert logged is not None
    conn_id = logged[0]
    core = tokens.core
    not_allowed = ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
    assert tokens.create(conn_id=conn_id).error_code == not_allowed
    for key, body in (
        (39, renew.RenewDelegationTokenRequest(hmac=token.hmac, renew_period_ms=-1)),
        (40, expire.ExpireDelegationTokenRequest(hmac=token.hmac, expiry_time_period_ms=-1)),
        (41, describe.DescribeDelegationTokenRequest(owners=None)),
    ):
        assert core.call(key, 1, body, conn_id=conn_id).error_code == not_allowed
    # The token is untouched.
    assert tokens.ids() == [token.token_id]


# -- renew and expire ----------------------------------------------------------------------


def test_the_owner_and_the_renewers_renew_others_do_not(tokens: Tokens) -> None:
    token = tokens.create(renewers=("User:bob",))
    core = tokens.core
    core.now += HOUR
    answer = tokens.renew("bob", token.hmac)
    assert (answer.error_code, answer.expiry_timestamp_ms) == (ErrorCode.NONE, core.now + DAY)
    answer = tokens.renew("alice", token.hmac, period=HOUR)
    assert answer.expiry_timestamp_ms == core.now + HOUR
    # A period longer than delegation.token.expiry.time.ms is cut to it.
    assert tokens.renew("alice", token.hmac, period=3 * DAY).expiry_timestamp_ms == core.now + DAY
    refused = tokens.renew("carol", token.hmac)
    assert (refused.error_code, refused.expiry_timestamp_ms) == (
        ErrorCode.DELEGATION_TOKEN_OWNER_MISMATCH,
        -1,
    )
    assert tokens.renew("alice", b"\0" * 64).error_code == ErrorCode.DELEGATION_TOKEN_NOT_FOUND


def test_renewals_never_pass_the_maximum_timestamp(tokens: Tokens) -> None:
    token = tokens.create(max_lifetime_ms=DAY + HOUR)
    tokens.core.now += 2 * HOUR
    answer = tokens.renew("alice", token.hmac)
    assert answer.expiry_timestamp_ms == token.max_timestamp_ms


def test_expire_now_forgets_the_token_and_its_logins(tokens: Tokens) -> None:
    token = tokens.create(renewers=("User:bob",))
    other = tokens.create()
    assert (
        tokens.expire("carol", token.hmac).error_code == ErrorCode.DELEGATION_TOKEN_OWNER_MISMATCH
    )
    answer = tokens.expire("bob", token.hmac)
    # Kafka 3.9 answers the moment it removed the token (its DelegationTokenManager).
    assert (answer.error_code, answer.expiry_timestamp_ms) == (ErrorCode.NONE, tokens.core.now)
    assert tokens.ids() == [other.token_id]
    assert tokens.login(token.token_id, b64(token.hmac)) is None
    assert tokens.renew("alice", token.hmac).error_code == ErrorCode.DELEGATION_TOKEN_NOT_FOUND
    assert tokens.login(other.token_id, b64(other.hmac)) is not None


def test_an_expired_token_is_refused_then_swept(open_core: Any) -> None:
    tokens = Tokens(open_core(**SASL, delegation_token_expiry_check_interval_ms=2 * HOUR))
    token = tokens.create()
    answer = tokens.expire("alice", token.hmac, period=HOUR)
    core = tokens.core
    assert answer.expiry_timestamp_ms == core.now + HOUR
    core.now += HOUR + 1
    assert tokens.login(token.token_id, b64(token.hmac)) is None
    assert tokens.renew("alice", token.hmac).error_code == ErrorCode.DELEGATION_TOKEN_EXPIRED
    assert tokens.expire("alice", token.hmac).error_code == ErrorCode.DELEGATION_TOKEN_EXPIRED
    # Until the expiry check runs, describe still lists it (as Kafka's cache does).
    assert tokens.ids() == [token.token_id]
    core.now += HOUR
    assert tokens.ids() == []
    assert tokens.renew("alice", token.hmac).error_code == ErrorCode.DELEGATION_TOKEN_NOT_FOUND


# -- describe ------------------------------------------------------------------------------


def test_describe_filters_by_owner_and_lists_by_issue_time(tokens: Tokens) -> None:
    first = tokens.create(renewers=("User:bob",))
    tokens.core.now += 1
    second = tokens.create()
    tokens.core.now += 1
    bobs = tokens.create("bob")
    assert tokens.ids() == [first.token_id, second.token_id, bobs.token_id]
    assert tokens.ids(owners=[]) == []
    assert tokens.ids(owners=["User:alice"]) == [first.token_id, second.token_id]
    # An owner matches a token it renews, too (Kafka's ownerOrRenewer).
    assert tokens.ids(owners=["User:bob"]) == [first.token_id, bobs.token_id]
    described = tokens.describe(owners=["User:alice"]).tokens[0]
    assert described.hmac == first.hmac
    assert [(r.principal_type, r.principal_name) for r in described.renewers] == [("User", "bob")]
    assert (described.issue_timestamp, described.expiry_timestamp, described.max_timestamp) == (
        first.issue_timestamp_ms,
        first.expiry_timestamp_ms,
        first.max_timestamp_ms,
    )
    at_v2 = tokens.describe(version=2).tokens[0]
    assert at_v2.token_requester_principal_name == ""  # not in v2's answer


def _acl(resource_type: int, name: str, principal: str, operation: int) -> Any:
    return create_acls.CreateAclsRequest.AclCreation(
        resource_type=resource_type,
        resource_name=name,
        resource_pattern_type=3,  # LITERAL
        principal=principal,
        host="*",
        operation=operation,
        permission_type=3,  # ALLOW
    )


def grant(tokens: Tokens, *creations: Any) -> None:
    """Create ACLs as the super user ``admin``."""
    answer = tokens.core.call(
        30,
        3,
        create_acls.CreateAclsRequest(creations=list(creations)),
        conn_id=tokens.conn("admin"),
    )
    assert [r.error_code for r in answer.results] == [ErrorCode.NONE] * len(creations)


def with_acls(open_core: Any) -> Tokens:
    return Tokens(open_core(**SASL, authorizer_class_name=AUTHORIZER, super_users="User:admin"))


def test_with_acls_others_see_a_token_only_when_allowed(open_core: Any) -> None:
    tokens = with_acls(open_core)
    token = tokens.create(renewers=("User:bob",))
    assert tokens.ids("bob") == [token.token_id]  # a renewer
    assert tokens.ids("carol") == []
    grant(tokens, _acl(6, token.token_id, "User:carol", 8))  # DESCRIBE on DELEGATION_TOKEN
    assert tokens.ids("carol") == [token.token_id]

    tokens.core.now += 1
    bobs = tokens.create("bob")
    assert tokens.ids("carol", owners=["User:bob"]) == [token.token_id]  # (bob renews it)
    grant(tokens, _acl(7, "User:bob", "User:carol", 14))  # DESCRIBE_TOKENS on USER bob
    assert tokens.ids("carol", owners=["User:bob"]) == [token.token_id, bobs.token_id]


def test_creating_for_another_owner_needs_create_tokens_on_that_user(open_core: Any) -> None:
    tokens = with_acls(open_core)
    refused = tokens.create(owner="User:carol")
    assert refused.error_code == ErrorCode.DELEGATION_TOKEN_AUTHORIZATION_FAILED
    assert (refused.principal_name, refused.token_requester_principal_name) == ("carol", "alice")
    # Anyone may create tokens for themselves (no ACL needed).
    assert tokens.create().error_code == ErrorCode.NONE
    grant(tokens, _acl(7, "User:carol", "User:alice", 13))  # CREATE_TOKENS on USER carol
    answer = tokens.create(owner="User:carol")
    assert answer.error_code == ErrorCode.NONE
    assert (answer.principal_name, answer.token_requester_principal_name) == ("carol", "alice")
    logged = tokens.login(answer.token_id, b64(answer.hmac))
    assert logged is not None
    assert tokens.core.broker.connections.principal_of(logged[0]) == "User:carol"
    # The requester is named by the token: alice sees it, and carol owns it.
    assert answer.token_id in tokens.ids("alice")
    assert answer.token_id in tokens.ids("carol")


# -- durability ----------------------------------------------------------------------------


def test_tokens_outlive_a_restart_and_die_with_a_new_secret(open_core: Any, data_dir: Any) -> None:
    tokens = Tokens(open_core(**SASL))
    token = tokens.create(renewers=("User:bob",))
    gone = tokens.create()
    assert tokens.expire("alice", gone.hmac).error_code == ErrorCode.NONE
    renewed = tokens.renew("alice", token.hmac, period=HOUR).expiry_timestamp_ms
    tokens.core.broker.close()
    assert (data_dir / TOKENS_JOURNAL).exists()

    again = Tokens(open_core(**SASL))
    [kept] = again.describe().tokens
    assert (kept.token_id, kept.hmac, kept.expiry_timestamp) == (
        token.token_id,
        token.hmac,
        renewed,
    )
    assert again.login(token.token_id, b64(token.hmac)) is not None
    assert again.renew("bob", token.hmac).error_code == ErrorCode.NONE
    again.core.broker.close()

    rekeyed = Tokens(open_core(**{**SASL, "delegation_token_secret_key": "another"}))
    assert rekeyed.login(token.token_id, b64(token.hmac)) is None
    renewal = rekeyed.renew("alice", token.hmac)
    assert renewal.error_code == ErrorCode.DELEGATION_TOKEN_NOT_FOUND


def test_the_token_settings_are_described_as_kafka_names_them(tokens: Tokens) -> None:
    from trafka.codec.messages import k32_describe_configs as dc

    request = dc.DescribeConfigsRequest(
        resources=[
            dc.DescribeConfigsRequest.DescribeConfigsResource(
                resource_type=4, resource_name="1", configuration_keys=None
            )
        ],
        include_synonyms=False,
        include_documentation=False,
    )
    answer = tokens.core.call(32, 4, request, conn_id=tokens.conn("alice"))
    entries = {c.name: c for c in answer.results[0].configs}
    lifetime = entries["delegation.token.max.lifetime.ms"]
    assert (lifetime.value, lifetime.config_type) == ("604800000", 5)  # LONG
    assert entries["delegation.token.expiry.time.ms"].value == "86400000"
    assert entries["delegation.token.expiry.check.interval.ms"].value == "3600000"
    # The secret is never described.
    assert not any("secret" in name or "master" in name for name in entries)
    assert SECRET not in repr(answer)
