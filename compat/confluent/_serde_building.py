"""The serdes of a serializing client's configuration, as confluent-kafka takes
them: ``key.serializer`` (a ready-made serde, the application's) or
``key.serializer.builder`` (a builder whose ``build(conf, is_key)`` returns
``(serde, the configuration left)``; the serde is then the client's, closed
with it), the same for values and for deserializers.

Rules (confluent-kafka 2.16's, where the builders are experimental):

* a property and its ``.builder`` both set is a ``ValueError``;
* each builder sees the whole client configuration; the client gets the
  settings every builder left in place (one a builder took is the serde's,
  not the client's);
* a builder that fails closes the serdes built before it; a serde is closed
  by ``aclose()`` when it has one (asyncio serdes), else ``close()``.
"""

from __future__ import annotations

import inspect
import logging
from typing import Any, NamedTuple

__all__ = ["Spec", "abuild", "aclose_all", "build", "close_all", "maybe_await", "pop_specs"]

log = logging.getLogger("trafka.compat.confluent")


class Spec(NamedTuple):
    prop: str
    is_key: bool
    serde: Any
    builder: Any


def pop_specs(
    conf: dict[str, Any], key_prop: str, value_prop: str
) -> tuple[list[Spec], dict[str, Any]]:
    """The key's and the value's serde or builder, and the configuration without them."""
    conf = dict(conf)
    specs = []
    for prop, is_key in ((key_prop, True), (value_prop, False)):
        serde, builder = conf.pop(prop, None), conf.pop(f"{prop}.builder", None)
        if serde is not None and builder is not None:
            raise ValueError(
                f"Cannot configure both {prop} and {prop}.builder; use one or the other"
            )
        specs.append(Spec(prop, is_key, serde, builder))
    return specs, conf


def _checked(prop: str, result: Any) -> tuple[Any, dict[str, Any]]:
    try:
        serde, left = result
    except (TypeError, ValueError):
        raise ValueError(
            f"{prop}.builder must return a (serde, configuration) tuple from build(), got {result!r}"
        ) from None
    if not isinstance(left, dict):
        raise ValueError(
            f"{prop}.builder returned {left!r} as the leftover configuration from build(), "
            "expected a dict"
        )
    return serde, left


def _left(conf: dict[str, Any], lefts: list[dict[str, Any]]) -> dict[str, Any]:
    if not lefts:
        return conf
    return {k: v for k, v in lefts[-1].items() if all(k in left for left in lefts[:-1])}


def build(specs: list[Spec], conf: dict[str, Any]) -> tuple[list[Any], list[Any], dict[str, Any]]:
    """The serdes (key, value), those built here (the client's to close), and
    the configuration left for the client."""
    serdes, owned, lefts = [], [], []
    try:
        for spec in specs:
            if spec.builder is None:
                serdes.append(spec.serde)
                continue
            serde, left = _checked(spec.prop, spec.builder.build(dict(conf), spec.is_key))
            serdes.append(serde)
            owned.append(serde)
            lefts.append(left)
    except BaseException:
        close_all(owned)
        raise
    return serdes, owned, _left(conf, lefts)


async def maybe_await(result: Any) -> Any:
    return await result if inspect.isawaitable(result) else result


async def abuild(
    specs: list[Spec], conf: dict[str, Any]
) -> tuple[list[Any], list[Any], dict[str, Any]]:
    """:func:`build` for asyncio clients: a builder's ``build()`` may be a coroutine."""
    serdes, owned, lefts = [], [], []
    try:
        for spec in specs:
            if spec.builder is None:
                serdes.append(spec.serde)
                continue
            result = await maybe_await(spec.builder.build(dict(conf), spec.is_key))
            serde, left = _checked(spec.prop, result)
            serdes.append(serde)
            owned.append(serde)
            lefts.append(left)
    except BaseException:
        await aclose_all(owned)
        raise
    return serdes, owned, _left(conf, lefts)


def close_all(serdes: list[Any]) -> None:
    """Close each serde; the first failure is raised once all were tried."""
    first: BaseException | None = None
    for serde in serdes:
        close = getattr(serde, "close", None)
        if not callable(close):
            continue
        try:
            close()
        except Exception as exc:
            if first is None:
                first = exc
            else:
                log.warning("closing serde %r failed", serde, exc_info=True)
    if first is not None:
        raise first


async def aclose_all(serdes: list[Any]) -> None:
    """:func:`close_all` for asyncio serdes (``aclose()`` first)."""
    first: BaseException | None = None
    for serde in serdes:
        close = getattr(serde, "aclose", None) or getattr(serde, "close", None)
        if not callable(close):
            continue
        try:
            await maybe_await(close())
        except Exception as exc:
            if first is None:
                first = exc
            else:
                log.warning("closing serde %r failed", serde, exc_info=True)
    if first is not None:
        raise first
