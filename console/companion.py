"""The console as brokerlite's companion (``trafka broker --console-listen``).

Registered in pyproject.toml under :data:`trafka.brokerlite.companions.GROUP`;
the broker finds it there and never imports the console. The broker passes only
its address and the listen address, so the console's protection (a password,
read-only, a proxy's header) comes from the environment
(:func:`~.server.settings_from_environment`): ``TRAFKA_CONSOLE_PASSWORD`` and
the others, read when the console starts.
"""

from __future__ import annotations

from typing import Any

import trio

from .server import (
    ConsoleSettings,
    missing_dependencies,
    serve_console,
    settings_from_environment,
)

__all__ = ["console"]


class _Console:
    def missing(self) -> str | None:
        return missing_dependencies()

    async def serve(
        self,
        bootstrap_servers: str,
        listen: str,
        *,
        schema_registry: str | None = None,
        task_status: trio.TaskStatus[tuple[str, int]] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        settings = ConsoleSettings(
            {"bootstrap.servers": bootstrap_servers},
            listen,
            **settings_from_environment(),
            schema_registry=schema_registry,
        )
        await serve_console(settings, task_status=task_status)


console: Any = _Console()
