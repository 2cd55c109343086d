"""The console's HTTP driver: a Starlette app whose handlers ask the cluster
through :class:`~.cluster.Console` and render :mod:`.model`'s views with
Jinja2 templates.

Rules:

* Every page is plain HTML, usable without JavaScript; the little script there
  is only filters a table and asks before a deletion.
* The pages are grouped in :mod:`.pages` (one module per group); every
  request passes :class:`~.site.Site`'s checks (who asks, read-only, the
  form's token and origin, the cluster's health) before its handler runs, and
  every failure is a page, never a traceback.
* The ``Host`` header must be one the console answers to (its listen host,
  ``localhost`` and loopback addresses, or any when it listens on all
  interfaces), which keeps a DNS-rebinding page from reading a token: a
  request for another is refused (400) before anything else runs.
* A cluster's pages are served under ``/clusters/NAME/`` and, for the first
  (default) cluster, at ``/`` too, so that the URLs of a console of one
  cluster keep working.
"""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Mount, Route

from .access import AccessPolicy, LoginThrottle, Sessions
from .cluster import Console
from .pages.acls import AclPages
from .pages.groups import GroupPages
from .pages.messages import MessagePages
from .pages.schemas import SchemaPages
from .pages.session import SessionPages
from .pages.topics import TopicPages

# MAX_FORM_BYTES and PASSWORD_USER were defined here before site.py held them.
from .site import MAX_FORM_BYTES as MAX_FORM_BYTES
from .site import PASSWORD_USER as PASSWORD_USER
from .site import Site

__all__ = ["host_allowed", "make_app"]


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
    site = Site(
        dict(clusters) if isinstance(clusters, Mapping) else {"default": clusters},
        access,
        sessions if sessions is not None else Sessions(),
        throttle if throttle is not None else LoginThrottle(),
        clock,
    )

    async def clusters_page(request: Request) -> Response:
        rows = [
            (name, c.bootstrap, c.health.state, c.health.reason if c.health.down else "")
            for name, c in site.consoles.items()
        ]
        return site.page(request, "clusters.html", rows=rows, default=site.default)

    async def healthz(request: Request) -> Response:
        return PlainTextResponse("ok\n")

    async def not_found(request: Request, exc: Exception) -> Response:
        return site.error(request, 404, "Not found", f"nothing at {request.url.path}")

    async def not_allowed(request: Request, exc: Exception) -> Response:
        return site.error(
            request, 405, "Method not allowed", f"{request.method} {request.url.path}"
        )

    pages = [
        *TopicPages(site).routes(),
        *MessagePages(site).routes(),
        *GroupPages(site).routes(),
        *AclPages(site).routes(),
        *SchemaPages(site).routes(),
    ]
    routes = [
        *SessionPages(site).routes(),
        Route("/healthz", healthz),
        Route("/clusters", site.guarded(clusters_page, cluster=False)),
        Mount("/clusters/{cluster}", routes=pages),
        *pages,
    ]
    return Starlette(
        routes=routes,
        middleware=[Middleware(_HostCheck, allowed=site.consoles[site.default].allowed_hosts)],
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
