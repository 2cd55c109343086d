"""The console's HTTP driver: a Starlette app whose handlers ask the cluster
through :class:`~.cluster.Console` and render :mod:`.model`'s views with
Jinja2 templates.

Rules:

* Every page is plain HTML, usable without JavaScript; the little script there
  is only filters a table and asks before a deletion.
* Who may look and who may change is :mod:`.access`'s policy, applied here to
  every request before its handler runs (:func:`make_app`'s ``guarded``): a
  person not known is sent to the login page (a GET) or refused (401); a
  change on a read-only console is refused (403) before its form is read, and
  its page offers none.
* A request that changes the cluster is a same-origin ``POST`` of a form that
  carries its session's token: the token must match, and an ``Origin`` (or,
  without one, a ``Referer``) header must name the console's own host. The
  ``Host`` header must be one the console answers to (its listen host,
  ``localhost`` and loopback addresses, or any when it listens on all
  interfaces), which keeps a DNS-rebinding page from reading a token.
* A page that needs the cluster runs while the cluster answers
  (:meth:`~.cluster.Console.while_reachable`): when it does not, the page says
  so within :meth:`~.health.ClusterHealth.bound` (status 503, reloading
  itself) instead of waiting out the admin client's timeout.
* Bad input is a 400 page naming the field; an unknown topic or group a 404;
  a refusal by the cluster a 502 page with the cluster's error. Never a
  traceback.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import urllib.parse
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import jinja2
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route

from trafka.codec import ErrorCode, KafkaError, TrafkaError
from trafka.sdk import ArgumentError, NewTopic
from trafka.sdk.acls import AclBindingFilter

from . import model, search, throughput
from .access import AccessPolicy, LoginThrottle, Sessions, safe_next
from .cluster import SEARCH_SECONDS, ClusterDown, Console, NotFound
from .model import InputError

__all__ = ["host_allowed", "make_app"]

log = logging.getLogger("trafka.console")

#: A form body larger than this is refused (a produced message's value included).
MAX_FORM_BYTES = 1 << 20
#: A session cookie longer than this is not ours (and is replaced).
_MAX_SID = 64
_TEMPLATES = Path(__file__).parent / "templates"
#: Whom a password login is shown as.
PASSWORD_USER = "password login"

Handler = Callable[[Request], Awaitable[Response]]


# -- HTTP ----------------------------------------------------------------------------------


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(_TEMPLATES),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["bytes"] = model.human_bytes
    env.filters["num"] = lambda n: "-" if n is None else f"{n:,}"
    env.filters["nodes"] = lambda ns: ", ".join(str(n) for n in ns) or "-"
    env.filters["quote"] = lambda s: urllib.parse.quote(str(s), safe="")
    return env


@dataclasses.dataclass
class _Visit:
    """Who asks (None: nobody known), their session id and its form token."""

    user: str | None
    sid: str
    token: str
    new_sid: bool


def make_app(
    clusters: Console | Mapping[str, Console],
    access: AccessPolicy,
    *,
    sessions: Sessions | None = None,
    throttle: LoginThrottle | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Starlette:
    """The console's ASGI app.

    Args:
        clusters: the cluster's side, or each cluster's by its name (the first
            is the default, served at ``/`` as well as under
            ``/clusters/NAME/``).
        access: who may look and change (:func:`~.access.decide_access`).
        sessions, throttle: the login sessions and the guessing brake (new
            ones unless given).
        clock: seconds of a monotonic clock, for sessions and the brake.
    """
    env = _environment()
    consoles = dict(clusters) if isinstance(clusters, Mapping) else {"default": clusters}
    if not consoles:
        raise ValueError("the console needs at least one cluster")
    default = next(iter(consoles))
    sessions = sessions if sessions is not None else Sessions()
    throttle = throttle if throttle is not None else LoginThrottle()

    def cookie_name(request: Request) -> str:
        # Browsers share cookies between the ports of a host: one name per port
        # keeps two consoles on one host from taking each other's sessions.
        server = request.scope.get("server") or ("", 0)
        return f"trafka_console_{server[1]}"

    def visitor(request: Request) -> _Visit:
        sid = request.cookies.get(cookie_name(request)) or ""
        new_sid = not sid or len(sid) > _MAX_SID
        if new_sid:
            sid = Sessions.new_id()
        peer = request.client.host if request.client else None
        user = None
        if access.header is not None:
            user = access.header_user(peer, request.headers.get(access.header))
        if user is None and access.password:
            user = sessions.user(None if new_sid else sid, clock())
        if access.mode == "open":
            user = "anonymous"
        return _Visit(user, sid, sessions.token(sid, user or ""), new_sid)

    def page(
        request: Request, template: str, status_code: int = 200, **context: Any
    ) -> HTMLResponse:
        visit: _Visit | None = getattr(request.state, "visit", None)
        if visit is None:  # a page of Starlette's own (404, 405)
            visit = request.state.visit = visitor(request)
        name = getattr(request.state, "cluster", default)
        prefix = getattr(request.state, "base", "")
        here = request.url.path
        html = env.get_template(template).render(
            base=prefix,
            cluster=name,
            clusters=list(consoles),
            token=visit.token,
            user=visit.user,
            can_logout=access.password and visit.user == PASSWORD_USER,
            read_only=access.read_only,
            why_read_only=access.why_read_only,
            path=here[len(prefix) :] if prefix and here.startswith(prefix) else here,
            **context,
        )
        return HTMLResponse(html, status_code=status_code)

    def cons(request: Request) -> Console:
        """The cluster a page is of (``guarded`` found it by the path)."""
        console: Console = getattr(request.state, "console", consoles[default])
        return console

    def base(request: Request) -> str:
        """Where the cluster's pages are: ``""`` for the default's at ``/``,
        else ``/clusters/NAME``."""
        prefix: str = getattr(request.state, "base", "")
        return prefix

    def error(request: Request, status: int, title: str, message: str) -> HTMLResponse:
        return page(request, "error.html", status, title=title, message=message)

    def set_session(request: Request, response: Response, sid: str) -> None:
        response.set_cookie(
            cookie_name(request),
            sid,
            path="/",
            httponly=True,
            samesite="lax",
            secure=request.url.scheme == "https",
        )

    async def read_form(request: Request) -> dict[str, str]:
        """The POSTed form, after the content type, origin and token checks."""
        kind = request.headers.get("content-type", "").split(";")[0].strip()
        if kind != "application/x-www-form-urlencoded":
            raise _Refused(415, "Forms only", "the console takes URL-encoded forms only")
        origin = request.headers.get("origin") or request.headers.get("referer")
        host = request.headers.get("host", "")
        if not origin or urllib.parse.urlsplit(origin).netloc != host:
            raise _Refused(403, "Refused", "a change must come from the console's own pages")
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_FORM_BYTES:
                raise _Refused(413, "Too large", f"a form may carry {MAX_FORM_BYTES:,} bytes")
        pairs = urllib.parse.parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True)
        request.state.form_pairs = pairs
        form = dict(pairs)
        visit: _Visit = request.state.visit
        if visit.new_sid or not sessions.token_ok(
            visit.sid, visit.user or "", form.get("token", "")
        ):
            raise _Refused(403, "Refused", "the form's token is missing or stale: reload the page")
        return form

    def form_of(request: Request) -> dict[str, str]:
        """The form ``guarded`` read and checked."""
        form: dict[str, str] = request.state.form
        return form

    def form_values(request: Request, name: str) -> list[str]:
        """Every value of a field given several times (checkboxes)."""
        return [v for k, v in request.state.form_pairs if k == name]

    def unknown_visitor(request: Request) -> Response:
        if access.password and request.method == "GET":
            here = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            target = "/login?" + urllib.parse.urlencode({"next": here})
            return RedirectResponse(target, status_code=303)
        if access.password:
            message = "log in first: this console asks for a password"
        else:
            message = (
                f"this console trusts the {access.header} header that the proxy in front of "
                "it sets; this request did not come through that proxy with it"
            )
        return error(request, 401, "Not logged in", message)

    def guarded(
        handler: Handler,
        *,
        form_page: bool = False,
        cluster: bool = True,
        public: bool = False,
        session_only: bool = False,
    ) -> Handler:
        """``handler`` behind the checks: who asks, read-only, the form's token
        and origin, the cluster's health, and every failure as a page. A POST
        changes the cluster unless ``session_only``.

        Args:
            form_page: the GET shows a form that changes the cluster (refused
                on a read-only console, as the POST is).
            cluster: the handler needs the cluster.
            public: served to people not known (the login page).
            session_only: a POST changes only the session (logging in and out).
        """

        async def run(request: Request) -> Response:
            visit = request.state.visit = visitor(request)
            name = request.path_params.get("cluster")
            if name in consoles or name is None:
                request.state.cluster = default if name is None else name
                request.state.console = consoles[request.state.cluster]
                request.state.base = "" if name is None else f"/clusters/{urllib.parse.quote(name)}"
            if visit.user is None and not public:  # not even which clusters there are
                response = unknown_visitor(request)
            elif name is not None and name not in consoles:
                response = error(request, 404, "Not found", f"no cluster named {name!r}")
            else:
                response = await answer(request, visit)
            if visit.new_sid:
                set_session(request, response, visit.sid)
            return response

        async def answer(request: Request, visit: _Visit) -> Response:
            try:
                changes = request.method == "POST" or form_page
                if access.read_only and changes and not session_only:
                    raise _Refused(403, "Read-only", access.why_read_only)
                if request.method == "POST":
                    request.state.form = await read_form(request)
                if cluster:
                    response: Response = await cons(request).while_reachable(
                        lambda: handler(request)
                    )
                    return response
                return await handler(request)
            except _Refused as exc:
                return error(request, exc.status, exc.title, exc.message)
            except ClusterDown as exc:
                return cluster_down(request, exc)
            except (InputError, ArgumentError) as exc:
                return error(request, 400, "Bad input", str(exc))
            except NotFound as exc:
                return error(request, 404, "Not found", str(exc))
            except KafkaError as exc:
                return error(request, 502, "The cluster refused", str(exc))
            except TrafkaError as exc:
                return error(request, 502, "Cluster unreachable", str(exc))
            except Exception:  # a bug of ours: logged whole, shown as one line
                log.exception("console page %s failed", request.url.path)
                return error(
                    request, 500, "Console error", "this page failed; the console's log says why"
                )

        return run

    def cluster_down(request: Request, exc: ClusterDown) -> Response:
        console = cons(request)
        h = console.health
        return page(
            request,
            "down.html",
            503,
            bootstrap=console.bootstrap,
            reason=exc.reason,
            down_for=exc.down_for,
            during=exc.during and request.method == "POST",
            check_timeout=h.check_timeout,
            interval=h.interval,
            reload=request.method == "GET",
        )

    # -- logging in ------------------------------------------------------------------------

    async def login(request: Request) -> Response:
        visit: _Visit = request.state.visit
        target = safe_next(request.query_params.get("next"))
        if not access.password:
            return RedirectResponse(target, status_code=303)
        if request.method == "GET":
            return page(request, "login.html", next=target, failed="")
        form = form_of(request)
        target = safe_next(form.get("next"))
        now = clock()
        wait = throttle.wait(now)
        if wait > 0:
            return page(
                request,
                "login.html",
                429,
                next=target,
                failed=f"too many wrong passwords: try again in {wait:.0f} s",
            )
        if not access.check_password(form.get("password", "")):
            throttle.failed(now)
            log.warning("console login refused: wrong password")
            return page(request, "login.html", 401, next=target, failed="wrong password")
        sessions.logout(visit.sid)
        response = RedirectResponse(target, status_code=303)
        # A fresh id: one known before the login (set by someone else) is useless.
        set_session(request, response, sessions.login(PASSWORD_USER, now))
        visit.new_sid = False
        return response

    async def logout(request: Request) -> Response:
        visit: _Visit = request.state.visit
        sessions.logout(visit.sid)
        response = RedirectResponse("/login", status_code=303)
        set_session(request, response, Sessions.new_id())
        visit.new_sid = False
        return response

    # -- pages -----------------------------------------------------------------------------
    def rates_context(console: Console, topic: str | None) -> dict[str, Any]:
        history = console.rates
        owners: list[tuple[str, throughput.SeriesKey]]
        if topic is None:
            charts = throughput.broker_charts(history)
            owners = [(f"broker {b}", ("broker", b, "messages_in")) for b in history.brokers()]
        else:
            charts = throughput.topic_charts(history, topic)
            owners = [(topic, ("topic", topic, "messages_in"))] if history.samples > 1 else []
        return {
            "charts": charts,
            "rates": throughput.rate_rows(history, owners),
            "interval": console.sample_interval,
            "samples": history.samples,
        }

    async def overview(request: Request) -> Response:
        console = cons(request)
        view = await console.overview()
        return page(request, "overview.html", view=view, **rates_context(console, None))

    async def topics(request: Request) -> Response:
        started = time.perf_counter()
        rows = await cons(request).topics()
        show_internal = request.query_params.get("internal") == "1"
        shown = [r for r in rows if show_internal or not r.internal]
        return page(
            request,
            "topics.html",
            rows=shown,
            hidden=len(rows) - len(shown),
            show_internal=show_internal,
            took=time.perf_counter() - started,
        )

    async def new_topic(request: Request) -> Response:
        if request.method == "GET":
            return page(request, "topic_new.html")
        form = form_of(request)
        t = model.parse_new_topic_form(form)
        await cons(request).admin.create_topics(
            [NewTopic(t.name, t.partitions, t.replication_factor, t.configs)]
        )
        return RedirectResponse(
            base(request) + f"/topics/{urllib.parse.quote(t.name)}", status_code=303
        )

    async def topic(request: Request) -> Response:
        started = time.perf_counter()
        console = cons(request)
        view = await console.topic(request.path_params["name"])
        return page(
            request,
            "topic.html",
            view=view,
            took=time.perf_counter() - started,
            **rates_context(console, view.name),
        )

    async def delete_topic(request: Request) -> Response:
        name = request.path_params["name"]
        form = form_of(request)
        if form.get("confirm", "").strip() != name:
            raise InputError(f"confirm: type the topic's name ({name}) to delete it")
        await cons(request).admin.delete_topics([name])
        return RedirectResponse(base(request) + "/topics", status_code=303)

    def to_topic(request: Request, name: str) -> Response:
        return RedirectResponse(
            base(request) + f"/topics/{urllib.parse.quote(name)}", status_code=303
        )

    async def topic_configs(request: Request) -> Response:
        name = request.path_params["name"]
        form = form_of(request)
        await cons(request).alter_configs(
            model.parse_config_form(name, form, form_values(request, "reset"))
        )
        return to_topic(request, name)

    async def topic_partitions(request: Request) -> Response:
        name = request.path_params["name"]
        await cons(request).add_partitions(name, form_of(request))
        return to_topic(request, name)

    async def purge_topic(request: Request) -> Response:
        name = request.path_params["name"]
        await cons(request).purge(model.parse_purge_form(name, form_of(request)))
        return to_topic(request, name)

    async def messages(request: Request) -> Response:
        name = request.path_params["name"]
        q = model.parse_browse_query(name, dict(request.query_params))
        found = await cons(request).browse(q)
        return page(request, "messages.html", topic=name, modes=model.DECODE_MODES, **found)

    async def search_page(request: Request) -> Response:
        name = request.path_params["name"]
        form = dict(request.query_params)
        found = None
        go_on = ""
        if form.get("q"):
            found = await cons(request).search(search.parse_search_query(name, form))
            go_on = urllib.parse.urlencode({**form, "before": found["before"]})
        else:
            await cons(request).partition_count(name)
        return page(
            request,
            "search.html",
            topic=name,
            form=form,
            found=found,
            go_on=go_on,
            targets=search.TARGETS,
            modes=search.MODES,
            seconds=SEARCH_SECONDS,
        )

    async def produce(request: Request) -> Response:
        name = request.path_params["name"]
        if request.method == "GET":
            await cons(request).partition_count(name)
            return page(request, "produce.html", topic=name, sent=None)
        form = form_of(request)
        message = model.parse_produce_form(name, form)
        sent = await cons(request).produce(message)
        return page(request, "produce.html", topic=name, sent=sent)

    async def groups(request: Request) -> Response:
        listings = await cons(request).admin.list_groups()
        return page(request, "groups.html", rows=model.group_rows(listings, cons(request).history))

    async def group(request: Request) -> Response:
        gid = request.path_params["group_id"]
        refresh = model.parse_refresh(request.query_params.get("refresh", ""))
        reset: model.ResetForm | None = None
        plan: list[model.ResetRow] = []
        if request.method == "POST":
            form = form_of(request)
            action = form.get("action", "")
            if action == "delete":
                if form.get("confirm", "").strip() != gid:
                    raise InputError(f"confirm: type the group's id ({gid}) to delete it")
                await cons(request).delete_group(gid)
                return RedirectResponse(base(request) + "/groups", status_code=303)
            if action != "reset":
                raise InputError(f"action must be reset or delete, got {action!r}")
            reset = model.parse_reset_form(gid, form)
            plan = await cons(request).reset_offsets(reset)
        view = await cons(request).group(gid)
        chart = model.lag_chart(cons(request).history.samples(gid))
        return page(
            request,
            "group.html",
            view=view,
            chart=chart,
            refresh=refresh,
            reset=reset,
            plan=plan,
            targets=model.RESET_TARGETS,
            inactive=view.state in model.INACTIVE_STATES and not view.members,
        )

    async def acls(request: Request) -> Response:
        if request.method == "POST":
            form = form_of(request)
            binding = model.parse_acl_form(form)
            outcome = (await cons(request).admin.create_acls([binding]))[binding]
            if outcome is not None:
                raise outcome
            return RedirectResponse(base(request) + "/acls", status_code=303)
        try:
            bindings = await cons(request).admin.describe_acls()
        except KafkaError as exc:
            if exc.code != ErrorCode.SECURITY_DISABLED:
                raise
            return page(request, "acls.html", rows=None, choices=_ACL_CHOICES)
        return page(request, "acls.html", rows=model.acl_rows(bindings), choices=_ACL_CHOICES)

    async def delete_acl(request: Request) -> Response:
        form = form_of(request)
        binding = model.parse_acl_form(form)
        f: AclBindingFilter = binding.as_filter()
        outcome = (await cons(request).admin.delete_acls([f]))[f]
        if isinstance(outcome, KafkaError):
            raise outcome
        return RedirectResponse(base(request) + "/acls", status_code=303)

    async def clusters_page(request: Request) -> Response:
        rows = [
            (name, c.bootstrap, c.health.state, c.health.reason if c.health.down else "")
            for name, c in consoles.items()
        ]
        return page(request, "clusters.html", rows=rows, default=default)

    async def healthz(request: Request) -> Response:
        return PlainTextResponse("ok\n")

    async def not_found(request: Request, exc: Exception) -> Response:
        return error(request, 404, "Not found", f"nothing at {request.url.path}")

    async def not_allowed(request: Request, exc: Exception) -> Response:
        return error(request, 405, "Method not allowed", f"{request.method} {request.url.path}")

    # A cluster's pages, served under /clusters/NAME/ and, for the default
    # cluster, at / too (the URLs of a console of one cluster keep working).
    pages = [
        Route("/", guarded(overview)),
        Route("/topics", guarded(topics)),
        Route("/topics/new", guarded(new_topic, form_page=True), methods=["GET", "POST"]),
        Route("/topics/{name}", guarded(topic)),
        Route("/topics/{name}/delete", guarded(delete_topic), methods=["POST"]),
        Route("/topics/{name}/configs", guarded(topic_configs), methods=["POST"]),
        Route("/topics/{name}/partitions", guarded(topic_partitions), methods=["POST"]),
        Route("/topics/{name}/purge", guarded(purge_topic), methods=["POST"]),
        Route("/topics/{name}/messages", guarded(messages)),
        Route("/topics/{name}/search", guarded(search_page)),
        Route("/topics/{name}/produce", guarded(produce, form_page=True), methods=["GET", "POST"]),
        Route("/groups", guarded(groups)),
        # One route for a group's page and its changes (a POST with an action):
        # a group id may hold a "/", so nothing may follow it in the path.
        Route("/groups/{group_id:path}", guarded(group), methods=["GET", "POST"]),
        Route("/acls", guarded(acls), methods=["GET", "POST"]),
        Route("/acls/delete", guarded(delete_acl), methods=["POST"]),
    ]
    routes = [
        Route(
            "/login",
            guarded(login, public=True, cluster=False, session_only=True),
            methods=["GET", "POST"],
        ),
        Route("/logout", guarded(logout, cluster=False, session_only=True), methods=["POST"]),
        Route("/healthz", healthz),
        Route("/clusters", guarded(clusters_page, cluster=False)),
        Mount("/clusters/{cluster}", routes=pages),
        *pages,
    ]
    return Starlette(
        routes=routes,
        middleware=[Middleware(_HostCheck, allowed=consoles[default].allowed_hosts)],
        exception_handlers={404: not_found, 405: not_allowed},
    )


def host_allowed(host_header: str, allowed: list[str]) -> bool:
    """Whether a ``Host`` header (``name``, ``name:port``, ``[v6]:port``) names
    one of ``allowed`` (``*``: any)."""
    if "*" in allowed:
        return True
    try:
        name = urllib.parse.urlsplit("//" + host_header).hostname
    except ValueError:
        return False
    return name is not None and name.lower() in {a.strip("[]").lower() for a in allowed}


class _HostCheck:
    """Answer 400 to a request whose ``Host`` the console does not answer to
    (Starlette's TrustedHostMiddleware cuts a ``[::1]:8080`` at the first colon)."""

    def __init__(self, app: Any, allowed: list[str]) -> None:
        self.app = app
        self.allowed = allowed

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] in ("http", "websocket"):
            host = dict(scope["headers"]).get(b"host", b"").decode("latin-1")
            if not host_allowed(host, self.allowed):
                response = PlainTextResponse("this console does not answer to that host\n", 400)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


class _Refused(Exception):
    def __init__(self, status: int, title: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.title = title
        self.message = message


_ACL_CHOICES = {
    "resource_types": [t.name.lower() for t in model.ACL_RESOURCE_TYPES],
    "pattern_types": [t.name.lower() for t in model.ACL_PATTERN_TYPES],
    "operations": [o.name.lower() for o in model.ACL_OPERATIONS],
    "permissions": [p.name.lower() for p in model.ACL_PERMISSIONS],
}
