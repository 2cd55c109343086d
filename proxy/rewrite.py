"""Address rewriting: the logic, I/O-free, and the filter that applies it
(:class:`BrokerAddresses`, which :mod:`.assembly` puts in every chain, nearest
the brokers, so that the other filters see the proxy's addresses).

Rules:

* Every request that no filter answers (key routing answers the Produce
  requests it sends over the pooled connections; see :mod:`.keyrouting.filter`)
  is forwarded on the upstream connection that pairs with the client's
  connection, in order, with its correlation id unchanged; responses come back
  in the same order. So nothing is renumbered: the proxy only remembers, per
  correlation id, the API and version of each request whose answer it must
  read (:class:`Pending`).
* Answers that carry broker addresses (Metadata, FindCoordinator,
  DescribeCluster, and Produce's ``node_endpoints``, from version 10) are decoded, their
  addresses replaced by the proxy's listener for that node
  (:class:`Addresses`), and encoded again at the same version. Every other
  answer passes byte for byte, and so does a Produce answer without node
  endpoints that its scan on bytes finds exactly as the codec would write it
  (:func:`~trafka.codec.produce_response.as_encoded`).
* Fetch answers from version 16 on, and ShareFetch and ShareAcknowledge
  answers, carry leader hints with addresses (``node_endpoints``, KIP-951) too,
  so that a consumer follows a leader change without asking for metadata.
  A Fetch answer is walked on its bytes first
  (:func:`~trafka.codec.fetch_response.has_body_tags`, records skipped by their
  length): one whose body has no tagged fields (every answer but a refusal
  naming a new leader) names no broker and passes byte for byte; only the
  others are decoded and rewritten. Each hinted broker the proxy had not seen
  gets its listener at once, as one learnt from Metadata does.
* ApiVersions answers are capped, for the APIs above, at the versions the
  proxy's codec knows, so that no client uses a version whose addresses the
  proxy could not read; Produce at v11, the last one naming topics by name
  without transaction version 2's implicit partitions (see
  :data:`PRODUCE_MAX_ROUTED`), and with it the ``transaction.version`` feature
  at level 1 at most, so that clients run transactions with AddPartitionsToTxn
  (a client choosing version 2 would send Produce v11 without adding its
  partitions, refused INVALID_TXN_STATE or TRANSACTION_ABORTABLE). An
  ApiVersions answer the proxy cannot decode
  (the broker's v0 refusal of a version it does not know) passes unchanged.
* An ApiVersions request newer than v4 (Kafka 4.x's clients send v5, KIP-1242,
  whose node-id check would compare the proxy's node with the broker's) is not
  forwarded: the proxy refuses it as a broker that does not know the version
  does (KIP-511), with a v0 answer, UNSUPPORTED_VERSION and the ApiVersions
  versions it reads (:func:`unsupported_api_versions`); the client asks again
  with one of those.
* Metadata answers also teach the proxy each topic's partition count and
  leaders (:class:`~.topics.Topics`), which key routing needs: this filter
  reads them, so it is where the learning is.
* As a filter it reads answers on their frames (``answer_frames``): what it
  does not name (Produce before v10, Fetch before v16, and every API that
  names no broker) crosses the proxy unread. An answer a filter gets over the
  proxy's pool passes it too, decoded (:meth:`BrokerAddresses.on_upstream`,
  through ``ProxyServices.from_upstream``), and so do the proxy's own
  metadata refreshes.
* With SNI virtual hosts (:mod:`.sni`), :class:`VirtualHostNames` names the
  brokers of the answers above within the label a connection asked for
  (``broker-n.<label>.<domain>``), on the answers address rewriting made.
* On a connection of a named listener (:mod:`.listeners`),
  :class:`ListenerAddresses` names the brokers of the answers above at that
  listener's own ports (and host), on the answers address rewriting made.
* Key routing itself is :mod:`.keyrouting.plan`, applied by the filter
  :mod:`.keyrouting.filter`.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trafka.codec import ApiKey, protocol
from trafka.codec.errors import DecodeError, ErrorCode
from trafka.codec.fetch_response import has_body_tags
from trafka.codec.messages import k18_api_versions as av
from trafka.codec.produce_response import as_encoded

from .filters import (
    API_VERSIONS_DECODED,
    Filter,
    FilterContext,
    ProxyServices,
    Respond,
    Session,
)
from .sni import SniNames
from .topics import Topics

__all__ = [
    "READ_APIS",
    "Addresses",
    "BrokerAddresses",
    "ListenerAddresses",
    "Pending",
    "VirtualHostNames",
    "reads_answer",
    "rewrite_response",
    "rewrite_addresses",
    "rewritten",
    "unsupported_api_versions",
]

log = logging.getLogger("trafka.proxy")

# The APIs whose answers name brokers, and Produce (routing). The proxy must
# read them, so ApiVersions answers cap them at the versions the codec knows:
# a client must not use a newer one that would carry addresses past the proxy.
READ_APIS = frozenset(
    {
        ApiKey.PRODUCE,
        ApiKey.FETCH,
        ApiKey.METADATA,
        ApiKey.FIND_COORDINATOR,
        ApiKey.DESCRIBE_CLUSTER,
        ApiKey.SHARE_FETCH,
        ApiKey.SHARE_ACKNOWLEDGE,
    }
)
REWRITTEN_APIS = READ_APIS | {ApiKey.API_VERSIONS}
# Fetch answers name brokers from this version on (see the rules).
FETCH_ENDPOINTS_VERSION = 16
# Produce answers name brokers (node_endpoints, KIP-951) from this version on:
# an older one passes byte for byte, unread.
PRODUCE_ENDPOINTS_VERSION = 10
# Produce stays at v11: v12 adds a transaction's partitions implicitly (KIP-890,
# transaction version 2) and v13 names topics by id (KIP-516), neither of which
# key routing (which moves records between partitions, by topic name) follows.
PRODUCE_MAX_ROUTED = 11
_VERSION_CAPS = {ApiKey.PRODUCE: PRODUCE_MAX_ROUTED}
# With Produce capped below v12 a client must not run transaction version 2 (whose
# partitions join a transaction by Produce v12+ alone): the finalized and supported
# levels of ``transaction.version`` clients read from ApiVersions (Kafka's Java
# client and the SDK choose the flow by them) are capped at 1, so they send
# AddPartitionsToTxn, as to a Kafka 3.x cluster.
TRANSACTION_VERSION = "transaction.version"
_TV_THROUGH_PROXY = 1
# ApiVersions v5 (KIP-1242) asks the broker to check the cluster and node ids the
# client believes it reached; through the proxy the client's idea of the node is
# the proxy's, so v5 is refused like any version the proxy does not read (the
# filters' limit: they see ApiVersions decoded up to this version).
API_VERSIONS_MAX = API_VERSIONS_DECODED
# (and the ApiVersions versions a forwarded answer lists stop there too, so that a
# client does not try v5 only to be refused)
_VERSION_CAPS[ApiKey.API_VERSIONS] = API_VERSIONS_MAX
_HINTING_APIS = frozenset(
    {ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.SHARE_FETCH, ApiKey.SHARE_ACKNOWLEDGE}
)


def reads_answer(api_key: int, api_version: int) -> bool:
    """Whether the proxy must read the answer to this request (else it passes
    byte for byte)."""
    if api_key == ApiKey.FETCH:
        return api_version >= FETCH_ENDPOINTS_VERSION
    if api_key == ApiKey.PRODUCE:
        return api_version >= PRODUCE_ENDPOINTS_VERSION
    return api_key in REWRITTEN_APIS


class Addresses:
    """Which proxy address stands for which upstream broker.

    ``listen_for(node_id, host, port)`` returns the proxy's (host, port) for
    that broker; the driver supplies it (opening a listener on first sight).
    """

    def __init__(self, listen_for: Callable[[int, str, int], tuple[str, int]]) -> None:
        self._listen_for = listen_for

    def __call__(self, node_id: int, host: str, port: int) -> tuple[str, int]:
        return self._listen_for(node_id, host, port)


@dataclass(frozen=True, slots=True)
class Pending:
    """A request whose answer the proxy must read."""

    api_key: int
    api_version: int


def rewrite_addresses(key: int, body: Any, addresses: Addresses) -> Any:
    """``body`` (a decoded answer to API ``key``) naming the proxy's listeners
    instead of brokers."""
    if key == ApiKey.METADATA:
        brokers = [
            dataclasses.replace(b, host=h, port=p)
            for b in body.brokers
            for h, p in [addresses(b.node_id, b.host, b.port)]
        ]
        return dataclasses.replace(body, brokers=brokers)
    if key == ApiKey.FIND_COORDINATOR:
        if body.coordinators:
            coordinators = []
            for c in body.coordinators:
                if c.node_id >= 0 and not c.error_code:
                    h, p = addresses(c.node_id, c.host, c.port)
                    c = dataclasses.replace(c, host=h, port=p)
                coordinators.append(c)
            return dataclasses.replace(body, coordinators=coordinators)
        if body.node_id >= 0 and not body.error_code:
            h, p = addresses(body.node_id, body.host, body.port)
            return dataclasses.replace(body, host=h, port=p)
        return body
    if key == ApiKey.DESCRIBE_CLUSTER:
        brokers = [
            dataclasses.replace(b, host=h, port=p)
            for b in body.brokers
            for h, p in [addresses(b.broker_id, b.host, b.port)]
        ]
        return dataclasses.replace(body, brokers=brokers)
    if key in _HINTING_APIS and body.node_endpoints:
        endpoints = [
            dataclasses.replace(e, host=h, port=p)
            for e in body.node_endpoints
            for h, p in [addresses(e.node_id, e.host, e.port)]
        ]
        return dataclasses.replace(body, node_endpoints=endpoints)
    return body


def rewrite_response(
    pending: Pending, frame: bytes | memoryview, addresses: Addresses, topics: Topics
) -> bytes:
    """The frame to send the client (size prefix included) for an upstream answer.

    Raises:
        DecodeError: the answer is malformed.
    """
    out = rewritten(pending.api_key, pending.api_version, bytes(frame), addresses, topics)
    return len(out).to_bytes(4, "big") + out


def rewritten(
    key: int, version: int, frame: bytes, addresses: Addresses, topics: Topics | None
) -> bytes:
    """An upstream answer (its frame, size prefix not included) as the client
    gets it: ``frame`` itself when nothing in it changes; ``topics`` learns
    from a Metadata answer (None: an answer read again, learnt from already).

    Raises:
        DecodeError: the answer is malformed.
    """
    if key == ApiKey.API_VERSIONS:
        return _cap_versions(frame, version)
    if key == ApiKey.PRODUCE and as_encoded(frame, version):
        return frame  # no addresses in it: as it came (read on bytes)
    if key == ApiKey.FETCH and has_body_tags(frame, version) is False:
        return frame  # no node_endpoints: as it came, records uncopied
    header, body = protocol.decode_response(frame, key, version)
    if key == ApiKey.METADATA and topics is not None:
        topics.learn(body, version)
    body = rewrite_addresses(key, body, addresses)
    return protocol.encode_response(header.correlation_id, key, version, body)[4:]


def _cap_versions(frame: bytes, version: int) -> bytes:
    try:
        header, body = protocol.decode_response(frame, ApiKey.API_VERSIONS, version)
    except DecodeError:
        return frame
    capped = []
    for entry in body.api_keys:
        if entry.api_key in READ_APIS or entry.api_key == ApiKey.API_VERSIONS:
            known = protocol.api(entry.api_key).max_version
            cap = min(known, _VERSION_CAPS.get(entry.api_key, known))
            if entry.max_version > cap:
                entry = dataclasses.replace(entry, max_version=max(cap, entry.min_version))
        capped.append(entry)
    body = dataclasses.replace(
        body,
        api_keys=capped,
        supported_features=[
            dataclasses.replace(f, max_version=min(f.max_version, _TV_THROUGH_PROXY))
            if f.name == TRANSACTION_VERSION
            else f
            for f in body.supported_features
        ],
        finalized_features=[
            dataclasses.replace(
                f,
                max_version_level=min(f.max_version_level, _TV_THROUGH_PROXY),
                min_version_level=min(f.min_version_level, _TV_THROUGH_PROXY),
            )
            if f.name == TRANSACTION_VERSION
            else f
            for f in body.finalized_features
        ],
    )
    return protocol.encode_response(header.correlation_id, ApiKey.API_VERSIONS, version, body)[4:]


def unsupported_api_versions(correlation_id: int) -> bytes:
    """The answer (size prefix included) to an ApiVersions request of a version
    the proxy's codec does not know: v0, UNSUPPORTED_VERSION, and the
    ApiVersions versions the proxy reads (KIP-511, as a broker answers)."""
    info = protocol.api(ApiKey.API_VERSIONS)
    body = av.ApiVersionsResponse(
        error_code=ErrorCode.UNSUPPORTED_VERSION,
        api_keys=[
            av.ApiVersionsResponse.ApiVersion(
                api_key=ApiKey.API_VERSIONS,
                min_version=info.min_version,
                max_version=API_VERSIONS_MAX,
            )
        ],
    )
    return protocol.encode_response(correlation_id, ApiKey.API_VERSIONS, 0, body)


class BrokerAddresses(Filter):
    """The proxy's address rewriting as a filter (see the module's rules): it
    reads, on their frames, the answers that name brokers, and refuses
    ApiVersions newer than :data:`API_VERSIONS_MAX`."""

    api_keys: frozenset[int] | None = frozenset()

    def attach(self, services: ProxyServices) -> None:
        self._addresses = Addresses(services.listen_for)
        self._topics = services.topics

    def request_frames(self, api_key: int, api_version: int) -> bool:
        return api_key == ApiKey.API_VERSIONS and api_version > API_VERSIONS_MAX

    def answer_frames(self, api_key: int, api_version: int) -> bool:
        return reads_answer(api_key, api_version)

    def on_request_frame(self, ctx: FilterContext, frame: bytes) -> Any:
        # Its answer could not be capped: refused here, as the rules say.
        return Respond(unsupported_api_versions(ctx.correlation_id)[4:])

    def on_response_frame(self, ctx: FilterContext, frame: bytes) -> bytes:
        return rewritten(ctx.api_key, ctx.api_version, frame, self._addresses, self._topics)

    def on_upstream(self, api_key: int, api_version: int, body: Any) -> Any:
        if api_key == ApiKey.METADATA:
            self._topics.learn(body, api_version)
        return rewrite_addresses(api_key, body, self._addresses)


class _RenamedPerConnection(Filter):
    """Answers that name brokers renamed for the connection that asked (see
    the module's rules): the answers address rewriting reads, on their frames,
    after the user's filters and before key routing (whose merged answers are
    renamed too); a connection :meth:`renaming` gives no renaming gets them as
    they are."""

    api_keys: frozenset[int] | None = frozenset()

    def renaming(self, session: Session) -> Callable[[int, str, int], tuple[str, int]] | None:
        """How ``session``'s answers name broker ``(node_id, host, port)``; None: as they are."""
        raise NotImplementedError

    def answer_frames(self, api_key: int, api_version: int) -> bool:
        return api_key != ApiKey.API_VERSIONS and reads_answer(api_key, api_version)

    def on_response_frame(self, ctx: FilterContext, frame: bytes) -> Any:
        rename = self.renaming(ctx.session)
        if rename is None:
            return frame
        return rewritten(ctx.api_key, ctx.api_version, frame, Addresses(rename), None)


class VirtualHostNames(_RenamedPerConnection):
    """On a connection that asked for a virtual host, the brokers named within
    its label (``broker-n.<label>.<domain>``). Put in the chain by
    :mod:`.assembly` with ``sni_virtual_hosts``; connections without a label
    get the answers as they are."""

    def __init__(self, names: SniNames) -> None:
        self.names = names

    def renaming(self, session: Session) -> Callable[[int, str, int], tuple[str, int]] | None:
        label = session.virtual_host
        if label is None:
            return None

        def within(node_id: int, host: str, port: int) -> tuple[str, int]:
            return SniNames.within(host, node_id, label), port

        return within


class ListenerAddresses(_RenamedPerConnection):
    """On a connection of a named listener (``ctx.listener``, :mod:`.listeners`),
    each broker named at that listener's own port (and host). Put in the chain
    by :mod:`.assembly` when the proxy has named listeners; connections of the
    proxy's own listeners get the answers as they are."""

    def attach(self, services: ProxyServices) -> None:
        assert services.listen_on is not None  # a proxy with named listeners
        self._listen_on = services.listen_on

    def renaming(self, session: Session) -> Callable[[int, str, int], tuple[str, int]] | None:
        name = session.listener
        if name is None:
            return None
        listen_on = self._listen_on

        def on_listener(node_id: int, _host: str, _port: int) -> tuple[str, int]:
            return listen_on(name, node_id)

        return on_listener
