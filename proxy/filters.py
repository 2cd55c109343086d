"""The proxy's extension point: filters that see requests and answers, decoded
or as frames.

A filter is Python code the proxy runs on the requests and answers of the APIs
it names, decoded (the codec's dataclasses, as :mod:`trafka.codec.protocol`
gives them) or as the frames that crossed. It may pass them on unchanged, change them (return a new body:
the codec's dataclasses are frozen, so ``dataclasses.replace``), answer a
request itself (:class:`Respond`), which then never reaches a broker, or
answer it later (:class:`RespondLater`) from work of its own, such as requests
to other brokers over the proxy's pooled connections. The proxy's key routing
is such a filter (:class:`~.keyrouting.filter.KeyRouting`).

Rules:

* Filters run in the order given (``ProxyConfig.filters``) on requests, and in
  the reverse order on answers, as a chain: each sees what the one before it
  returned. The proxy's key routing, then its SASL watch and address
  rewriting, are the chain's last filters (nearest the brokers): a user's
  filter sees what the client sends and what it will receive (broker
  addresses already the proxy's, a routed Produce's answer already merged).
* A request answered by :class:`Respond` or :class:`RespondLater` goes to no
  broker; the filters before the one that answered see that answer on their
  way back, as any other. The client's answers keep the order of its
  requests, whichever way each was answered.
* ``on_request`` may be a coroutine function (``async def``): the client's
  next request is read once it returns, so it should only start slow work and
  hand it over as :class:`RespondLater`. ``on_response`` is synchronous. Both
  run on the proxy's event loop: keep them quick, no blocking I/O (use
  ``trio.to_thread`` for CPU-heavy work).
* A filter that raises closes the client's connection (the error is logged, at
  most once a minute per filter); other clients go on. Raising
  :class:`CloseConnection` does the same, logged as a warning with its message.
* :class:`FilterContext` tells a filter who is asking (the client's address,
  client id, the broker the connection stands for, whether it authenticated)
  and carries ``state``, a dictionary private to the client connection, and
  ``notes``, one private to the request and its answer.
* :meth:`Filter.attach` hands a filter the proxy's :class:`ProxyServices` when
  the proxy starts: its pooled upstream connections (and pools of the
  filter's own), what it knows of topics and leaders, its listeners, its
  nursery. :meth:`Filter.detach` is called when it stops.
  :meth:`Filter.configure` hands it the settings of its entry in ``trafka
  proxy``'s file, before the proxy starts and again on SIGHUP (see
  :mod:`.reload`).
* An API the proxy's codec does not know, or a version it does not, passes
  undecoded (filters that asked for its frames see them).
* A filter declares the APIs it sees decoded (:attr:`Filter.api_keys`, or its
  :meth:`Filter.wants`), and those it sees as frames, the bytes that crossed
  (:meth:`Filter.request_frames`, :meth:`Filter.answer_frames`, by API and
  version: :meth:`Filter.on_request_frame`, :meth:`Filter.on_response_frame`).
  The proxy asks once per API and version, the first time it meets them, so
  the answers must not change while it runs. A request no filter asks to see
  is not decoded: it crosses the proxy as the bytes that arrived (its header
  read for its API, version and correlation id), and so does its answer. Name
  only the APIs you need: ``api_keys = None`` (every API) makes the proxy
  decode everything. In one direction a filter sees an API either decoded or
  as frames (frames when it asks for both). A filter that sees frames answers
  with frames: :class:`Respond`'s body, or what :class:`RespondLater`'s
  ``answer()`` returns, is then the whole answer (header included, size prefix
  not), as ``on_response_frame`` gives and returns it. A frame's header keeps
  the request's API, version and correlation id.
* ``on_response`` and ``on_response_frame`` may return :class:`CloseAfter`:
  that answer goes on to the client, then the client's connection closes.
* :class:`Session` is what filters learn of a client connection's
  authentication: a filter sets it (the SASL watch, :mod:`.principals`, once
  the broker accepted the client's login), every filter reads it through
  ``ctx.authenticated``, ``ctx.principal`` and ``ctx.pool`` (the pool a
  filter's requests on the client's behalf should go over). It also holds
  what the client's TLS handshake told: its certificate's subject and the
  virtual host its SNI name named (``ctx.virtual_host``, :mod:`.sni`), and
  the named listener it connected to (``ctx.listener``, :mod:`.listeners`).
* :meth:`Filter.on_close` hears of a client connection's end (one that sent a
  request), with its ``state``, :class:`Session` and address (the
  authorization filter's audit log writes it, :mod:`.authz`).
* What a filter counts reaches the proxy through the filter's own surface:
  :meth:`Filter.statistics` (shown in ``RunningProxy.statistics.filters``)
  and :meth:`Filter.samples` (the proxy's Prometheus metrics).
* The proxy's core knows no filter by type and does nothing to the requests
  and answers that cross it but frame them and keep their order: address
  rewriting (:mod:`.rewrite`'s :class:`~.rewrite.BrokerAddresses`), the SASL
  watch (:mod:`.principals`'s :class:`~.principals.SaslPrincipals`) and key
  routing (:mod:`.keyrouting`) are filters on this API and nothing else, put
  in the chain by :mod:`.assembly`; so a user's filter can do all they do
  (answers read on frames, listeners opened for brokers, pools of its own
  whose connections log in, requests of its own over the pool, answers merged
  from several brokers, state per client connection or per producer). What
  stays in the core, and why: the acks of a forwarded Produce (acks=0 is never
  answered, so the core must know, read on the frame's bytes); the client
  software name of ApiVersions v3+ (``ctx.client_software``, read once per
  connection); that a filter sees decoded only the versions the codec reads,
  and ApiVersions only up to v4 (a broker may answer a newer one with a v0
  refusal that does not decode at the request's version, KIP-511).
"""

from __future__ import annotations

import inspect
import time
import types
from collections.abc import Awaitable, Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from trafka.codec import ApiKey, protocol
from trafka.codec.errors import DecodeError, TrafkaError

if TYPE_CHECKING:
    import trio

    from trafka.common.lograte import RateLimitedLog

    from .pool import UpstreamPool
    from .topics import Topics

__all__ = [
    "CLIENT_KEYS",
    "CloseAfter",
    "CloseConnection",
    "EncodedBody",
    "Filter",
    "FilterContext",
    "FilterError",
    "ProxyServices",
    "Respond",
    "RespondLater",
    "Sample",
    "Session",
    "load_filter",
    "reframed",
]


#: A Produce request's note (:attr:`FilterContext.notes`) left by a filter that
#: rewrote its records' keys (record encryption's key frames): a mapping of
#: each key it wrote to the key the client gave. A filter after it that places
#: records by key (key routing) hashes the client's key, so a record lands
#: where its client's key, not its rewritten bytes, puts it.
CLIENT_KEYS = "trafka.client_keys"


@dataclass(slots=True)
class Session:
    """What the filters learned of a client connection's authentication, kept
    for the connection's life (a filter sets it, see :mod:`.filters`' rules).

    Attributes:
        authenticated: the client authenticates (SASL) on its connection: its
            requests cannot go over the proxy's shared connections.
        principal: who the client authenticated as (``User:<name>``), once a
            filter learned it, or from its TLS certificate (:mod:`.mtls`);
            None otherwise.
        tls_subject: the subject of the client's TLS certificate (RFC 2253,
            as Kafka writes it), None without one.
        pool: pooled connections that log in as the client's principal, for
            what a filter sends on the client's behalf instead of the shared
            pool; None when there are none.
        virtual_host: the label of the SNI name the client asked for in its
            TLS handshake (``broker-N.<label>.<domain>``, lowercased, with
            ``sni_virtual_hosts``: see :mod:`.sni`), None when it named none.
            The core gives it no meaning; a filter may (the tenants filter
            picks a tenant by it).
        listener: the name of the named listener the client connected to
            (``ProxyConfig.listeners``, :mod:`.listeners`), None on the
            proxy's own ports. Not :attr:`virtual_host`: a listener is the
            operator's (a port), a label the client's choice (any label
            passes the handshake), and a filter may trust them differently.
    """

    authenticated: bool = False
    principal: str | None = None
    pool: UpstreamPool | None = None
    tls_subject: str | None = None
    virtual_host: str | None = None
    listener: str | None = None


@dataclass(slots=True)
class FilterContext:
    """What a filter knows of a request.

    Attributes:
        api_key, api_version: the request's API and version.
        correlation_id: the client's correlation id.
        client_id: the client id the client sent (None if none).
        client_address: the client's (host, port).
        node_id: the broker the client's connection stands for (-1: the
            bootstrap listener).
        state: private to the client's connection, shared by its requests.
        session: the connection's :class:`Session` (``authenticated``,
            ``principal`` and ``pool`` read it).
        notes: private to this request and its answer, shared by the filters
            it passes through; one note is a convention between them,
            :data:`CLIENT_KEYS`.
        client_software: the client software name the connection's ApiVersions
            request gave (v3+, KIP-511: ``librdkafka``, ``apache-kafka-java``...),
            None when it gave none.
        handled_ns: the time (nanoseconds, a monotonic clock) the chain has spent
            on this request and its answer so far, on the proxy's event loop:
            the request's way through the chain (each filter's ``on_request``,
            an async one's steps but not its waits, and the decoding and
            encoding between them), and on the answer's way back everything before the
            filter now called. Work done off the chain (a :class:`RespondLater`'s
            ``answer``, threads) is not in it. The tenants filter's
            ``request_percentage`` quota reads it.
    """

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    client_address: tuple[str, int] | None
    node_id: int
    state: dict[str, Any] = field(default_factory=dict)
    session: Session = field(default_factory=Session)
    notes: dict[str, Any] = field(default_factory=dict)
    client_software: str | None = None
    handled_ns: int = 0

    @property
    def authenticated(self) -> bool:
        """The client authenticates (SASL) on its connection (:class:`Session`)."""
        return self.session.authenticated

    @property
    def principal(self) -> str | None:
        """Who the client authenticated as, once known (:class:`Session`)."""
        return self.session.principal

    @property
    def tls_subject(self) -> str | None:
        """The subject of the client's TLS certificate, if it sent one (:class:`Session`)."""
        return self.session.tls_subject

    @property
    def virtual_host(self) -> str | None:
        """The label of the SNI name the client asked for, if any (:class:`Session`)."""
        return self.session.virtual_host

    @property
    def listener(self) -> str | None:
        """The named listener the client connected to, if any (:class:`Session`)."""
        return self.session.listener

    @property
    def pool(self) -> UpstreamPool | None:
        """The pool that logs in as the client's principal, if any (:class:`Session`)."""
        return self.session.pool


@dataclass(frozen=True, slots=True)
class Respond:
    """Answer the request with ``body`` (the API's response dataclass, or
    :class:`EncodedBody`; from ``on_request_frame``, the answer's frame)
    instead of forwarding it. A request that gets no answer (a Produce with
    acks=0) is only kept from the brokers; ``body`` may then be None."""

    body: Any


@dataclass(frozen=True, slots=True)
class EncodedBody:
    """A response body already encoded at the request's API version (what
    follows the response header), for :class:`Respond` and
    :class:`RespondLater` to give instead of the response dataclass: key
    routing writes its merged answers on bytes."""

    data: bytes


@dataclass(frozen=True, slots=True)
class RespondLater:
    """Answer the request with what ``answer()`` returns (the API's response
    dataclass, or :class:`EncodedBody`), awaited in the proxy's nursery: it is always awaited once
    ``on_request`` has returned this, and completes even if the client's
    connection closes meanwhile, so bound it with a deadline. The
    client's later requests are served meanwhile; its answers keep their order.
    If ``answer()`` raises, the client's connection closes."""

    answer: Callable[[], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class CloseAfter:
    """Returned by ``on_response`` (a body) or ``on_response_frame`` (a frame):
    ``answer`` goes on to the client, then its connection closes (the SASL
    watch refuses a client this way)."""

    answer: Any


class CloseConnection(Exception):
    """Raised by a filter: close the client's connection (logged as a warning,
    at most once a minute per message's first word)."""


@dataclass(frozen=True, slots=True)
class ProxyServices:
    """What a proxy offers its filters (:meth:`Filter.attach`).

    Attributes:
        pool: the proxy's pooled upstream connections, one per broker
            (``await pool.send(node_id, client_id, api_key, api_version,
            body)`` writes a request and returns a waiter;
            ``await pool.wait(waiter, deadline)`` its answer's frame).
        topics: partition counts and leaders, as the answers passing through
            the proxy taught it.
        nodes: the ids of the brokers the proxy knows.
        refresh: asks the cluster again for these topics' leaders.
        from_upstream: what the filters do to every answer from a broker
            (:meth:`Filter.on_upstream`), for an answer a filter got over the
            pool: ``from_upstream(api_key, api_version, body)`` learns from it
            (a Metadata answer's partitions and leaders) and returns it naming
            the proxy's listeners instead of brokers.
        nursery: the proxy's own nursery, for work that outlives a client's
            connection.
        quiet: the proxy's rate-limited log.
        listen_for: ``listen_for(node_id, host, port)``: the proxy's (host,
            port) that stands for that broker, its listener opened at first
            sight (and pointed at the new address when a broker moved).
        connect: ``await connect(node_id)``: a new stream to that broker
            (TLS when the proxy's upstream is), for a pool of the filter's own.
        new_pool: ``new_pool(connect)``: an upstream pool with the proxy's
            limits and metrics, whose connections ``await connect(node_id)``
            opens (a stream, or :class:`~.pool.Opened` with its login's
            lifetime); the proxy's own requests (metadata refreshes) try
            these pools before the shared one, since a cluster may answer
            only connections that logged in.
        listen_on: ``listen_on(listener, node_id)``: the (host, port) that
            stands for that broker on that named listener (:mod:`.listeners`),
            its port opened at first sight; the broker must be known (named
            in an answer already, as ``listen_for`` makes it). None: a proxy
            without named listeners.
    """

    pool: UpstreamPool
    topics: Topics
    nodes: Callable[[], list[int]]
    refresh: Callable[[set[str]], None]
    from_upstream: Callable[[int, int, Any], Any]
    nursery: trio.Nursery
    quiet: RateLimitedLog
    listen_for: Callable[[int, str, int], tuple[str, int]]
    connect: Callable[[int], Awaitable[trio.abc.Stream]]
    new_pool: Callable[[Callable[[int], Awaitable[Any]]], UpstreamPool]
    listen_on: Callable[[str, int], tuple[str, int]] | None = None


@dataclass(frozen=True, slots=True)
class Sample:
    """One value of a filter's metric, for the proxy's Prometheus exposition
    (:meth:`Filter.samples`).

    Attributes:
        family: the metric's name (``trafka_proxy_...``; a counter's without
            ``_total``). A family the proxy has itself (``trafka_proxy_errors``
            and ``trafka_proxy_flow_control``, by ``kind``) takes the sample
            among its own.
        help: what the metric means (the first sample's, per family).
        labels: (name, value) pairs, the same names for every sample of a family.
        value: the value now (a counter's never decreases).
        kind: ``counter`` or ``gauge``.
    """

    family: str
    help: str
    labels: tuple[tuple[str, str], ...] = ()
    value: float = 0
    kind: Literal["counter", "gauge"] = "counter"


class Filter:
    """A filter: subclass it and override what you need.

    Attributes:
        api_keys: the APIs whose requests and answers the filter sees (None:
            every API the proxy's codec knows). The others pass the proxy
            undecoded, as bytes.
    """

    api_keys: frozenset[int] | None = None

    def attach(self, services: ProxyServices) -> None:
        """Called once when the proxy starts, before any request."""

    def detach(self) -> None:
        """Called once when the proxy stops."""

    def configure(self, settings: Mapping[str, Any]) -> None:
        """Take the settings of the filter's entry in ``trafka proxy``'s file
        (``[[filter]]``'s ``settings`` table): once before the proxy starts,
        and again on SIGHUP when they changed (on the proxy's event loop).

        Raises:
            ValueError: the settings are refused (the proxy does not start, or
                keeps the old ones). A :class:`~trafka.sdk.ConfigError` (a
                ValueError) whose ``problems`` name several is reported one
                problem a line (``trafka proxy --check-config``). The default
                takes none.
        """
        if settings:
            raise ValueError(f"{_name(self)} takes no settings")

    def check_with(self, config: Any) -> list[str]:
        """The problems of the filter's settings (once configured) given the
        proxy's own (``config``, the :class:`~.config.ProxyConfig`: a filter
        that needs a proxy setting says so), checked with the rest (``--check-config``, at start and on SIGHUP;
        :func:`~.assembly.serve_proxy` refuses to start with any). The
        default: none."""
        return []

    def on_request(self, ctx: FilterContext, body: Any) -> Any:
        """A request on its way to a broker (may be ``async def``).

        Returns:
            ``body`` (passed on), a new body, :class:`Respond` or
            :class:`RespondLater`.
        """
        return body

    def on_response(self, ctx: FilterContext, body: Any) -> Any:
        """An answer on its way to the client.

        Returns:
            ``body`` or a new body.
        """
        return body

    def statistics(self) -> Mapping[str, Any]:
        """Live counters to show in ``RunningProxy.statistics.filters``, by
        name (read once when the proxy starts; give objects that the filter
        keeps updating). Key routing gives ``routing``. The default: none."""
        return {}

    def samples(self) -> Iterable[Sample]:
        """The filter's metrics now, for the proxy's ``/metrics`` (called at each
        scrape, on the proxy's event loop: quick). The default: none."""
        return ()

    def wants(self, api_key: int) -> bool:
        """Whether the filter sees ``api_key``'s requests and answers decoded
        (by default: it is in :attr:`api_keys`)."""
        return self.api_keys is None or api_key in self.api_keys

    def request_frames(self, api_key: int, api_version: int) -> bool:
        """Whether the filter sees these requests as frames (by default: no)."""
        return False

    def answer_frames(self, api_key: int, api_version: int) -> bool:
        """Whether the filter sees these answers as frames (by default: no)."""
        return False

    def on_request_frame(self, ctx: FilterContext, frame: bytes) -> Any:
        """A request on its way to a broker, as its frame (header included,
        size prefix not; may be ``async def``).

        Returns:
            ``frame``, a new frame, :class:`Respond` or :class:`RespondLater`
            (their answer a frame).
        """
        return frame

    def on_response_frame(self, ctx: FilterContext, frame: bytes) -> Any:
        """An answer on its way to the client, as its frame.

        Returns:
            ``frame``, a new frame, or :class:`CloseAfter` with a frame.
        """
        return frame

    def on_upstream(self, api_key: int, api_version: int, body: Any) -> Any:
        """An answer a filter (or the proxy itself: its metadata refreshes) got
        from a broker over a pool, decoded, passed to every filter in turn by
        ``ProxyServices.from_upstream``: what the filter does to every answer
        from a broker (address rewriting learns from it and names the proxy's
        listeners). Synchronous.

        Returns:
            ``body`` or a new body.
        """
        return body

    def on_close(
        self, state: dict[str, Any], session: Session, client_address: tuple[str, int] | None
    ) -> None:
        """A client connection that sent a request has closed: its ``state``
        (``ctx.state``), :class:`Session` and address. Synchronous; what it
        raises is logged (at most once a minute per filter), never the
        connection's other filters' concern. The default: nothing."""


class FilterError(Exception):
    """A filter raised, or returned something that is not a body."""


# ApiVersions is decoded for filters up to this version only: a broker (and the
# proxy's address rewriting) answers a version it does not serve with a v0
# refusal (KIP-511), which does not decode at the request's version.
API_VERSIONS_DECODED = 4

# How a stage sees one direction of an API: not at all, decoded, as frames.
UNSEEN, DECODED, FRAMES = 0, 1, 2


@dataclass(frozen=True, slots=True)
class Stage:
    """A filter of the chain for one API and version, and how it sees the
    requests and the answers (:data:`UNSEEN`, :data:`DECODED`, :data:`FRAMES`)."""

    filter: Filter
    request: int
    answer: int


def decodable(api_key: int, api_version: int) -> bool:
    """Whether filters may see this API and version decoded (the codec reads
    it; ApiVersions only up to :data:`API_VERSIONS_DECODED`)."""
    if api_key == ApiKey.API_VERSIONS and api_version > API_VERSIONS_DECODED:
        return False
    try:
        return protocol.api(api_key).supports(api_version)
    except Exception:
        return False


def stages(filters: Sequence[Filter], api_key: int, api_version: int) -> tuple[Stage, ...]:
    """The chain for one API and version: the filters that see it, in order."""
    decoded = decodable(api_key, api_version)
    chain = []
    for f in filters:
        wants = decoded and f.wants(api_key)
        request = FRAMES if f.request_frames(api_key, api_version) else int(wants)
        answer = FRAMES if f.answer_frames(api_key, api_version) else int(wants)
        if request or answer:
            chain.append(Stage(f, request, answer))
    return tuple(chain)


class Route(NamedTuple):
    """What the core does with one API and version, worked out once."""

    chain: tuple[Stage, ...]
    decodable: bool  # see decodable()
    asks: bool  # a stage sees its requests
    answers: bool  # a stage sees its answers

    @classmethod
    def of(cls, filters: Sequence[Filter], api_key: int, api_version: int) -> Route:
        chain = stages(filters, api_key, api_version)
        return cls(
            chain,
            decodable(api_key, api_version),
            any(s.request != UNSEEN for s in chain),
            any(s.answer != UNSEEN for s in chain),
        )


def client_software(frame: bytes) -> str | None:
    """The client software name an ApiVersions request (v3+) gives, if it can
    be read (:attr:`FilterContext.client_software`)."""
    try:
        _, body = protocol.decode_request(frame, allow_trailing=True)
    except DecodeError:
        return None  # the broker judges the request
    return body.client_software_name or None


def run_upstream(filters: Sequence[Filter], api_key: int, api_version: int, body: Any) -> Any:
    """An answer got from a broker over a pool through every filter's
    :meth:`Filter.on_upstream`, nearest the brokers first (as an answer from a
    broker crosses the chain): ``ProxyServices.from_upstream``.

    Raises:
        FilterError: a filter raised (a malformed answer's DecodeError passes).
    """
    for f in reversed(filters):
        try:
            body = f.on_upstream(api_key, api_version, body)
        except TrafkaError:
            raise
        except Exception as exc:
            raise FilterError(f"{_name(f)}.on_upstream: {exc!r}") from exc
    return body


def run_close(
    filters: Sequence[Filter],
    state: dict[str, Any],
    session: Session,
    client_address: tuple[str, int] | None,
    quiet: RateLimitedLog,
) -> None:
    """Tell every filter that a client connection closed (:meth:`Filter.on_close`)."""
    for f in filters:
        try:
            f.on_close(state, session, client_address)
        except Exception as exc:
            quiet.error(("on_close", _name(f)), "%s.on_close raised: %r", _name(f), exc)


async def run_request(
    chain: Sequence[Stage], ctx: FilterContext, frame: bytes
) -> tuple[bytes, Any, Respond | RespondLater | None, int]:
    """Run the request (its frame, without size prefix) through ``chain`` in order.

    Returns:
        (the frame to forward, its body if a filter had it decoded (else None),
        the :class:`Respond` / :class:`RespondLater` of the filter that answered,
        and how many stages the request reached, for the answer's way back).
        When one answered, its stage is ``chain[reached - 1]``.

    Raises:
        FilterError: a filter raised, or returned what is not a body or frame.
        CloseConnection: a filter asked for it.
        DecodeError: the request does not decode for a filter that sees it decoded.
    """
    header: Any = None
    body: Any = None
    stale = False  # the body changed since the frame was made
    clock = handling_clock
    started = clock()
    for i, stage in enumerate(chain):
        f, seen = stage.filter, stage.request
        if seen == UNSEEN:
            continue
        if seen == FRAMES and stale:
            frame, stale = reframed(header, body), False
        elif seen == DECODED and body is None:
            # Trailing bytes are ignored, as brokers do (librdkafka sends some).
            header, body = protocol.decode_request(frame, allow_trailing=True)
        given = frame if seen == FRAMES else body
        try:
            out = f.on_request_frame(ctx, frame) if seen == FRAMES else f.on_request(ctx, body)
            if inspect.isawaitable(out):
                ctx.handled_ns += clock() - started
                out = await _steps_timed(out, ctx, clock)  # its waits are not handling
                started = clock()
        except CloseConnection:
            raise
        except Exception as exc:
            raise FilterError(f"{_name(f)}.on_request: {exc!r}") from exc
        if isinstance(out, Respond | RespondLater):
            ctx.handled_ns += clock() - started
            return frame, body, out, i + 1
        if out is None or (seen == FRAMES and not isinstance(out, bytes)):
            raise FilterError(f"{_name(f)}.on_request returned {type(out).__name__}")
        if out is not given:
            if seen == FRAMES:
                frame, body = out, None
            else:
                body, stale = out, True
    if stale:
        frame = reframed(header, body)
    ctx.handled_ns += clock() - started
    return frame, body, None, len(chain)


#: The clock :attr:`FilterContext.handled_ns` is read from (nanoseconds,
#: monotonic), looked up at each request (tests replace it).
handling_clock: Callable[[], int] = time.perf_counter_ns


@types.coroutine
def _steps_timed(
    awaitable: Awaitable[Any], ctx: FilterContext, clock: Callable[[], int]
) -> Generator[Any, Any, Any]:
    """``await awaitable``, its steps' time (not the time it is suspended:
    waiting for a broker, a thread, a throttle) added to ``ctx.handled_ns``.
    Hands what it yields to the event loop, and what the loop sends back to
    it, as ``await`` does."""
    steps = awaitable.__await__()
    sent: Any = None
    thrown: BaseException | None = None
    while True:
        started = clock()
        try:
            yielded = steps.send(sent) if thrown is None else steps.throw(thrown)
        except StopIteration as done:
            ctx.handled_ns += clock() - started
            return done.value
        except BaseException:
            ctx.handled_ns += clock() - started
            raise
        ctx.handled_ns += clock() - started
        try:
            sent, thrown = (yield yielded), None
        except BaseException as exc:  # the loop's throw, handed on
            sent, thrown = None, exc


def run_response(
    chain: Sequence[Stage], ctx: FilterContext, frame: bytes
) -> tuple[tuple[bytes, ...], bool]:
    """Run an answer (its frame, without size prefix) back through ``chain``
    (the stages its request reached), in reverse order.

    Returns:
        (the answer to write, size prefix included, as parts; whether the
        client's connection closes after it, :class:`CloseAfter`).

    Raises:
        FilterError: a filter raised, or returned what is not a body or frame.
        DecodeError: the answer does not decode for a filter that sees it decoded.
    """
    key, version = ctx.api_key, ctx.api_version
    body: Any = None
    stale = closing = False
    clock = handling_clock
    started = clock()
    for stage in reversed(chain):
        f, seen = stage.filter, stage.answer
        if seen == UNSEEN:
            continue
        if seen == FRAMES and stale:
            frame = protocol.encode_response(ctx.correlation_id, key, version, body)[4:]
            stale = False
        elif seen == DECODED and body is None:
            _, body = protocol.decode_response(frame, key, version)
        given = frame if seen == FRAMES else body
        now = clock()  # what came before this filter, in ctx.handled_ns when it reads it
        ctx.handled_ns += now - started
        started = now
        try:
            out = f.on_response_frame(ctx, frame) if seen == FRAMES else f.on_response(ctx, body)
        except Exception as exc:
            raise FilterError(f"{_name(f)}.on_response: {exc!r}") from exc
        if isinstance(out, CloseAfter):
            out, closing = out.answer, True
        if out is None or (seen == FRAMES and not isinstance(out, bytes)):
            raise FilterError(f"{_name(f)}.on_response returned {type(out).__name__}")
        if out is not given:
            if seen == FRAMES:
                frame, body = out, None
            else:
                body, stale = out, True
    if stale:
        return (protocol.encode_response(ctx.correlation_id, key, version, body),), closing
    return (len(frame).to_bytes(4, "big"), frame), closing


def load_filter(spec: str) -> Filter:
    """A filter from ``module:attribute`` (a :class:`Filter` subclass or factory,
    called with no arguments, or an instance).

    Raises:
        ValueError: the spec does not name a filter.
    """
    import importlib

    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"filter {spec!r} is not module:attribute")
    try:
        target: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"filter {spec!r}: {exc}") from None
    made = target() if callable(target) and not isinstance(target, Filter) else target
    if not isinstance(made, Filter):
        raise ValueError(f"filter {spec!r} is not a trafka.proxy.Filter")
    return made


def reframed(header: Any, body: Any) -> bytes:
    """A request a filter changed, framed again with the client's own header
    (its correlation id kept: the core's server side); for a filter that sees
    requests as frames and rewrites one decoded (the only framing site filters
    have, :mod:`tests.test_connection_core`)."""
    return protocol.encode_request(header, body)[4:]


def _name(f: Filter) -> str:
    return type(f).__name__
