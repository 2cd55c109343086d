"""Frozen, slotted, keyword-only classes whose methods the code generator writes out.

The generated message modules (``codec/messages``) hold a few hundred classes,
one per message and nested struct. Declared with ``@dataclasses.dataclass``,
each had its methods made at import by compiling source text, which was most
of what importing the client cost (issue #48). So the generator
(:mod:`trafka.tools.codegen`) writes each class out: ``__slots__``, the
fields' annotations, ``__init__``, ``__eq__`` and ``__hash__``, as the
dataclass would have made them. :func:`message` adds what is the same for
every class.

Rules:

* A class is what ``@dataclasses.dataclass(frozen=True, slots=True,
  kw_only=True)`` makes of the same declaration, to users and to the
  ``dataclasses`` functions: keyword-only ``__init__``, equality and hash over
  the fields in order, the dataclass's ``repr``, ``FrozenInstanceError`` on
  assignment and deletion, pickling and copying, ``__match_args__ == ()``,
  and ``__dataclass_fields__``/``__dataclass_params__``, so that ``fields``,
  ``replace``, ``asdict`` and ``is_dataclass`` work. One difference: the
  classes have no ``__doc__`` (the dataclass's is its signature).
  ``tests/codec/test_frozen_classes.py`` compares every generated class with
  the dataclass the generator's decorated form of the same module makes.
* ``__dataclass_fields__`` and ``__dataclass_params__`` are made the first time
  they are read, by running ``dataclasses.dataclass`` on a scratch class with
  the same fields, defaults and metadata (read from ``__slots__``, the
  annotations and ``__init__``'s defaults), so they are exactly the dataclass's.
  Most classes are never asked.
* The generated ``__init__`` gives a field whose default is made per instance
  (a list, a nested struct) a :class:`Factory` as its default, as the dataclass
  gives it a marker: passing nothing makes a fresh value, never a shared one.
* Type checkers see :func:`message` as a dataclass transform (PEP 681), so
  they check these classes as the frozen keyword-only dataclasses they are.
"""

from __future__ import annotations

import dataclasses
import reprlib
from collections.abc import Callable, Mapping
from typing import Any, NoReturn, TypeVar, dataclass_transform, overload

__all__ = ["LIST", "Factory", "factory", "message", "setattr_"]

_C = TypeVar("_C", bound=type)

# What the generated __init__ stores fields with (the instances are frozen).
setattr_ = object.__setattr__

# The metadata of fields that carry record sets (tools/decode.py reads it).
_RECORDS: Mapping[str, str] = {"kafka_type": "records"}


class Factory:
    """The default of a field whose value is made per instance by ``make``."""

    __slots__ = ("make",)

    def __init__(self, make: Callable[[], Any]) -> None:
        self.make = make

    def __repr__(self) -> str:
        return "<factory>"  # as the dataclass's marker shows in signatures


def factory(make: Callable[[], Any]) -> Any:
    """A :class:`Factory` typed to fit any field's annotation in ``__init__``."""
    return Factory(make)


LIST: Any = Factory(list)


@reprlib.recursive_repr()
def _repr(self: Any) -> str:
    cls = type(self)
    inner = ", ".join(f"{name}={getattr(self, name)!r}" for name in cls.__slots__)
    return f"{cls.__qualname__}({inner})"


def _setattr(self: Any, name: str, value: Any) -> NoReturn:
    raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")


def _delattr(self: Any, name: str) -> NoReturn:
    raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")


def _getstate(self: Any) -> list[Any]:
    return [getattr(self, name) for name in type(self).__slots__]


def _setstate(self: Any, state: list[Any]) -> None:
    for name, value in zip(type(self).__slots__, state, strict=True):
        setattr_(self, name, value)


def _describe(cls: type, records: tuple[str, ...]) -> None:
    """Give ``cls`` the ``__dataclass_fields__`` and ``__dataclass_params__`` of
    the dataclass with the same declaration."""
    defaults = cls.__init__.__kwdefaults__ or {}  # type: ignore[misc]
    annotations: dict[str, Any] = {}
    namespace: dict[str, Any] = {
        "__module__": cls.__module__,
        "__qualname__": cls.__qualname__,
        "__annotations__": annotations,
    }
    for name in cls.__dict__["__slots__"]:
        annotations[name] = cls.__annotations__[name]
        default = defaults[name]
        if isinstance(default, Factory):
            namespace[name] = dataclasses.field(default_factory=default.make)
        elif name in records:
            namespace[name] = dataclasses.field(default=default, metadata=_RECORDS)
        else:
            namespace[name] = default
    scratch: Any = dataclasses.dataclass(frozen=True, slots=True, kw_only=True)(
        type(cls.__name__, (), namespace)
    )
    for name in ("__dataclass_fields__", "__dataclass_params__"):
        setattr(cls, name, getattr(scratch, name))


class _Described:
    """A class attribute that :func:`_describe`\\ s its class when first read,
    then is replaced by the value it stood for."""

    __slots__ = ("name", "records")

    def __init__(self, name: str, records: tuple[str, ...]) -> None:
        self.name = name
        self.records = records

    def __get__(self, instance: Any, owner: type) -> Any:
        # The class that holds this attribute, should ``owner`` be a subclass.
        cls = next(c for c in owner.__mro__ if c.__dict__.get(self.name) is self)
        _describe(cls, self.records)
        return cls.__dict__[self.name]


# What every class has alike.
_SHARED: dict[str, Any] = {
    "__repr__": _repr,
    "__setattr__": _setattr,
    "__delattr__": _delattr,
    "__getstate__": _getstate,
    "__setstate__": _setstate,
    "__match_args__": (),  # the fields are keyword-only
}


@overload
def message(cls: _C, /) -> _C: ...
@overload
def message(*, records: tuple[str, ...] = ()) -> Callable[[_C], _C]: ...
@dataclass_transform(kw_only_default=True, frozen_default=True)
def message(cls: Any = None, /, *, records: tuple[str, ...] = ()) -> Any:
    """Complete a written-out class: the methods every class shares, and its
    dataclass description on first use.

    Args:
        cls: the class (``@message``), or None (``@message(records=...)``).
        records: the fields that carry record sets (their dataclass field's
            metadata says ``kafka_type: records``).
    """

    def complete(cls: _C) -> _C:
        for name, value in _SHARED.items():
            setattr(cls, name, value)
        for name in ("__dataclass_fields__", "__dataclass_params__"):
            setattr(cls, name, _Described(name, records))
        return cls

    return complete if cls is None else complete(cls)
