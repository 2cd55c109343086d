"""The console's request plumbing: who asks, the checks every request passes
before its page's handler runs, and the HTML page it answers with.

Rules:

* Who may look and who may change is :mod:`.access`'s policy, applied here to
  every request before its handler runs (:meth:`Site.guarded`): a person not
  known is sent to the login page (a GET) or refused (401); a change on a
  read-only console is refused (403) before its form is read, and its page
  offers none.
* A request that changes the cluster is a same-origin ``POST`` of a form that
  carries its session's token: the token must match, and an ``Origin`` (or,
  without one, a ``Referer``) header must name the console's own host; the
  form is URL-encoded and at most :data:`MAX_FORM_BYTES`.
* A page that needs the cluster runs while the cluster answers
  (:meth:`~.cluster.Console.while_reachable`): when it does not, the page says
  so within :meth:`~.health.ClusterHealth.bound` (status 503, reloading
  itself) instead of waiting out the admin client's timeout.
* Bad input is a 400 page naming the field; an unknown topic or group a 404;
  a refusal by the cluster a 502 page with the cluster's error. Never a
  traceback: a bug of ours is logged whole and shown as a 500 page.
"""

from __future__ import annotations

import dataclasses
import logging
import urllib.parse
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import jinja2
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from trafka.codec import KafkaError, TrafkaError
from trafka.sdk import ArgumentError

from . import model
from .access import AccessPolicy, LoginThrottle, Sessions
from .cluster import ClusterDown, Console, NotFound
from .model import InputError

__all__ = ["MAX_FORM_BYTES", "PASSWORD_USER", "Handler", "Refused", "Site", "Visit"]

log = logging.getLogger("trafka.console")

#: A form body larger than this is refused (a produced message's value included).
MAX_FORM_BYTES = 1 << 20
#: A session cookie longer than this is not ours (and is replaced).
_MAX_SID = 64
_TEMPLATES = Path(__file__).parent / "templates"
#: Whom a password login is shown as.
PASSWORD_USER = "password login"

Handler = Callable[[Request], Awaitable[Response]]


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
class Visit:
    """Who asks (None: nobody known), their session id and its form token."""

    user: str | None
    sid: str
    token: str
    new_sid: bool


class Refused(Exception):
    """A request refused before its handler ran, shown as an error page."""

    def __init__(self, status: int, title: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.title = title
        self.message = message


class Site:
    """What every page's handler shares: the clusters, the access policy, the
    sessions, and the templates.

    Args:
        consoles: each cluster's side by its name; the first is the default.
        access: who may look and change.
        sessions, throttle: the login sessions and the guessing brake.
        clock: seconds of a monotonic clock, for sessions and the brake.
    """

    def __init__(
        self,
        consoles: Mapping[str, Console],
        access: AccessPolicy,
        sessions: Sessions,
        throttle: LoginThrottle,
        clock: Callable[[], float],
    ) -> None:
        if not consoles:
            raise ValueError("the console needs at least one cluster")
        self.consoles = dict(consoles)
        self.default = next(iter(self.consoles))
        self.access = access
        self.sessions = sessions
        self.throttle = throttle
        self.clock = clock
        self.env = _environment()

    # -- who asks --------------------------------------------------------------------------

    @staticmethod
    def cookie_name(request: Request) -> str:
        # Browsers share cookies between the ports of a host: one name per port
        # keeps two consoles on one host from taking each other's sessions.
        server = request.scope.get("server") or ("", 0)
        return f"trafka_console_{server[1]}"

    def visitor(self, request: Request) -> Visit:
        """Who ``request`` comes from, by the proxy's header, the session or
        nobody asked (an open console)."""
        access = self.access
        sid = request.cookies.get(self.cookie_name(request)) or ""
        new_sid = not sid or len(sid) > _MAX_SID
        if new_sid:
            sid = Sessions.new_id()
        peer = request.client.host if request.client else None
        user = None
        if access.header is not None:
            user = access.header_user(peer, request.headers.get(access.header))
        if user is None and access.password:
            user = self.sessions.user(None if new_sid else sid, self.clock())
        if access.mode == "open":
            user = "anonymous"
        return Visit(user, sid, self.sessions.token(sid, user or ""), new_sid)

    def set_session(self, request: Request, response: Response, sid: str) -> None:
        response.set_cookie(
            self.cookie_name(request),
            sid,
            path="/",
            httponly=True,
            samesite="lax",
            secure=request.url.scheme == "https",
        )

    # -- what a handler uses ---------------------------------------------------------------

    def page(
        self, request: Request, template: str, status_code: int = 200, **context: Any
    ) -> HTMLResponse:
        """``template`` rendered with ``context`` and what every page shows."""
        visit: Visit | None = getattr(request.state, "visit", None)
        if visit is None:  # a page of Starlette's own (404, 405)
            visit = request.state.visit = self.visitor(request)
        prefix = self.base(request)
        here = request.url.path
        shown = getattr(request.state, "console", self.consoles.get(self.default))
        html = self.env.get_template(template).render(
            base=prefix,
            cluster=getattr(request.state, "cluster", self.default),
            clusters=list(self.consoles),
            token=visit.token,
            user=visit.user,
            can_logout=self.access.password and visit.user == PASSWORD_USER,
            read_only=self.access.read_only,
            why_read_only=self.access.why_read_only,
            path=here[len(prefix) :] if prefix and here.startswith(prefix) else here,
            has_schemas=getattr(shown, "schemas", None) is not None,
            **context,
        )
        return HTMLResponse(html, status_code=status_code)

    def error(self, request: Request, status: int, title: str, message: str) -> HTMLResponse:
        return self.page(request, "error.html", status, title=title, message=message)

    def console(self, request: Request) -> Console:
        """The cluster a page is of (:meth:`guarded` found it by the path)."""
        console: Console = getattr(request.state, "console", self.consoles[self.default])
        return console

    @staticmethod
    def base(request: Request) -> str:
        """Where the cluster's pages are: ``""`` for the default's at ``/``,
        else ``/clusters/NAME``."""
        prefix: str = getattr(request.state, "base", "")
        return prefix

    def redirect(self, request: Request, path: str) -> Response:
        """To the cluster's page at ``path`` (a 303: the browser GETs it)."""
        return RedirectResponse(self.base(request) + path, status_code=303)

    @staticmethod
    def form_of(request: Request) -> dict[str, str]:
        """The form :meth:`guarded` read and checked."""
        form: dict[str, str] = request.state.form
        return form

    @staticmethod
    def form_values(request: Request, name: str) -> list[str]:
        """Every value of a field given several times (checkboxes)."""
        return [v for k, v in request.state.form_pairs if k == name]

    # -- the checks ------------------------------------------------------------------------

    async def read_form(self, request: Request) -> dict[str, str]:
        """The POSTed form, after the content type, origin and token checks."""
        kind = request.headers.get("content-type", "").split(";")[0].strip()
        if kind != "application/x-www-form-urlencoded":
            raise Refused(415, "Forms only", "the console takes URL-encoded forms only")
        origin = request.headers.get("origin") or request.headers.get("referer")
        host = request.headers.get("host", "")
        if not origin or urllib.parse.urlsplit(origin).netloc != host:
            raise Refused(403, "Refused", "a change must come from the console's own pages")
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_FORM_BYTES:
                raise Refused(413, "Too large", f"a form may carry {MAX_FORM_BYTES:,} bytes")
        pairs = urllib.parse.parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True)
        request.state.form_pairs = pairs
        form = dict(pairs)
        visit: Visit = request.state.visit
        if visit.new_sid or not self.sessions.token_ok(
            visit.sid, visit.user or "", form.get("token", "")
        ):
            raise Refused(403, "Refused", "the form's token is missing or stale: reload the page")
        return form

    def unknown_visitor(self, request: Request) -> Response:
        access = self.access
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
        return self.error(request, 401, "Not logged in", message)

    def guarded(
        self,
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
            visit = request.state.visit = self.visitor(request)
            name = request.path_params.get("cluster")
            if name in self.consoles or name is None:
                request.state.cluster = self.default if name is None else name
                request.state.console = self.consoles[request.state.cluster]
                request.state.base = "" if name is None else f"/clusters/{urllib.parse.quote(name)}"
            if visit.user is None and not public:  # not even which clusters there are
                response = self.unknown_visitor(request)
            elif name is not None and name not in self.consoles:
                response = self.error(request, 404, "Not found", f"no cluster named {name!r}")
            else:
                changes = request.method == "POST" or form_page
                response = await self._answer(
                    request, handler, refused=changes and not session_only, cluster=cluster
                )
            if visit.new_sid:
                self.set_session(request, response, visit.sid)
            return response

        return run

    async def _answer(
        self, request: Request, handler: Handler, *, refused: bool, cluster: bool
    ) -> Response:
        """``handler``'s answer, or the page of what stopped it (``refused``: it
        changes the cluster, which a read-only console does not)."""
        try:
            if self.access.read_only and refused:
                raise Refused(403, "Read-only", self.access.why_read_only)
            if request.method == "POST":
                request.state.form = await self.read_form(request)
            if cluster:
                response: Response = await self.console(request).while_reachable(
                    lambda: handler(request)
                )
                return response
            return await handler(request)
        except Refused as exc:
            return self.error(request, exc.status, exc.title, exc.message)
        except ClusterDown as exc:
            return self.cluster_down(request, exc)
        except (InputError, ArgumentError) as exc:
            return self.error(request, 400, "Bad input", str(exc))
        except NotFound as exc:
            return self.error(request, 404, "Not found", str(exc))
        except KafkaError as exc:
            return self.error(request, 502, "The cluster refused", str(exc))
        except TrafkaError as exc:
            return self.error(request, 502, "Cluster unreachable", str(exc))
        except Exception:  # a bug of ours: logged whole, shown as one line
            log.exception("console page %s failed", request.url.path)
            return self.error(
                request, 500, "Console error", "this page failed; the console's log says why"
            )

    def cluster_down(self, request: Request, exc: ClusterDown) -> Response:
        console = self.console(request)
        h = console.health
        return self.page(
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
