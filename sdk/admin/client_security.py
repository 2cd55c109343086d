"""The admin client's security calls: ACLs, client quotas, users' SCRAM
credentials (KIP-554) and delegation tokens (KIP-48).

A part of :class:`~trafka.sdk.admin.Admin` (see :mod:`.client_core`): what
goes on the wire and what an answer means is in :mod:`.acls`, :mod:`.quotas`,
:mod:`.scram` and :mod:`.delegation_tokens`.
"""

from __future__ import annotations

from collections.abc import Iterable

from trafka.codec import ApiKey, KafkaError

from .._validate import (
    INT64_MAX,
    check_bool,
    check_instance,
    check_instances,
    check_int,
    check_names,
    check_str,
)
from ..acls import AclBinding, AclBindingFilter
from ..delegation_tokens import DelegationToken
from ..delegation_tokens import principal as token_principal
from ..quotas import ClientQuotaAlteration, ClientQuotaEntity, ClientQuotaFilterComponent
from ._common import check_hmac, first_failure, settle
from .acls import (
    create_acls_request,
    delete_acls_request,
    describe_acls_request,
    read_create_acls,
    read_delete_acls,
    read_describe_acls,
)
from .client_core import AdminCore
from .delegation_tokens import (
    create_delegation_token_request,
    describe_delegation_token_owners,
    describe_delegation_token_request,
    expire_delegation_token_request,
    read_create_delegation_token,
    read_describe_delegation_token,
    read_expiry,
    renew_delegation_token_request,
    token_renewers,
)
from .quotas import (
    alter_client_quotas_request,
    client_quota_alterations,
    describe_client_quotas_request,
    read_alter_client_quotas,
    read_describe_client_quotas,
)
from .scram import (
    UserScramCredentialDeletion,
    UserScramCredentialsDescription,
    UserScramCredentialUpsertion,
    alter_user_scram_credentials_request,
    describe_user_scram_credentials_request,
    read_alter_user_scram_credentials,
    read_describe_user_scram_credentials,
    scram_alterations,
)

__all__ = ["SecurityCalls"]


class SecurityCalls(AdminCore):
    """The calls on ACLs, quotas, SCRAM credentials and delegation tokens."""

    async def describe_acls(
        self, acl_filter: AclBindingFilter | None = None, *, timeout_ms: int | None = None
    ) -> list[AclBinding]:
        """The ACLs that match ``acl_filter`` (every ACL by default; DescribeAcls).

        Raises:
            KafkaError: e.g. SECURITY_DISABLED (the cluster has no authorizer) or
                CLUSTER_AUTHORIZATION_FAILED.
        """
        check_instance("acl_filter", acl_filter, AclBindingFilter, none=True)
        f = acl_filter or AclBindingFilter()

        async def attempt(deadline: float) -> list[AclBinding]:
            conn = await self._cluster.any_connection()
            body = describe_acls_request(conn.version_for(ApiKey.DESCRIBE_ACLS), f)
            return read_describe_acls(await conn.request(ApiKey.DESCRIBE_ACLS, body))

        return await self._calls.run("describe_acls", timeout_ms, attempt)

    async def create_acls(
        self, bindings: Iterable[AclBinding], *, timeout_ms: int | None = None
    ) -> dict[AclBinding, KafkaError | None]:
        """Create ACLs (CreateAcls); per binding None when created, else its error."""
        bindings = check_instances("bindings", bindings, AclBinding)
        wanted = list(dict.fromkeys(bindings))
        body = create_acls_request(wanted)

        async def attempt(deadline: float) -> dict[AclBinding, KafkaError | None]:
            conn = await self._cluster.any_connection()
            return read_create_acls(wanted, await conn.request(ApiKey.CREATE_ACLS, body))

        return await self._calls.run("create_acls", timeout_ms, attempt)

    async def delete_acls(
        self, filters: Iterable[AclBindingFilter], *, timeout_ms: int | None = None
    ) -> dict[AclBindingFilter, list[AclBinding] | KafkaError]:
        """Delete the ACLs each filter matches (DeleteAcls); per filter the ACLs
        deleted, or its error."""
        filters = check_instances("filters", filters, AclBindingFilter)
        wanted = list(dict.fromkeys(filters))
        body = delete_acls_request(wanted)

        async def attempt(deadline: float) -> dict[AclBindingFilter, list[AclBinding] | KafkaError]:
            conn = await self._cluster.any_connection()
            return read_delete_acls(wanted, await conn.request(ApiKey.DELETE_ACLS, body))

        return await self._calls.run("delete_acls", timeout_ms, attempt)

    async def describe_client_quotas(
        self,
        components: Iterable[ClientQuotaFilterComponent] = (),
        *,
        strict: bool = False,
        timeout_ms: int | None = None,
    ) -> dict[ClientQuotaEntity, dict[str, float]]:
        """The client quotas of the entities the filter matches (DescribeClientQuotas, KIP-546).

        Args:
            components: conditions on entity types, all of which an entity must
                meet (see :class:`~trafka.sdk.ClientQuotaFilterComponent`); none
                matches every entity that has quotas.
            strict: only entities with no entity types besides the components'
                (with no components: nothing).

        Returns:
            Each matching entity's quota keys and values, entities in order of
            their types and names (defaults first).

        Raises:
            KafkaError: INVALID_REQUEST (a type named twice, ``ip`` with
                ``user`` or ``client-id``...), UNSUPPORTED_VERSION (an unknown
                entity type, as Kafka answers it), CLUSTER_AUTHORIZATION_FAILED
                (the principal lacks DESCRIBE_CONFIGS on the cluster).
            UnsupportedVersionError: the broker has no DescribeClientQuotas.
        """
        components = check_instances("components", components, ClientQuotaFilterComponent)
        check_bool("strict", strict)
        body = describe_client_quotas_request(list(components), strict=strict)

        async def attempt(deadline: float) -> dict[ClientQuotaEntity, dict[str, float]]:
            conn = await self._cluster.any_connection()
            return read_describe_client_quotas(
                await conn.request(ApiKey.DESCRIBE_CLIENT_QUOTAS, body)
            )

        return await self._calls.run("describe_client_quotas", timeout_ms, attempt)

    async def alter_client_quotas(
        self,
        alterations: Iterable[ClientQuotaAlteration],
        *,
        validate_only: bool = False,
        timeout_ms: int | None = None,
    ) -> None:
        """Set and remove client quotas (AlterClientQuotas, KIP-546).

        Each entity is changed on its own: one the broker refuses leaves the
        others changed. An entity whose quotas are all removed is forgotten.

        Args:
            alterations: at most one per entity (merge an entity's ops into one).
            validate_only: have the broker check the alterations, changing nothing.

        Raises:
            ValueError: an entity given twice.
            KafkaError: for the first entity that failed, in the order given:
                INVALID_REQUEST (an unknown key or one the entity does not take, a
                value of the wrong kind, an invalid entity), CLUSTER_AUTHORIZATION_FAILED
                (the principal lacks ALTER_CONFIGS on the cluster).
            UnsupportedVersionError: the broker has no AlterClientQuotas.
        """
        alterations = check_instances("alterations", alterations, ClientQuotaAlteration)
        check_bool("validate_only", validate_only)
        wanted = client_quota_alterations(alterations)
        if not wanted:
            return
        pending = set(wanted)
        failed: dict[ClientQuotaEntity, KafkaError] = {}

        async def attempt(deadline: float) -> None:
            conn = await self._cluster.any_connection()
            body = alter_client_quotas_request(
                [alt for entity, alt in wanted.items() if entity in pending],
                validate_only=validate_only,
            )
            read_alter_client_quotas(
                await conn.request(ApiKey.ALTER_CLIENT_QUOTAS, body), pending, failed
            )

        await self._calls.run("alter_client_quotas", timeout_ms, attempt)
        first_failure(wanted, failed)

    async def describe_user_scram_credentials(
        self, users: Iterable[str] | None = None, *, timeout_ms: int | None = None
    ) -> dict[str, UserScramCredentialsDescription]:
        """The SCRAM credentials of ``users`` (every user that has one when None,
        nobody for an empty list): mechanisms and iteration counts
        (DescribeUserScramCredentials, KIP-554).

        Raises:
            KafkaError: RESOURCE_NOT_FOUND for a user without SCRAM credentials
                (the first failing user, in the order given), or the broker's
                error for the whole request.
        """
        if users is not None:
            users = check_names("users", users, check_str, "user names")
        names = None if users is None else list(dict.fromkeys(users))
        if names == []:
            return {}  # (an empty list would ask the broker for every user)
        body = describe_user_scram_credentials_request(names)

        async def attempt(deadline: float) -> dict[str, UserScramCredentialsDescription]:
            conn = await self._cluster.any_connection()
            return read_describe_user_scram_credentials(
                await conn.request(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, body), names
            )

        return await self._calls.run("describe_user_scram_credentials", timeout_ms, attempt)

    async def alter_user_scram_credentials(
        self,
        alterations: Iterable[UserScramCredentialUpsertion | UserScramCredentialDeletion],
        *,
        timeout_ms: int | None = None,
    ) -> None:
        """Set or delete users' SCRAM credentials (AlterUserScramCredentials, KIP-554).

        An upsertion's password is salted and hashed here (PBKDF2 with the
        mechanism's hash); only the salt, the iteration count and the salted
        password are sent. A user takes effect for its next login.

        Args:
            alterations: at most one per user: as Kafka, a user named twice in
                one call (even for two mechanisms) is refused with DUPLICATE_RESOURCE.

        Raises:
            ValueError: an unknown mechanism name, or iterations below 1.
            KafkaError: for the first user that failed, in the order given (the
                other users' changes are made): UNACCEPTABLE_CREDENTIAL (empty
                name, iterations outside 4096-16384), UNSUPPORTED_SASL_MECHANISM,
                RESOURCE_NOT_FOUND (deleting a credential that does not exist),
                DUPLICATE_RESOURCE.
        """
        alterations = check_instances(
            "alterations", alterations, (UserScramCredentialUpsertion, UserScramCredentialDeletion)
        )
        plan = scram_alterations(alterations)
        pending = set(plan.users)
        failed: dict[str, KafkaError] = {}

        async def attempt(deadline: float) -> None:
            conn = await self._controller()
            resp = await conn.request(
                ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
                alter_user_scram_credentials_request(plan, pending),
            )
            settle(
                read_alter_user_scram_credentials(resp),
                pending,
                failed,
                "altering the SCRAM credentials of user",
            )

        if plan.users:
            await self._calls.run("alter_user_scram_credentials", timeout_ms, attempt)
        first_failure(plan.users, failed)

    async def create_delegation_token(
        self,
        *,
        renewers: Iterable[str] = (),
        owner: str | None = None,
        max_lifetime_ms: int = -1,
        timeout_ms: int | None = None,
    ) -> DelegationToken:
        """A new delegation token (CreateDelegationToken; Java's
        ``Admin.createDelegationToken``): owned by this client's principal, or
        by ``owner`` (which needs CREATE_TOKENS on that user, and a broker
        speaking v3, Kafka 3.3+).

        Args:
            renewers: principals that may renew and expire it besides its owner
                (``User:bob``, or a bare user name).
            max_lifetime_ms: its maximum lifetime; the broker's
                ``delegation.token.max.lifetime.ms`` caps it, and -1 (or 0) means
                that.

        Raises:
            ValueError: a malformed principal.
            UnsupportedVersionError: ``owner`` given to a broker without v3.
            KafkaError: DELEGATION_TOKEN_AUTH_DISABLED (tokens are off),
                DELEGATION_TOKEN_REQUEST_NOT_ALLOWED (a PLAINTEXT listener, or
                this connection logged in with a token),
                DELEGATION_TOKEN_AUTHORIZATION_FAILED, INVALID_PRINCIPAL_TYPE.
        """
        renewers = check_names("renewers", renewers, check_str, "principals")
        check_str("owner", owner, none=True)
        check_int("max_lifetime_ms", max_lifetime_ms, minimum=-1, maximum=INT64_MAX)
        renewer_list = token_renewers(renewers)
        owner_pair = None if owner is None else token_principal(owner, "owner")

        async def attempt(deadline: float) -> DelegationToken:
            conn = await self._cluster.any_connection()
            body = create_delegation_token_request(
                conn.version_for(ApiKey.CREATE_DELEGATION_TOKEN),
                renewer_list,
                owner_pair,
                max_lifetime_ms=max_lifetime_ms,
            )
            return read_create_delegation_token(
                await conn.request(ApiKey.CREATE_DELEGATION_TOKEN, body), renewer_list
            )

        return await self._calls.run("create_delegation_token", timeout_ms, attempt)

    async def renew_delegation_token(
        self, hmac: bytes, *, renew_period_ms: int = -1, timeout_ms: int | None = None
    ) -> int:
        """Renew the token whose HMAC is ``hmac`` (its owner or a renewer may):
        it now expires ``renew_period_ms`` from now (-1: the broker's
        ``delegation.token.expiry.time.ms``, which also caps it), never past its
        maximum timestamp. Returns the new expiry timestamp (ms).

        Raises:
            KafkaError: DELEGATION_TOKEN_NOT_FOUND, DELEGATION_TOKEN_EXPIRED,
                DELEGATION_TOKEN_OWNER_MISMATCH, DELEGATION_TOKEN_AUTH_DISABLED,
                DELEGATION_TOKEN_REQUEST_NOT_ALLOWED.
        """
        check_hmac(hmac)
        check_int("renew_period_ms", renew_period_ms, minimum=None, maximum=INT64_MAX)
        body = renew_delegation_token_request(hmac, renew_period_ms)

        async def attempt(deadline: float) -> int:
            conn = await self._cluster.any_connection()
            return read_expiry(
                await conn.request(ApiKey.RENEW_DELEGATION_TOKEN, body),
                "renewing a delegation token",
            )

        return await self._calls.run("renew_delegation_token", timeout_ms, attempt)

    async def expire_delegation_token(
        self, hmac: bytes, *, expiry_period_ms: int = -1, timeout_ms: int | None = None
    ) -> int:
        """Expire the token whose HMAC is ``hmac`` (its owner or a renewer may):
        at once with a negative ``expiry_period_ms`` (the default; the broker
        forgets the token and answers the moment it did, as brokerlite and Kafka
        3.9 do; Kafka 4 answers the negative period itself), otherwise that long
        from now, never past its maximum timestamp. Returns the expiry timestamp
        the broker answered.

        Raises:
            KafkaError: as :meth:`renew_delegation_token`.
        """
        check_hmac(hmac)
        check_int("expiry_period_ms", expiry_period_ms, minimum=None, maximum=INT64_MAX)
        body = expire_delegation_token_request(hmac, expiry_period_ms)

        async def attempt(deadline: float) -> int:
            conn = await self._cluster.any_connection()
            return read_expiry(
                await conn.request(ApiKey.EXPIRE_DELEGATION_TOKEN, body),
                "expiring a delegation token",
            )

        return await self._calls.run("expire_delegation_token", timeout_ms, attempt)

    async def describe_delegation_tokens(
        self, owners: Iterable[str] | None = None, *, timeout_ms: int | None = None
    ) -> list[DelegationToken]:
        """The tokens of ``owners`` (principals, or bare user names; None: every
        owner) that this client may see: those it owns, requested or may renew,
        and those its ACLs let it describe. By issue time, as the broker lists them.

        Raises:
            KafkaError: DELEGATION_TOKEN_AUTH_DISABLED,
                DELEGATION_TOKEN_REQUEST_NOT_ALLOWED.
        """
        if owners is not None:
            owners = check_names("owners", owners, check_str, "principals")
        owner_list = describe_delegation_token_owners(owners)
        if owner_list == []:
            return []  # (as the broker answers an empty list)
        body = describe_delegation_token_request(owner_list)

        async def attempt(deadline: float) -> list[DelegationToken]:
            conn = await self._cluster.any_connection()
            return read_describe_delegation_token(
                await conn.request(ApiKey.DESCRIBE_DELEGATION_TOKEN, body)
            )

        return await self._calls.run("describe_delegation_tokens", timeout_ms, attempt)
