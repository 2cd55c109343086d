"""Authorization and audit in the proxy: a filter that lets each client do
only what rules allow its principal, answering what they refuse with Kafka's
own errors, and writes an audit log of what matters to security.

Use it in ``trafka proxy``'s file (see docs/proxy.md, "Authorization and
audit")::

    [[filter]]
    use = "trafka.proxy.authz:Authorization"
    [filter.settings]
    default = "deny"
    super_users = ["User:admin"]
    [[filter.settings.rules]]
    principal = "User:alice"
    operation = ["Write", "Describe"]
    resource = "topic"
    name = "orders-"
    pattern = "prefixed"
    [filter.settings.audit]
    path = "/var/log/trafka/audit.jsonl"

Rules:

* Who asks: the principal the client authenticated as (``ctx.principal``:
  SASL through the proxy, or any other filter that sets the connection's
  :class:`~.filters.Session`, such as a client certificate's);
  ``User:ANONYMOUS`` for a client that did not authenticate. A client that
  authenticated as a principal the proxy could not read (a delegation token's
  SCRAM login) is refused everything judged.
* What is judged, and how: :mod:`.authz_rules` (the decision, as Kafka's
  StandardAuthorizer makes it) and :mod:`.authz_apis` (per API, the
  operations checked and the errors given, as Kafka's; share and streams
  groups' APIs in :mod:`.authz_share`). The brokers still
  judge every request the proxy lets through with their own ACLs: the proxy
  only takes away.
* APIs the filter does not judge pass: ApiVersions, SASL, and the APIs whose
  resources are neither topics, groups nor transactional ids (ACLs, quotas,
  SCRAM credentials, delegation tokens, cluster operations): the brokers judge
  those; the admin ones among them are written to the audit log.
* Every decision is counted (``trafka_proxy_authorization_decisions_total``
  by decision, operation and resource type); each denial, and each allowed
  decision when ``audit.allowed`` is true, is written to the audit log.
* The settings are checked all at once (``trafka proxy --check-config``
  names every problem) and reloaded on SIGHUP: the new rules apply to the
  next request of every connection, the audit log moves to a new path.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from trafka.codec import ApiKey, protocol
from trafka.codec.errors import ErrorCode
from trafka.sdk import ConfigError

from .audit import AuditLog, audit_settings
from .authz_apis import HANDLERS, NULL_ID
from .authz_rules import ANONYMOUS, Rules, parse_rules
from .filters import Filter, FilterContext, Respond, Sample, Session

__all__ = ["Authorization"]

log = logging.getLogger("trafka.proxy")

# Admin APIs written to the audit log with their outcome (their resources are
# judged by the handlers when they are topics, groups or configs).
ADMIN_APIS = frozenset(
    {
        ApiKey.CREATE_TOPICS,
        ApiKey.DELETE_TOPICS,
        ApiKey.DELETE_RECORDS,
        ApiKey.CREATE_PARTITIONS,
        ApiKey.ALTER_CONFIGS,
        ApiKey.INCREMENTAL_ALTER_CONFIGS,
        ApiKey.CREATE_ACLS,
        ApiKey.DELETE_ACLS,
        ApiKey.DELETE_GROUPS,
        ApiKey.OFFSET_DELETE,
        ApiKey.ALTER_PARTITION_REASSIGNMENTS,
        ApiKey.ELECT_LEADERS,
        ApiKey.ALTER_CLIENT_QUOTAS,
        ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
        ApiKey.UPDATE_FEATURES,
        ApiKey.CREATE_DELEGATION_TOKEN,
        ApiKey.EXPIRE_DELEGATION_TOKEN,
    }
)
_SASL = frozenset({ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})
_FRAMED_ANSWERS = frozenset({ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.SHARE_FETCH})
_KNOWN_SETTINGS = {"rules", "rules_file", "super_users", "default", "audit"}
# ctx.state / ctx.notes keys
_OPENED = "trafka.proxy.authz:opened"
_MECHANISM = "trafka.proxy.authz:mechanism"
_MERGES = "trafka.proxy.authz:merges"
_ADMIN = "trafka.proxy.authz:admin"
_MAX_IDS = 100_000  # topic ids remembered (a cluster's topics)


class _Judge:
    """One request's judge: who asks, the rules, and what the decisions count."""

    __slots__ = ("_az", "_ctx", "_host", "_principal", "_rules")

    def __init__(self, az: Authorization, ctx: FilterContext, rules: Rules) -> None:
        self._az = az
        self._ctx = ctx
        self._rules = rules
        self._principal = principal_of(ctx)
        self._host = ctx.client_address[0] if ctx.client_address else None

    def ok(self, operation: str, resource: str, name: str) -> bool:
        allowed = self.allows(operation, resource, name)
        self.record(allowed, operation, resource, name)
        return allowed

    def allows(self, operation: str, resource: str, name: str) -> bool:
        """The decision, not counted (one of several alternatives)."""
        principal = self._principal
        return principal is not None and self._rules.allowed(
            principal, self._host, operation, resource, name
        )

    def on_any(self, operation: str, resource: str) -> bool:
        principal = self._principal
        return principal is not None and self._rules.allowed_on_any(
            principal, self._host, operation, resource
        )

    def record(self, allowed: bool, operation: str, resource: str, name: str) -> None:
        self._az.decided(self._ctx, allowed, operation, resource, name)

    def operations(self, resource: str, name: str) -> int:
        if self._principal is None:
            return 0
        return self._rules.authorized_operations(self._principal, self._host, resource, name)

    def topic_name(self, name: str | None, topic_id: uuid.UUID) -> str | None:
        if name:
            return name
        return self._az.topic_ids.get(topic_id)

    def learn(self, name: str, topic_id: uuid.UUID) -> None:
        self._az.learn(name, topic_id)

    def later(self, merge: Callable[[Any], Any]) -> None:
        self._ctx.notes.setdefault(_MERGES, []).append(merge)


def principal_of(ctx: FilterContext) -> str | None:
    """Who asks: the connection's principal, ``User:ANONYMOUS`` when it did
    not authenticate, None when it did as someone the proxy cannot name."""
    if ctx.principal is not None:
        return ctx.principal
    return None if ctx.authenticated else ANONYMOUS


class Authorization(Filter):
    """The authorization and audit filter (see the module's rules)."""

    api_keys = frozenset(HANDLERS) | ADMIN_APIS | _SASL

    def __init__(self) -> None:
        self.rules = Rules(())
        self.audit: AuditLog | None = None
        self.audit_allowed = False
        self.topic_ids: dict[uuid.UUID, str] = {}
        # (decision, operation, resource type) -> decisions
        self.decisions: dict[tuple[str, str, str], int] = {}
        self.authentications: dict[str, int] = {}

    def configure(self, settings: Mapping[str, Any]) -> None:
        problems: list[str] = []
        unknown = sorted(set(settings) - _KNOWN_SETTINGS)
        if unknown:
            problems.append(
                f"unknown setting {unknown[0]!r} ({', '.join(sorted(_KNOWN_SETTINGS))})"
            )
        rules = parse_rules(settings, problems)
        audit, allowed = audit_settings(settings.get("audit"), problems)
        if problems or rules is None:
            raise ConfigError.of(problems)
        self.rules = rules
        self.audit_allowed = allowed
        old = self.audit
        if old is not None and audit is not None and old.same(audit):
            return
        if old is not None:
            old.close()
        self.audit = audit
        log.info("authorization: %d rules, default %s", len(rules.rules),
                 "allow" if rules.default_allow else "deny")  # fmt: skip

    def detach(self) -> None:
        if self.audit is not None:
            self.audit.close()

    # -- what the filter sees ------------------------------------------------------------

    def on_request(self, ctx: FilterContext, body: Any) -> Any:
        key = ctx.api_key
        if _OPENED not in ctx.state:
            ctx.state[_OPENED] = True
            # A client that logs in is named by its authentication event.
            self._event(
                "connection_open", ctx, principal=None if key in _SASL else principal_of(ctx)
            )
        if key == ApiKey.SASL_HANDSHAKE:
            ctx.state[_MECHANISM] = body.mechanism
            return body
        if key == ApiKey.SASL_AUTHENTICATE:
            return body
        handler = HANDLERS.get(key)
        out = (
            body
            if handler is None
            else handler(_Judge(self, ctx, self.rules), body, ctx.api_version)
        )
        if key in ADMIN_APIS and self.audit is not None:
            if isinstance(out, Respond):
                self._admin(ctx, out.body)
            else:
                ctx.notes[_ADMIN] = True
        return out

    def on_response(self, ctx: FilterContext, body: Any) -> Any:
        for merge in ctx.notes.get(_MERGES, ()):
            body = merge(body)
        if ctx.api_key == ApiKey.SASL_AUTHENTICATE:
            self._authenticated(ctx, body)
        elif ctx.notes.get(_ADMIN):
            self._admin(ctx, body)
        return body

    def answer_frames(self, api_key: int, api_version: int) -> bool:
        # The large answers: decoded only when a refusal must be merged in.
        return api_key in _FRAMED_ANSWERS

    def on_response_frame(self, ctx: FilterContext, frame: bytes) -> bytes:
        merges = ctx.notes.get(_MERGES)
        if not merges:
            return frame
        key, version = ctx.api_key, ctx.api_version
        _, body = protocol.decode_response(frame, key, version)
        for merge in merges:
            body = merge(body)
        return protocol.encode_response(ctx.correlation_id, key, version, body)[4:]

    def on_upstream(self, api_key: int, api_version: int, body: Any) -> Any:
        if api_key == ApiKey.METADATA:
            for t in body.topics:
                if t.name and t.topic_id != NULL_ID:
                    self.learn(t.name, t.topic_id)
        return body

    def on_close(
        self, state: dict[str, Any], session: Session, client_address: tuple[str, int] | None
    ) -> None:
        if _OPENED in state and self.audit is not None:
            principal = session.principal or (None if session.authenticated else ANONYMOUS)
            where = {"listener": session.listener} if session.listener else {}
            self.audit.write(
                "connection_close", client=_address(client_address), principal=principal, **where
            )

    # -- what the filter keeps -------------------------------------------------------------

    def learn(self, name: str, topic_id: uuid.UUID) -> None:
        ids = self.topic_ids
        if topic_id not in ids and len(ids) >= _MAX_IDS:
            ids.pop(next(iter(ids)))
        ids[topic_id] = name

    def decided(
        self, ctx: FilterContext, allowed: bool, operation: str, resource: str, name: str
    ) -> None:
        decision = "allow" if allowed else "deny"
        key = (decision, operation, resource)
        self.decisions[key] = self.decisions.get(key, 0) + 1
        if self.audit is not None and (not allowed or self.audit_allowed):
            self._event(
                "authorization",
                ctx,
                decision=decision,
                api=_api_name(ctx.api_key),
                operation=operation,
                resource_type=resource,
                resource=name,
            )

    def statistics(self) -> dict[str, Any]:
        return {"authorization": self.decisions}

    def samples(self) -> Iterable[Sample]:
        for (decision, operation, resource), count in sorted(self.decisions.items()):
            yield Sample(
                "trafka_proxy_authorization_decisions",
                "Authorization decisions of the proxy's rules, by decision, operation "
                "and resource type.",
                (("decision", decision), ("operation", operation), ("resource_type", resource)),
                count,
            )
        for outcome, count in sorted(self.authentications.items()):
            yield Sample(
                "trafka_proxy_authentications",
                "Client SASL authentications the proxy saw answered, by outcome.",
                (("outcome", outcome),),
                count,
            )
        if self.audit is not None:
            yield Sample(
                "trafka_proxy_audit_events",
                "Audit log lines written.",
                value=self.audit.written,
            )
            yield Sample(
                "trafka_proxy_audit_failures",
                "Audit log lines that could not be written.",
                value=self.audit.failed,
            )

    # -- audit events ----------------------------------------------------------------------

    def _event(self, event: str, ctx: FilterContext, **fields: Any) -> None:
        if self.audit is None:
            return
        self.audit.write(
            event,
            **{
                "client": _address(ctx.client_address),
                "principal": principal_of(ctx),
                "client_id": ctx.client_id,
                # the named listener the client came by (.listeners), when it did
                **({"listener": ctx.listener} if ctx.listener else {}),
                **fields,
            },
        )

    def _authenticated(self, ctx: FilterContext, body: Any) -> None:
        ok = body.error_code == 0
        if ok and ctx.principal is None:
            return  # a step of an exchange that goes on (SCRAM's server-first)
        outcome = "success" if ok else "failure"
        self.authentications[outcome] = self.authentications.get(outcome, 0) + 1
        fields: dict[str, Any] = {"outcome": outcome, "mechanism": ctx.state.get(_MECHANISM)}
        if not ok:
            fields["error"] = _error_name(body.error_code)
        self._event("authentication", ctx, **fields)

    def _admin(self, ctx: FilterContext, body: Any) -> None:
        if self.audit is None or body is None:
            return
        self._event(
            "admin",
            ctx,
            api=_api_name(ctx.api_key),
            error=_error_name(getattr(body, "error_code", 0) or 0),
            resources=list(_outcomes(body)),
        )


def _outcomes(body: Any) -> Iterable[dict[str, Any]]:
    """What an admin answer says of each resource it names: its name and error."""
    for field in body.__slots__:
        items = getattr(body, field)
        if not isinstance(items, list):
            continue
        for item in items:
            code = getattr(item, "error_code", None)
            if code is None:
                continue
            name = next(
                (
                    getattr(item, f)
                    for f in ("name", "resource_name", "group_id", "user")
                    if getattr(item, f, None)
                ),
                None,
            )
            if name is None and getattr(item, "topic_id", NULL_ID) != NULL_ID:
                name = str(item.topic_id)
            yield {"resource": name, "error": _error_name(code)}


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


def _api_name(key: int) -> str:
    try:
        return protocol.api(key).name
    except (KeyError, ValueError):
        return str(key)


def _address(address: tuple[str, int] | None) -> str | None:
    return None if address is None else f"{address[0]}:{address[1]}"
