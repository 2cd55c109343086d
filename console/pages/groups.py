"""The groups' pages: the list with each group's last lag, and one group with
its lag chart, the reset of its offsets and its deletion.

Rules:

* One route serves a group's page and its changes (a POST whose ``action`` is
  ``reset`` or ``delete``): a group id may hold a ``/``, so nothing may
  follow it in the path.
* A deletion needs the group's id typed again in ``confirm``; a reset without
  ``execute`` only shows its plan (kafka-consumer-groups' dry run).
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .. import model
from ..model import InputError
from . import PageGroup

__all__ = ["GroupPages"]


class GroupPages(PageGroup):
    """``/groups`` and ``/groups/ID`` of a cluster."""

    def routes(self) -> list[Route]:
        guarded = self.site.guarded
        return [
            Route("/groups", guarded(self.groups)),
            Route("/groups/{group_id:path}", guarded(self.group), methods=["GET", "POST"]),
        ]

    async def groups(self, request: Request) -> Response:
        console = self.site.console(request)
        listings = await console.admin.list_groups()
        members = await console.groups.member_counts(listings)
        rows = model.group_rows(listings, console.history, members)
        return self.site.page(request, "groups.html", rows=rows)

    async def group(self, request: Request) -> Response:
        gid = request.path_params["group_id"]
        console = self.site.console(request)
        refresh = model.parse_refresh(request.query_params.get("refresh", ""))
        reset: model.ResetForm | None = None
        plan: list[model.ResetRow] = []
        if request.method == "POST":
            form = self.site.form_of(request)
            action = form.get("action", "")
            if action == "delete":
                if form.get("confirm", "").strip() != gid:
                    raise InputError(f"confirm: type the group's id ({gid}) to delete it")
                await console.delete_group(gid)
                return self.site.redirect(request, "/groups")
            if action != "reset":
                raise InputError(f"action must be reset or delete, got {action!r}")
            reset = model.parse_reset_form(gid, form)
            plan = await console.reset_offsets(reset)
        view = await console.group(gid)
        return self.site.page(
            request,
            "group.html",
            view=view,
            chart=model.lag_chart(console.history.samples(gid)),
            refresh=refresh,
            reset=reset,
            plan=plan,
            targets=model.RESET_TARGETS,
            inactive=view.state in model.INACTIVE_STATES and not view.members,
        )
