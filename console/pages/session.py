"""Logging in and out of a console that asks for a password.

Rules:

* A right password starts a new session (a fresh id: one known before the
  login, perhaps set by someone else, is useless); a wrong one is logged and
  counts towards :class:`~..access.LoginThrottle`'s brake, which refuses
  every attempt (429) while it holds.
* Where a login goes next is :func:`~..access.safe_next`'s choice: a path of
  this console, never another site.
"""

from __future__ import annotations

import logging

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from ..access import Sessions, safe_next
from ..site import PASSWORD_USER, Visit
from . import PageGroup

__all__ = ["SessionPages"]

log = logging.getLogger("trafka.console")


class SessionPages(PageGroup):
    """``/login`` and ``/logout``, served outside any cluster's pages."""

    def routes(self) -> list[Route]:
        guarded = self.site.guarded
        return [
            Route(
                "/login",
                guarded(self.login, public=True, cluster=False, session_only=True),
                methods=["GET", "POST"],
            ),
            Route(
                "/logout", guarded(self.logout, cluster=False, session_only=True), methods=["POST"]
            ),
        ]

    async def login(self, request: Request) -> Response:
        site = self.site
        visit: Visit = request.state.visit
        target = safe_next(request.query_params.get("next"))
        if not site.access.password:
            return RedirectResponse(target, status_code=303)
        if request.method == "GET":
            return site.page(request, "login.html", next=target, failed="")
        form = site.form_of(request)
        target = safe_next(form.get("next"))
        now = site.clock()
        wait = site.throttle.wait(now)
        if wait > 0:
            return site.page(
                request,
                "login.html",
                429,
                next=target,
                failed=f"too many wrong passwords: try again in {wait:.0f} s",
            )
        if not site.access.check_password(form.get("password", "")):
            site.throttle.failed(now)
            log.warning("console login refused: wrong password")
            return site.page(request, "login.html", 401, next=target, failed="wrong password")
        site.sessions.logout(visit.sid)
        response = RedirectResponse(target, status_code=303)
        site.set_session(request, response, site.sessions.login(PASSWORD_USER, now))
        visit.new_sid = False
        return response

    async def logout(self, request: Request) -> Response:
        visit: Visit = request.state.visit
        self.site.sessions.logout(visit.sid)
        response = RedirectResponse("/login", status_code=303)
        self.site.set_session(request, response, Sessions.new_id())
        visit.new_sid = False
        return response
