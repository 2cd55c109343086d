"""Virtual clusters: several tenants share one Kafka cluster through the
proxy, each seeing only its own topics, groups and transactional ids, which
the brokers hold under the tenant's prefix.

Use it in ``trafka proxy``'s file (see docs/proxy.md, "Virtual clusters
(tenants)")::

    [[filter]]
    use = "trafka.proxy.tenants:Tenants"
    [[filter.settings.tenants]]
    name = "acme"
    prefix = "acme."
    principals = ["User:alice"]
    hosts = ["acme"]
    listeners = ["acme"]

Rules:

* A client's tenant is picked by the principal it authenticated as
  (``ctx.principal``: SASL through the proxy, or a client certificate's,
  :mod:`.mtls`), or by the virtual host its TLS handshake's SNI name named
  (``ctx.virtual_host``: ``broker-N.<label>.<sni_domain>``, with the
  proxy's ``sni_virtual_hosts``, :mod:`.sni`), or by the named listener it
  connected to (``ctx.listener``: a port of the proxy's ``listeners``,
  :mod:`.listeners`). A tenant names principals, labels (``hosts``),
  listeners, or several of them; a principal, a label and a listener each
  belongs to one tenant at most. Labels are DNS labels (letters, digits,
  ``-`` inside), compared lowercased; a tenant with ``hosts`` needs the
  proxy's ``sni_domain`` and ``sni_virtual_hosts``, one with ``listeners``
  names listeners the proxy defines (checked with the proxy's settings,
  :meth:`Tenants.check_with`).
* A client that named a label is that label's tenant's from its first
  request, with no principal needed; a label no tenant names closes its
  connection (logged, naming it). When its principal belongs to a tenant
  too, both must name the same one: else its connection is closed (logged,
  naming both), checked at every request, so a SASL login as another
  tenant's principal closes it as well. A principal that belongs to no
  tenant (``User:ANONYMOUS``, a TLS client without a certificate) leaves
  the label to decide. A client that named no label is picked by its
  principal alone.
* A listener works as a label does: a client on a tenant's listener is that
  tenant's from its first request, with no principal needed, and a principal
  of another tenant closes its connection (logged, naming both). A listener
  no tenant names is not refused (the operator made it, the client did not
  choose it): its clients are picked by their principal, as on the proxy's
  own port.
* Before a client has a principal, only ApiVersions and SASL pass: any other
  request closes its connection (logged), and so does any request of a
  client whose principal belongs to no tenant (logged, naming it):
  forwarded as it is, it would name every tenant's resources. A client with
  a certificate (mutual TLS) has its principal from its first request; an
  anonymous one (``User:ANONYMOUS``, a TLS client without a certificate
  when they are only requested) is a tenant's only if a tenant names it.
* The names of every API the filter serves (:data:`~.tenants_apis.SERVED`)
  are rewritten both ways, by :mod:`.tenants_apis`: prefixed on the way to
  the broker, unprefixed on the way back, another tenant's left out of every
  listing, topic ids checked against the topics the proxy has seen named; a
  classic consumer group's embedded subscriptions and assignments by
  :mod:`.tenants_groups`; Produce requests by name on their bytes, by
  :mod:`.tenants_produce`. Share groups (KIP-932) are served: their group
  ids and topic names are rewritten, their fetches' topic ids checked; and
  streams groups (KIP-1071): their group ids and every topic of their
  topologies, regexes anchored behind the prefix.
* ApiVersions answers list only the APIs served and those that pass, so
  clients do not try the others. Every other API is refused all the same (a
  client may send it anyway): answered with CLUSTER_AUTHORIZATION_FAILED
  when its answer has an error code of its own, else the client's connection
  is closed (logged, naming the API); an API version the proxy's codec does
  not read is refused the same way (it cannot be rewritten). APIs that name
  no tenant's resource (ApiVersions, SASL, DescribeCluster, client
  telemetry) pass.
* Place: first in the chain (nearest the clients). Every filter after it
  (authorization, encryption, key routing) sees and is configured with the
  broker's names, which is what key routing learns partitions by (Metadata
  answers read by address rewriting, nearest the brokers).
* No prefix may start another (``a.`` and ``a.b.``): one tenant could then
  name the other's resources. They are compared with ``.`` read as ``_``
  (``a.`` and ``a_`` are refused): Kafka refuses a topic whose name collides
  with another's so, which would tell one tenant of the other's topic.
  Prefixes are made of the characters of topic names (letters, digits,
  ``.``, ``_``, ``-``).
* A tenant's ``producer_byte_rate`` and ``consumer_byte_rate`` bound what
  all its connections produce and fetch, measured and throttled as Kafka's
  broker does it (:mod:`.tenants_quotas`; the filter's
  ``quota_window_num`` and ``quota_window_size_seconds``); its
  ``request_percentage`` bounds the proxy's time handling its requests, as
  Kafka's request quota bounds a broker's (KIP-124).
* The settings are checked all at once and reloaded on SIGHUP (the next
  request of every connection follows the new tenants).
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields, is_dataclass, replace
from typing import TYPE_CHECKING, Any

from trafka.codec import ApiKey, protocol
from trafka.codec.errors import ErrorCode
from trafka.sdk import ConfigError

from . import tenants_groups as groups
from . import tenants_produce as produce
from .filters import CloseConnection, Filter, FilterContext, Respond, Sample, decodable, reframed
from .sni import is_label
from .tenants_apis import (
    ANSWER_NAMES,
    CONFIG_APIS,
    NAMED_RESOURCES,
    NULL_ID,
    PASSING,
    REQUEST_NAMES,
    SERVED,
    STREAMS_REGEXES,
    hide_ids,
    map_names,
    regex_shown,
    regex_within,
    restore_ids,
)
from .tenants_quotas import QUOTA_SETTINGS, TenantQuotas, parse_rate, parse_windows

if TYPE_CHECKING:
    from .config import ProxyConfig

__all__ = ["Tenant", "Tenants"]

log = logging.getLogger("trafka.proxy")

_PREFIX = re.compile(r"[A-Za-z0-9._-]+")
_KNOWN = {"tenants", *QUOTA_SETTINGS}
_KNOWN_TENANT = {
    "name",
    "prefix",
    "principals",
    "hosts",
    "listeners",
    "producer_byte_rate",
    "consumer_byte_rate",
    "request_percentage",
}
_MAX_IDS = 100_000  # topic ids remembered (a cluster's topics)
# ctx.notes keys
_SWAPPED = "trafka.proxy.tenants:swapped"
_EVERY = "trafka.proxy.tenants:every"
_TENANT = "trafka.proxy.tenants:tenant"
_REFUSED = "trafka.proxy.tenants:refused"
_PROTOCOL_TYPE = "trafka.proxy.tenants:protocol_type"  # ctx.state: group id -> protocol type
_GROUP_DATA = frozenset({ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP, ApiKey.DESCRIBE_GROUPS})
# The answers that carry records: their bytes pass untouched where nothing is renamed.
_RECORDS = frozenset({ApiKey.FETCH, ApiKey.SHARE_FETCH})


@dataclass(frozen=True, slots=True)
class Tenant:
    """One tenant: its name, the prefix of its resources on the brokers, and
    the principals that are it."""

    name: str
    prefix: str
    principals: tuple[str, ...]
    hosts: tuple[str, ...] = ()  # SNI virtual hosts' labels (lowercased)
    listeners: tuple[str, ...] = ()  # the proxy's named listeners (.listeners)
    # bytes per second, None: unlimited (.tenants_quotas)
    producer_byte_rate: float | None = None
    consumer_byte_rate: float | None = None
    # percent of one thread's time, None: unlimited (.tenants_quotas)
    request_percentage: float | None = None

    def add(self, name: str) -> str:
        return self.prefix + name

    def strip(self, name: str) -> str | None:
        """The tenant's name for a broker's, None when it is not the tenant's."""
        prefix = self.prefix
        if name.startswith(prefix) and len(name) > len(prefix):
            return name[len(prefix) :]
        return None


def parse_tenants(
    settings: Mapping[str, Any], problems: list[str]
) -> tuple[dict[str, Tenant], dict[str, Tenant], dict[str, Tenant]]:
    """The tenants by principal, by SNI label, and by named listener (every
    problem appended to ``problems``)."""
    unknown = sorted(set(settings) - _KNOWN)
    if unknown:
        problems.append(f"unknown setting {unknown[0]!r} (tenants)")
    entries = settings.get("tenants", [])
    if not isinstance(entries, list) or not entries:
        problems.append("tenants: a list of at least one tenant is needed")
        return {}, {}, {}
    by_principal: dict[str, Tenant] = {}
    by_host: dict[str, Tenant] = {}
    by_listener: dict[str, Tenant] = {}
    tenants: list[Tenant] = []
    for i, entry in enumerate(entries):
        where = f"tenants[{i}]"
        if not isinstance(entry, Mapping):
            problems.append(f"{where}: not a table")
            continue
        extra = sorted(set(entry) - _KNOWN_TENANT)
        if extra:
            problems.append(
                f"{where}: unknown setting {extra[0]!r} (name, prefix, principals, hosts, "
                "listeners, producer_byte_rate, consumer_byte_rate, request_percentage)"
            )
        name, prefix = entry.get("name"), entry.get("prefix")
        principals, hosts = entry.get("principals", []), entry.get("hosts", [])
        listeners = entry.get("listeners", [])
        if not isinstance(name, str) or not name:
            problems.append(f"{where}: name must be a non-empty string")
        if not isinstance(prefix, str) or not _PREFIX.fullmatch(prefix):
            problems.append(f"{where}: prefix {prefix!r} must be letters, digits, '.', '_', '-'")
            continue
        if not all(isinstance(x, list) for x in (principals, hosts, listeners)):
            problems.append(f"{where}: principals, hosts and listeners must be lists")
            continue
        if not principals and not hosts and not listeners:
            problems.append(
                f"{where}: a tenant needs principals, hosts (SNI labels), listeners, or several"
            )
            continue
        bad = [x for x in listeners if not isinstance(x, str) or not x]
        if bad:
            problems.append(f"{where}: listener {bad[0]!r} is not a listener's name")
        tenant = Tenant(
            str(name),
            prefix,
            tuple(str(p) for p in principals),
            _labels(hosts, where, problems),
            tuple(x for x in listeners if isinstance(x, str) and x),
            parse_rate(entry, "producer_byte_rate", where, problems),
            parse_rate(entry, "consumer_byte_rate", where, problems),
            parse_rate(entry, "request_percentage", where, problems, "percent of one thread"),
        )
        for other in tenants:
            # Kafka refuses a topic whose name collides with another's once
            # '.' is read as '_' (acme.x, acme_x): compared so, too.
            mine, theirs = prefix.replace(".", "_"), other.prefix.replace(".", "_")
            if theirs.startswith(mine) or mine.startswith(theirs):
                problems.append(
                    f"{where}: prefix {prefix!r} and tenant {other.name!r}'s {other.prefix!r}: "
                    "one starts the other ('.' read as '_', as Kafka compares topic names)"
                )
        for p in tenant.principals:
            if ":" not in p:
                problems.append(f"{where}: principal {p!r} is not type:name (User:alice)")
            elif p in by_principal:
                problems.append(
                    f"{where}: principal {p!r} is already in tenant {by_principal[p].name!r}"
                )
            else:
                by_principal[p] = tenant
        for kind, names, owners in (
            ("host", tenant.hosts, by_host),
            ("listener", tenant.listeners, by_listener),
        ):
            for name in names:
                if name in owners:
                    problems.append(
                        f"{where}: {kind} {name!r} is already in tenant {owners[name].name!r}"
                    )
                else:
                    owners[name] = tenant
        tenants.append(tenant)
    return by_principal, by_host, by_listener


def _labels(hosts: list[Any], where: str, problems: list[str]) -> tuple[str, ...]:
    """A tenant's SNI labels, lowercased (those that are not one DNS label named)."""
    labels = []
    for host in hosts:
        if isinstance(host, str) and is_label(host):
            labels.append(host.lower())
        else:
            problems.append(
                f"{where}: host {host!r} is not one DNS label (letters, digits, '-' inside: "
                "the <label> of broker-N.<label>.<sni_domain>)"
            )
    return tuple(labels)


class Tenants(Filter):
    """The virtual clusters filter (see the module's rules)."""

    api_keys = None  # every API: those not served are refused

    def __init__(self) -> None:
        self.by_principal: dict[str, Tenant] = {}
        self.by_host: dict[str, Tenant] = {}
        self.by_listener: dict[str, Tenant] = {}
        self.topic_ids: dict[uuid.UUID, str] = {}
        # (tenant, outcome) -> requests; outcome: served, refused
        self.counted: dict[tuple[str, str], int] = {}
        self.quotas = TenantQuotas()

    def configure(self, settings: Mapping[str, Any]) -> None:
        problems: list[str] = []
        by_principal, by_host, by_listener = parse_tenants(settings, problems)
        windows = parse_windows(settings, problems)
        if problems:
            raise ConfigError.of(problems)
        self.by_principal, self.by_host = by_principal, by_host
        self.by_listener = by_listener
        self.quotas.configure(windows)
        every = (*by_principal.values(), *by_host.values(), *by_listener.values())
        names = {t.name for t in every}
        log.info("tenants: %d tenants", len(names))

    def check_with(self, config: ProxyConfig) -> list[str]:
        problems = []
        if self.by_host and not (config.sni_domain and config.sni_virtual_hosts):
            hosts = sorted(self.by_host)
            problems.append(
                f"tenants name hosts ({', '.join(hosts)}): they need the proxy's sni_domain "
                "and sni_virtual_hosts (clients name broker-N.<host>.<sni_domain>)"
            )
        defined = {n.name for n in config.listeners}
        unknown = sorted(set(self.by_listener) - defined)
        if unknown:
            problems.append(
                f"tenants name listeners ({', '.join(unknown)}) the proxy does not define "
                f"(its listeners: {', '.join(sorted(defined)) or 'none'})"
            )
        return problems

    # -- requests --------------------------------------------------------------------------

    def request_frames(self, api_key: int, api_version: int) -> bool:
        # A version the codec does not read cannot be rewritten: refused as
        # frames. Produce by name is rewritten on its bytes (.tenants_produce),
        # every version seen as frames: their size is what its quota counts.
        if api_key == ApiKey.PRODUCE:
            return True
        return api_key not in PASSING and not decodable(api_key, api_version)

    def on_request_frame(self, ctx: FilterContext, frame: bytes) -> Any:
        if ctx.state and (wait := self.quotas.hold(ctx)):
            # The channel is muted (a quota's throttle): an awaitable, which the
            # chain awaits as it awaits an async on_request.
            return self.quotas.after(wait, self._request_frame, ctx, frame)
        return self._request_frame(ctx, frame)

    def _request_frame(self, ctx: FilterContext, frame: bytes) -> Any:
        if ctx.api_key != ApiKey.PRODUCE or not decodable(ctx.api_key, ctx.api_version):
            raise CloseConnection(
                f"tenants: {_api_name(ctx.api_key)} v{ctx.api_version} cannot be served to a tenant"
            )
        tenant = self._tenant(ctx)
        self._count(tenant, "served")
        ctx.notes[_TENANT] = tenant
        _, start = protocol.decode_request_header(frame)
        out = produce.prefixed(frame, start, ctx.api_version, tenant.prefix.encode())
        if out is None:
            header, body = protocol.decode_request(frame, allow_trailing=True)
            out = reframed(header, self._request(ctx, tenant, body))
        self.quotas.produced(ctx, tenant.name, tenant.producer_byte_rate, out)
        return out

    def on_request(self, ctx: FilterContext, body: Any) -> Any:
        if ctx.state and (wait := self.quotas.hold(ctx)):
            return self.quotas.after(wait, self._on_request, ctx, body)  # muted: as above
        return self._on_request(ctx, body)

    def _on_request(self, ctx: FilterContext, body: Any) -> Any:
        key = ctx.api_key
        if key in PASSING:
            return body
        tenant = self._tenant(ctx)
        if key not in SERVED:
            self._count(tenant, "refused")
            return self._refuse(ctx, body)
        self._count(tenant, "served")
        ctx.notes[_TENANT] = tenant
        if key in _RECORDS:
            body = self.quotas.capped(tenant.consumer_byte_rate, body)
        return self._request(ctx, tenant, body)

    def _tenant(self, ctx: FilterContext) -> Tenant:
        """The client's tenant (see the rules: who has none is closed)."""
        principal = ctx.principal
        label, listener = ctx.virtual_host, ctx.listener
        picked = None
        if listener is not None and (picked := self.by_listener.get(listener)) is not None:
            what = f"listener {listener!r}"
        elif label is not None:
            picked = self.by_host.get(label)
            if picked is None:
                raise CloseConnection(f"tenants: host {label!r} belongs to no tenant")
            what = f"host {label!r}"
        if picked is not None:
            theirs = self.by_principal.get(principal) if principal is not None else None
            if theirs is not None and theirs != picked:
                raise CloseConnection(
                    f"tenants: {what} is tenant {picked.name!r}'s but principal "
                    f"{principal} is tenant {theirs.name!r}'s"
                )
            return picked
        if principal is None:
            # Not logged in (or as a principal the proxy cannot name): passed
            # on, the request would name the brokers' resources as they are.
            raise CloseConnection(
                f"tenants: {_api_name(ctx.api_key)} from a client with no principal: no tenant"
            )
        tenant = self.by_principal.get(principal)
        if tenant is None:
            raise CloseConnection(f"tenants: principal {principal} belongs to no tenant")
        return tenant

    def _request(self, ctx: FilterContext, tenant: Tenant, body: Any) -> Any:
        key = ctx.api_key
        if key == ApiKey.METADATA and (
            body.topics is None or (ctx.api_version == 0 and not body.topics)
        ):
            ctx.notes[_EVERY] = True
        elif key in CONFIG_APIS:
            body = _config_request(ctx, tenant, body)
            if isinstance(body, Respond):
                return body
        elif key == ApiKey.CONSUMER_GROUP_HEARTBEAT and body.subscribed_topic_regex:
            body = replace(
                body,
                subscribed_topic_regex=regex_within(tenant.prefix, body.subscribed_topic_regex),
            )
        elif key == ApiKey.STREAMS_GROUP_HEARTBEAT:
            body = map_names(body, STREAMS_REGEXES, lambda r: regex_within(tenant.prefix, r))
        elif key in _GROUP_DATA:
            body = _group_data_request(ctx, tenant, body)
        elif key == ApiKey.LIST_TRANSACTIONS and body.transactional_id_pattern:
            body = replace(
                body,
                transactional_id_pattern=regex_within(tenant.prefix, body.transactional_id_pattern),
            )
        if key in _GROUP_DATA and key != ApiKey.DESCRIBE_GROUPS:
            ctx.notes[_PROTOCOL_TYPE] = ctx.state.get(_PROTOCOL_TYPE, {}).get(body.group_id)
        body = map_names(body, REQUEST_NAMES[key], tenant.add)
        swapped: dict[uuid.UUID, uuid.UUID] = {}
        body = hide_ids(key, body, lambda i: self._owned(tenant, i), swapped)
        if swapped:
            ctx.notes[_SWAPPED] = swapped
        return body

    def _owned(self, tenant: Tenant, topic_id: uuid.UUID) -> bool:
        name = self.topic_ids.get(topic_id)
        return name is not None and tenant.strip(name) is not None

    def _refuse(self, ctx: FilterContext, body: Any) -> Any:
        answer_type = protocol.api(ctx.api_key).response_type
        if "error_code" in {f.name for f in fields(answer_type)}:
            return Respond(answer_type(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED))
        raise CloseConnection(f"tenants: {_api_name(ctx.api_key)} is not served to tenants")

    # -- answers ---------------------------------------------------------------------------

    def answer_frames(self, api_key: int, api_version: int) -> bool:
        # Fetch answers by topic id (v13+, ShareFetch's all) name nothing to
        # rewrite: read only when an id was swapped.
        return api_key in _RECORDS

    def on_response_frame(self, ctx: FilterContext, frame: bytes) -> bytes:
        tenant = ctx.notes.get(_TENANT)
        if tenant is None:
            return frame
        started = self.quotas.timer()
        frame = self.quotas.fetched(ctx, tenant.name, tenant.consumer_byte_rate, frame)
        by_id = ctx.api_key == ApiKey.SHARE_FETCH or ctx.api_version >= 13
        if not by_id or _SWAPPED in ctx.notes:
            key, version = ctx.api_key, ctx.api_version
            _, body = protocol.decode_response(frame, key, version)
            body = self._answer(ctx, tenant, body)
            frame = protocol.encode_response(ctx.correlation_id, key, version, body)[4:]
        bound = tenant.request_percentage
        return self.quotas.timed_frame(ctx, tenant.name, bound, started, frame)

    def on_response(self, ctx: FilterContext, body: Any) -> Any:
        key = ctx.api_key
        if key in (ApiKey.METADATA, ApiKey.CREATE_TOPICS, ApiKey.DESCRIBE_TOPIC_PARTITIONS):
            self._learn(body.topics)
        elif key == ApiKey.API_VERSIONS:
            return _served_versions(body)
        tenant = ctx.notes.get(_TENANT)
        if tenant is None:
            return body
        started = self.quotas.timer()
        if key == ApiKey.PRODUCE:
            body = self.quotas.answered(ctx, tenant.name, body)
        body = self._answer(ctx, tenant, body)
        return self.quotas.timed(ctx, tenant.name, tenant.request_percentage, started, body)

    def _answer(self, ctx: FilterContext, tenant: Tenant, body: Any) -> Any:
        key = ctx.api_key
        body = restore_ids(key, body, ctx.notes.get(_SWAPPED, {}))
        if key == ApiKey.METADATA:
            return _metadata(tenant, body, every=bool(ctx.notes.get(_EVERY)))
        if key in CONFIG_APIS:
            body = _config_answer(ctx, tenant, body)
        else:
            if key == ApiKey.DESCRIBE_TOPIC_PARTITIONS:
                cursor = body.next_cursor
                if cursor is not None and tenant.strip(cursor.topic_name) is None:
                    body = replace(body, next_cursor=None)  # see tenants_apis' rules
            body = map_names(body, ANSWER_NAMES.get(key, ()), tenant.strip)
            if key in _GROUP_DATA:
                body = _group_data_answer(ctx, tenant, body)
            elif key == ApiKey.CONSUMER_GROUP_DESCRIBE:
                body = _regexes_shown(tenant, body)
            elif key == ApiKey.STREAMS_GROUP_HEARTBEAT and body.status:
                body = _status_shown(tenant, body)
        return body if key in _RECORDS else _messages(tenant.prefix, body)

    def on_upstream(self, api_key: int, api_version: int, body: Any) -> Any:
        if api_key == ApiKey.METADATA:
            self._learn(body.topics)
        return body

    def _learn(self, topics: Iterable[Any]) -> None:
        ids = self.topic_ids
        for t in topics:
            topic_id = getattr(t, "topic_id", NULL_ID)
            if t.name and topic_id != NULL_ID and not t.error_code:
                if topic_id not in ids and len(ids) >= _MAX_IDS:
                    ids.pop(next(iter(ids)))
                ids[topic_id] = t.name

    # -- what the filter counts ------------------------------------------------------------

    def _count(self, tenant: Tenant, outcome: str) -> None:
        key = (tenant.name, outcome)
        self.counted[key] = self.counted.get(key, 0) + 1

    def statistics(self) -> dict[str, Any]:
        quotas = self.quotas
        return {"tenants": self.counted, "tenant_quotas": {
            "bytes": quotas.bytes, "throttled_ms": quotas.throttled_ms,
            "handled_ns": quotas.handled_ns, "held_requests": quotas.held_requests}}  # fmt: skip

    def samples(self) -> Iterable[Sample]:
        for (tenant, outcome), count in sorted(self.counted.items()):
            yield Sample(
                "trafka_proxy_tenant_requests",
                "Requests of tenants' clients, by tenant and outcome (served, refused).",
                (("tenant", tenant), ("outcome", outcome)),
                count,
            )
        yield from self.quotas.samples()


def _group_data_request(ctx: FilterContext, tenant: Tenant, body: Any) -> Any:
    """JoinGroup's and SyncGroup's embedded topics prefixed (:mod:`.tenants_groups`)."""
    if ctx.api_key == ApiKey.JOIN_GROUP:
        ctx.state.setdefault(_PROTOCOL_TYPE, {})[body.group_id] = body.protocol_type
        return groups.join_request(body, tenant.add)
    if ctx.api_key == ApiKey.SYNC_GROUP:
        known = ctx.state.get(_PROTOCOL_TYPE, {}).get(body.group_id)
        return groups.sync_request(body, tenant.add, known)
    return body


def _group_data_answer(ctx: FilterContext, tenant: Tenant, body: Any) -> Any:
    """The embedded topics unprefixed (the group ids are, by then)."""

    def bare(name: str) -> str:
        return tenant.strip(name) or name

    key = ctx.api_key
    if key == ApiKey.DESCRIBE_GROUPS:
        return groups.describe_groups_answer(body, bare)
    known = ctx.notes.get(_PROTOCOL_TYPE)
    if key == ApiKey.JOIN_GROUP:
        return groups.join_answer(body, bare, known)
    return groups.sync_answer(body, bare, known)


def _served_versions(body: Any) -> Any:
    """An ApiVersions answer listing only the APIs a tenant is served, so that
    clients do not try the others (they would be refused)."""
    return replace(body, api_keys=[a for a in body.api_keys if a.api_key in SERVED | PASSING])


def _config_request(ctx: FilterContext, tenant: Tenant, body: Any) -> Any:
    """A config API's request with its topics and groups prefixed; a change to
    any other resource (a broker's configs) refused: answered
    CLUSTER_AUTHORIZATION_FAILED (merged into the broker's answer when
    others go on)."""
    field, out = CONFIG_APIS[ctx.api_key]
    alters = ctx.api_key != ApiKey.DESCRIBE_CONFIGS
    kept, refused = [], []
    for r in getattr(body, field):
        if r.resource_type in NAMED_RESOURCES:
            kept.append(replace(r, resource_name=tenant.add(r.resource_name)))
        elif alters:
            refused.append(r)
        else:
            kept.append(r)
    if not refused:
        return replace(body, **{field: kept})
    answer_type = protocol.api(ctx.api_key).response_type
    item = next(
        getattr(answer_type, n)
        for n in dir(answer_type)
        if n.endswith("ResourceResponse") and isinstance(getattr(answer_type, n), type)
    )
    errors = [
        item(
            error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
            error_message=None,
            resource_type=r.resource_type,
            resource_name=r.resource_name,
        )
        for r in refused
    ]
    if not kept:
        return Respond(answer_type(**{out: errors}))
    ctx.notes[_REFUSED] = errors
    return replace(body, **{field: kept})


def _config_answer(ctx: FilterContext, tenant: Tenant, body: Any) -> Any:
    _, out = CONFIG_APIS[ctx.api_key]
    results = [
        replace(r, resource_name=tenant.strip(r.resource_name) or r.resource_name)
        if r.resource_type in NAMED_RESOURCES
        else r
        for r in getattr(body, out)
    ]
    return replace(body, **{out: [*results, *ctx.notes.get(_REFUSED, ())]})


def _regexes_shown(tenant: Tenant, body: Any) -> Any:
    """ConsumerGroupDescribe's members' regexes as the tenant gave them."""
    return replace(
        body,
        groups=[
            replace(
                g,
                members=[
                    replace(
                        m,
                        subscribed_topic_regex=regex_shown(tenant.prefix, m.subscribed_topic_regex),
                    )
                    if m.subscribed_topic_regex
                    else m
                    for m in g.members
                ],
            )
            for g in body.groups
        ],
    )


def _status_shown(tenant: Tenant, body: Any) -> Any:
    """A streams heartbeat's status details without the prefix (they name the
    group's own topics: "missing source topics acme.orders")."""
    prefix = tenant.prefix
    return replace(
        body,
        status=[replace(s, status_detail=s.status_detail.replace(prefix, "")) for s in body.status],
    )


def _metadata(tenant: Tenant, body: Any, *, every: bool) -> Any:
    """A Metadata answer with the tenant's topics only: in an answer of every
    topic the others are left out; a topic asked by id that is not the
    tenant's is answered UNKNOWN_TOPIC_ID, as an id that does not exist."""
    topics = []
    for t in body.topics:
        own = tenant.strip(t.name) if t.name else None
        if own is not None:
            topics.append(replace(t, name=own))
        elif not every:
            if t.name is None or t.topic_id == NULL_ID:
                topics.append(t)  # an error naming no topic
            else:
                topics.append(
                    replace(
                        t,
                        name=None,
                        error_code=ErrorCode.UNKNOWN_TOPIC_ID,
                        partitions=[],
                        is_internal=False,
                    )
                )
    return replace(body, topics=topics)


def _messages(prefix: str, body: Any, depth: int = 0) -> Any:
    """An answer whose error messages do not give the tenant's prefix away
    (Produce's "unknown topic-partition acme.orders-0", CreateTopics' "Topic
    'acme.x' already exists")."""
    messages, lists = _message_plan(type(body))
    changes: dict[str, Any] = {}
    for name in messages:
        value = getattr(body, name)
        if value and prefix in value:
            changes[name] = value.replace(prefix, "")
    if depth < 3:
        for name in lists:
            items = getattr(body, name)
            if items and is_dataclass(items[0]):
                out = [_messages(prefix, v, depth + 1) for v in items]
                if any(o is not v for o, v in zip(out, items, strict=True)):
                    changes[name] = out
    return replace(body, **changes) if changes else body


_PLANS: dict[type, tuple[tuple[str, ...], tuple[str, ...]]] = {}


def _message_plan(cls: type) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """A message class's error message fields, and its list fields."""
    plan = _PLANS.get(cls)
    if plan is None:
        messages = tuple(f.name for f in fields(cls) if f.name.endswith("error_message"))
        lists = tuple(f.name for f in fields(cls) if str(f.type).startswith("list["))
        plan = _PLANS[cls] = (messages, lists)
    return plan


def _api_name(key: int) -> str:
    try:
        return protocol.api(key).name
    except (KeyError, ValueError):
        return str(key)
