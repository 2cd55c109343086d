"""Where every task of the running event loop (trio or asyncio) is waiting: for a
test that finds a client hung, so that its failure says where."""

from __future__ import annotations

import asyncio
import sysconfig
from collections.abc import Iterator
from types import FrameType
from typing import Any

import anyio
import sniffio


def _frames(coro: Any) -> Iterator[FrameType]:
    """The frames of a coroutine and of what it awaits, outermost first."""
    while coro is not None:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if frame is not None:
            yield frame
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)


def _trio_tasks() -> Iterator[tuple[str, list[FrameType]]]:
    import trio

    todo = [trio.lowlevel.current_root_task()]
    while todo:
        task = todo.pop()
        if task is None:
            continue
        yield task.name, [frame for frame, _ in task.iter_await_frames()]
        for nursery in task.child_nurseries:
            todo.extend(nursery.child_tasks)


def _asyncio_tasks() -> Iterator[tuple[str, list[FrameType]]]:
    for task in asyncio.all_tasks():
        yield task.get_name(), list(_frames(task.get_coro()))


_LIBRARIES = tuple(
    {sysconfig.get_path("stdlib"), sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}
)


def dump_tasks(depth: int = 6) -> str:
    """Each task's name and its innermost ``depth`` frames outside the standard
    library and installed packages, one task per paragraph."""
    lister = _trio_tasks if sniffio.current_async_library() == "trio" else _asyncio_tasks
    out = []
    for name, every in lister():
        frames = [f for f in every if not f.f_code.co_filename.startswith(_LIBRARIES)]
        lines = [
            f"    {f.f_code.co_filename.rsplit('/', 2)[-1]}:{f.f_lineno} {f.f_code.co_name}"
            for f in frames[-depth:]
        ]
        out.append("\n".join([f"  task {name}", *lines]))
    return "\n".join(out)


async def dump_after(seconds: float, into: list[str]) -> None:
    """Sleep ``seconds``, then append :func:`dump_tasks` to ``into``."""
    await anyio.sleep(seconds)
    into.append(dump_tasks())
