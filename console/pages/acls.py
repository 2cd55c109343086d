"""The ACLs' page: the cluster's ACLs, and the forms that create and delete one.

Rules:

* A cluster whose authorizer is off answers SECURITY_DISABLED: the page says
  so instead of failing.
* A deletion sends the binding's own fields and deletes that binding exactly
  (its filter matches it and no other); a refusal of the cluster is its page.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from trafka.codec import ErrorCode, KafkaError
from trafka.sdk.acls import AclBindingFilter

from .. import model
from . import PageGroup

__all__ = ["AclPages"]

#: What the ACL form offers, as the form spells it.
ACL_CHOICES = {
    "resource_types": [t.name.lower() for t in model.ACL_RESOURCE_TYPES],
    "pattern_types": [t.name.lower() for t in model.ACL_PATTERN_TYPES],
    "operations": [o.name.lower() for o in model.ACL_OPERATIONS],
    "permissions": [p.name.lower() for p in model.ACL_PERMISSIONS],
}


class AclPages(PageGroup):
    """``/acls`` and ``/acls/delete`` of a cluster."""

    def routes(self) -> list[Route]:
        guarded = self.site.guarded
        return [
            Route("/acls", guarded(self.acls), methods=["GET", "POST"]),
            Route("/acls/delete", guarded(self.delete), methods=["POST"]),
        ]

    async def acls(self, request: Request) -> Response:
        admin = self.site.console(request).admin
        if request.method == "POST":
            binding = model.parse_acl_form(self.site.form_of(request))
            outcome = (await admin.create_acls([binding]))[binding]
            if outcome is not None:
                raise outcome
            return self.site.redirect(request, "/acls")
        rows = None
        try:
            rows = model.acl_rows(await admin.describe_acls())
        except KafkaError as exc:
            if exc.code != ErrorCode.SECURITY_DISABLED:
                raise
        return self.site.page(request, "acls.html", rows=rows, choices=ACL_CHOICES)

    async def delete(self, request: Request) -> Response:
        binding = model.parse_acl_form(self.site.form_of(request))
        f: AclBindingFilter = binding.as_filter()
        outcome = (await self.site.console(request).admin.delete_acls([f]))[f]
        if isinstance(outcome, KafkaError):
            raise outcome
        return self.site.redirect(request, "/acls")
