"""Services that run beside a broker, found among the installed plug-ins.

brokerlite sits below the parts that use it: it does not import the web console
(``--console-listen``), it asks for a companion by name. A companion registers
itself under the entry-point group :data:`GROUP` (trafka's own in
pyproject.toml: ``console = "trafka.console.companion:console"``), so another
package can add one the same way.

A companion is an object with:

* ``missing() -> str | None``: why it cannot run here (an extra that is not
  installed), said before the broker starts;
* ``async serve(bootstrap_servers, listen, *, task_status, **services)``: serve
  until cancelled, as a client of the broker at ``bootstrap_servers``, on
  ``listen`` (``host:port``); ``task_status.started`` gets the bound ``(host,
  port)``. ``services`` name what else the broker serves, when it does:
  ``schema_registry`` (the URL of its Schema Registry).
"""

from __future__ import annotations

from importlib.metadata import entry_points
from typing import Any, Protocol

from .errors import BrokerError

__all__ = ["GROUP", "Companion", "find"]

GROUP = "trafka.brokerlite.companions"


class Companion(Protocol):
    def missing(self) -> str | None: ...

    async def serve(
        self, bootstrap_servers: str, listen: str, *, task_status: Any = ..., **services: Any
    ) -> None: ...


def find(name: str) -> Companion:
    """The companion registered as ``name``.

    Raises:
        BrokerError: none is installed under that name, or it cannot run here.
    """
    found = entry_points(group=GROUP, name=name)
    if not found:
        raise BrokerError(f"no {name} is installed: pip install 'trafka[{name}]'")
    companion: Companion = next(iter(found)).load()
    reason = companion.missing()
    if reason is not None:
        raise BrokerError(reason)
    return companion
