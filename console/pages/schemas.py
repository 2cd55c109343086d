"""The Schema Registry's pages: ``/schemas`` (every subject with its versions
and compatibility level, and the global level) and ``/schemas/SUBJECT`` (its
versions and a diff between two of them, ``?a=N&b=M``).

Rules:

* A cluster whose console knows no registry says so (404), as the page of an
  unknown subject does (the registry's message); a registry out of reach is
  a 502 naming it.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from . import PageGroup

__all__ = ["SchemaPages"]


def _version(text: str | None) -> int | None:
    return int(text) if text and text.isdigit() else None


class SchemaPages(PageGroup):
    """``/schemas`` and ``/schemas/SUBJECT`` of a cluster."""

    def routes(self) -> list[Route]:
        guarded = self.site.guarded
        return [
            Route("/schemas", guarded(self.subjects)),
            Route("/schemas/{subject}", guarded(self.subject)),
        ]

    async def subjects(self, request: Request) -> Response:
        return await self._answer(request, None)

    async def subject(self, request: Request) -> Response:
        return await self._answer(request, request.path_params["subject"])

    async def _answer(self, request: Request, subject: str | None) -> Response:
        from trafka.sdk.schemas import SchemaRegistryError

        schemas = self.site.console(request).schemas
        if schemas is None:
            return self.site.error(
                request,
                404,
                "No Schema Registry",
                "This console knows no Schema Registry for this cluster: start it with "
                "--schema-registry URL.",
            )
        try:
            if subject is None:
                found = await schemas.subjects()
                return self.site.page(request, "schemas.html", **found)
            q = request.query_params
            found = await schemas.subject(subject, _version(q.get("a")), _version(q.get("b")))
        except SchemaRegistryError as exc:
            status = 502 if exc.status is None or exc.status >= 500 else exc.status
            return self.site.error(request, status, "Schema Registry", exc.message)
        return self.site.page(request, "subject.html", **found)
