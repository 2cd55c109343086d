"""The console's HTTP driver: a Starlette app whose handlers ask the cluster
through :class:`~.cluster.Console` and render :mod:`.model`'s views with
Jinja2 templates.

Rules:

* Every page is plain HTML, usable without JavaScript; the little script there
  is only filters a table and asks before a deletion.
* A request that changes the cluster is a same-origin ``POST`` of a form that
  carries the console's token: the token must match, and an ``Origin`` (or,
  without one, a ``Referer``) header must name the console's own host. The
  ``Host`` header must be one the console answers to (its listen host,
  ``localhost`` and loopback addresses, or any when it listens on all
  interfaces), which keeps a DNS-rebinding page from reading the token.
* Bad input is a 400 page naming the field; an unknown topic or group a 404;
  a refusal by the cluster a 502 page with the cluster's error. Never a
  traceback.
"""

from __future__ import annotations

import hmac
import logging
import time
import urllib.parse
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import jinja2
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

from trafka.codec import ErrorCode, KafkaError, TrafkaError
from trafka.sdk import ArgumentError, NewTopic
from trafka.sdk.acls import AclBindingFilter

from . import model
from .cluster import Console, NotFound
from .model import InputError

__all__ = ["host_allowed", "make_app"]

log = logging.getLogger("trafka.console")

#: A form body larger than this is refused (a produced message's value included).
MAX_FORM_BYTES = 1 << 20
_TEMPLATES = Path(__file__).parent / "templates"


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


def make_app(console: Console) -> Starlette:
    """The console's ASGI app."""
    env = _environment()

    def page(
        request: Request, template: str, status_code: int = 200, **context: Any
    ) -> HTMLResponse:
        html = env.get_template(template).render(
            token=console.token, path=request.url.path, **context
        )
        return HTMLResponse(html, status_code=status_code)

    def error(request: Request, status: int, title: str, message: str) -> HTMLResponse:
        return page(request, "error.html", status, title=title, message=message)

    async def form_of(request: Request) -> dict[str, str]:
        """The POSTed form, after the origin and token checks."""
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
        form = dict(urllib.parse.parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))
        if not hmac.compare_digest(form.get("token", ""), console.token):
            raise _Refused(403, "Refused", "the form's token is missing or stale: reload the page")
        return form

    def guarded(
        handler: Callable[[Request], Awaitable[Response]],
    ) -> Callable[[Request], Awaitable[Response]]:
        async def run(request: Request) -> Response:
            try:
                return await handler(request)
            except _Refused as exc:
                return error(request, exc.status, exc.title, exc.message)
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

    async def overview(request: Request) -> Response:
        return page(request, "overview.html", view=await console.overview())

    async def topics(request: Request) -> Response:
        started = time.perf_counter()
        rows = await console.topics()
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
        form = await form_of(request)
        t = model.parse_new_topic_form(form)
        await console.admin.create_topics(
            [NewTopic(t.name, t.partitions, t.replication_factor, t.configs)]
        )
        return RedirectResponse(f"/topics/{urllib.parse.quote(t.name)}", status_code=303)

    async def topic(request: Request) -> Response:
        started = time.perf_counter()
        view = await console.topic(request.path_params["name"])
        return page(request, "topic.html", view=view, took=time.perf_counter() - started)

    async def delete_topic(request: Request) -> Response:
        name = request.path_params["name"]
        form = await form_of(request)
        if form.get("confirm", "").strip() != name:
            raise InputError(f"confirm: type the topic's name ({name}) to delete it")
        await console.admin.delete_topics([name])
        return RedirectResponse("/topics", status_code=303)

    async def messages(request: Request) -> Response:
        name = request.path_params["name"]
        q = model.parse_browse_query(name, dict(request.query_params))
        found = await console.browse(q)
        return page(request, "messages.html", topic=name, modes=model.DECODE_MODES, **found)

    async def produce(request: Request) -> Response:
        name = request.path_params["name"]
        if request.method == "GET":
            await console.partition_count(name)
            return page(request, "produce.html", topic=name, sent=None)
        form = await form_of(request)
        message = model.parse_produce_form(name, form)
        sent = await console.produce(message)
        return page(request, "produce.html", topic=name, sent=sent)

    async def groups(request: Request) -> Response:
        listings = await console.admin.list_groups()
        return page(request, "groups.html", rows=model.group_rows(listings, console.history))

    async def group(request: Request) -> Response:
        gid = request.path_params["group_id"]
        refresh = model.parse_refresh(request.query_params.get("refresh", ""))
        view = await console.group(gid)
        chart = model.lag_chart(console.history.samples(gid))
        return page(request, "group.html", view=view, chart=chart, refresh=refresh)

    async def acls(request: Request) -> Response:
        if request.method == "POST":
            form = await form_of(request)
            binding = model.parse_acl_form(form)
            outcome = (await console.admin.create_acls([binding]))[binding]
            if outcome is not None:
                raise outcome
            return RedirectResponse("/acls", status_code=303)
        try:
            bindings = await console.admin.describe_acls()
        except KafkaError as exc:
            if exc.code != ErrorCode.SECURITY_DISABLED:
                raise
            return page(request, "acls.html", rows=None, choices=_ACL_CHOICES)
        return page(request, "acls.html", rows=model.acl_rows(bindings), choices=_ACL_CHOICES)

    async def delete_acl(request: Request) -> Response:
        form = await form_of(request)
        binding = model.parse_acl_form(form)
        f: AclBindingFilter = binding.as_filter()
        outcome = (await console.admin.delete_acls([f]))[f]
        if isinstance(outcome, KafkaError):
            raise outcome
        return RedirectResponse("/acls", status_code=303)

    async def healthz(request: Request) -> Response:
        return PlainTextResponse("ok\n")

    async def not_found(request: Request, exc: Exception) -> Response:
        return error(request, 404, "Not found", f"nothing at {request.url.path}")

    async def not_allowed(request: Request, exc: Exception) -> Response:
        return error(request, 405, "Method not allowed", f"{request.method} {request.url.path}")

    routes = [
        Route("/", guarded(overview)),
        Route("/topics", guarded(topics)),
        Route("/topics/new", guarded(new_topic), methods=["GET", "POST"]),
        Route("/topics/{name}", guarded(topic)),
        Route("/topics/{name}/delete", guarded(delete_topic), methods=["POST"]),
        Route("/topics/{name}/messages", guarded(messages)),
        Route("/topics/{name}/produce", guarded(produce), methods=["GET", "POST"]),
        Route("/groups", guarded(groups)),
        Route("/groups/{group_id:path}", guarded(group)),
        Route("/acls", guarded(acls), methods=["GET", "POST"]),
        Route("/acls/delete", guarded(delete_acl), methods=["POST"]),
        Route("/healthz", healthz),
    ]
    return Starlette(
        routes=routes,
        middleware=[Middleware(_HostCheck, allowed=console.allowed_hosts)],
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
