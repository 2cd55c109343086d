"""The written-out message classes behave as the dataclasses they replace.

The generator writes each message class's methods out (``codec/_frozen.py``
says why and what). Its decorated form of the same modules, where
``@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)`` makes the
methods, is what the modules were before (byte for byte, when the classes were
first written out); this runs both and compares every class of every module: the ``dataclasses`` description
(``fields``, their defaults, factories and metadata, the parameters), the
signature, instances made with and without arguments (repr, equality, hash,
``asdict``, ``replace``), refused assignment and deletion, pickling and copying,
and the errors of a wrong call.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import pickle
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from trafka.codec import _frozen
from trafka.tools import codegen

REPO = Path(__file__).resolve().parents[2]
SPECS = REPO / "codec" / "specs" / "kafka-protocol"
PACKAGE = "trafka.codec.messages"


def _classes(namespace: Any, module: str) -> Iterator[tuple[str, type]]:
    """The message classes of a module, nested ones included, by qualified name."""
    for value in vars(namespace).values():
        if isinstance(value, type) and value.__module__ == module:
            nested = not isinstance(namespace, types.ModuleType)
            if nested and not value.__qualname__.startswith(namespace.__qualname__ + "."):
                continue
            yield value.__qualname__, value
            yield from _classes(value, module)


def _load_decorated(name: str, text: str) -> types.ModuleType:
    module = types.ModuleType(f"{PACKAGE}._decorated_{name}")
    module.__package__ = PACKAGE
    # dataclasses and pickle find a class's module in sys.modules.
    sys.modules[module.__name__] = module
    exec(compile(text, f"<decorated {name}>", "exec"), module.__dict__)
    return module


@pytest.fixture(scope="module")
def pairs() -> Iterator[list[tuple[str, type, type]]]:
    """(qualified name, written-out class, decorated class) of every generated class."""
    import importlib

    out = []
    loaded = []
    for path, text in sorted(codegen.generate(SPECS, decorated=True).items()):
        if path.parent.name != "messages" or path.stem == "__init__":
            continue
        written = importlib.import_module(f"{PACKAGE}.{path.stem}")
        decorated = _load_decorated(path.stem, text)
        loaded.append(decorated.__name__)
        theirs = dict(_classes(decorated, decorated.__name__))
        ours = dict(_classes(written, written.__name__))
        assert set(ours) == set(theirs), path.stem
        out += [(f"{path.stem}.{q}", ours[q], theirs[q]) for q in sorted(ours)]
    yield out
    for name in loaded:
        del sys.modules[name]


def _field_facts(cls: type) -> list[tuple[Any, ...]]:
    facts = []
    for f in dataclasses.fields(cls):
        made = None if f.default_factory is dataclasses.MISSING else repr(f.default_factory())
        facts.append(
            (
                f.name,
                f.type,
                repr(f.default),
                made,
                f.init,
                f.repr,
                f.hash,
                f.compare,
                dict(f.metadata),
                f.kw_only,
            )
        )
    return facts


def _outcome(call: Any, *args: Any, **kwargs: Any) -> tuple[str, str]:
    """What a call gives: its result's repr, or its exception's type and text."""
    try:
        return "value", repr(call(*args, **kwargs))
    except Exception as exc:
        return type(exc).__name__, str(exc)


def test_there_are_classes_to_compare(pairs: list[tuple[str, type, type]]) -> None:
    assert len(pairs) > 300
    names = {name for name, _, _ in pairs}
    assert "k01_fetch.FetchRequest.FetchTopic" in names
    assert "k00_produce.ProduceRequest" in names


def test_the_dataclass_description_is_the_same(pairs: list[tuple[str, type, type]]) -> None:
    for name, ours, theirs in pairs:
        assert dataclasses.is_dataclass(ours), name
        assert _field_facts(ours) == _field_facts(theirs), name
        params = ("__dataclass_params__", "__match_args__", "__slots__")
        for attr in params:
            assert repr(getattr(ours, attr)) == repr(getattr(theirs, attr)), (name, attr)
        # The parameters: the return annotation is the text "None" (PEP 563) here.
        ours_sig, theirs_sig = inspect.signature(ours), inspect.signature(theirs)
        assert list(map(str, ours_sig.parameters.values())) == list(
            map(str, theirs_sig.parameters.values())
        ), name
        assert ours.__qualname__ == theirs.__qualname__
        assert ours.__annotations__ == theirs.__annotations__, name


def _variants(cls: type) -> list[dict[str, Any]]:
    """Keyword arguments: none, and each int or str field away from its default."""
    out: list[dict[str, Any]] = [{}]
    for f in dataclasses.fields(cls):
        if type(f.default) is int:
            out.append({f.name: f.default + 7})
        elif type(f.default) is str:
            out.append({f.name: f.default + "x"})
        elif f.name == "unknown_tagged_fields":
            out.append({f.name: [(5, b"\x01")]})
    return out


def test_instances_behave_the_same(pairs: list[tuple[str, type, type]]) -> None:
    for name, ours, theirs in pairs:
        plain_ours, plain_theirs = ours(), theirs()
        for kwargs in _variants(ours):
            a, b = ours(**kwargs), theirs(**kwargs)
            where = (name, kwargs)
            assert repr(a) == repr(b), where
            assert dataclasses.asdict(a) == dataclasses.asdict(b), where
            assert (a == ours(**kwargs), a == plain_ours) == (
                b == theirs(**kwargs),
                b == plain_theirs,
            ), where
            assert (a != plain_ours) == (b != plain_theirs), where
            assert a != b and a.__eq__(b) is NotImplemented, where
            assert _outcome(hash, a) == _outcome(hash, b), where
            for x in (a, b):
                again = pickle.loads(pickle.dumps(x))
                assert again == x and type(again) is type(x), where
                assert copy.deepcopy(x) == x and copy.copy(x) == x, where
            field = dataclasses.fields(ours)[0].name
            assert _outcome(setattr, a, field, 1) == _outcome(setattr, b, field, 1), where
            assert _outcome(delattr, a, field) == _outcome(delattr, b, field), where
            # A name that is no field: refused alike, where the decorated class's
            # refusal is a TypeError about super() (CPython 3.11's frozen slotted
            # dataclasses, gh-90055).
            assert _outcome(setattr, a, "nope", 1)[0] == "FrozenInstanceError"
            assert _outcome(delattr, a, "nope")[0] == "FrozenInstanceError"
            assert _outcome(setattr, b, "nope", 1)[0] != "value"
            changed = {k: v for k, v in kwargs.items() if k != "unknown_tagged_fields"}
            assert repr(dataclasses.replace(plain_ours, **changed)) == repr(
                dataclasses.replace(plain_theirs, **changed)
            ), where


def test_wrong_calls_fail_the_same(pairs: list[tuple[str, type, type]]) -> None:
    for name, ours, theirs in pairs:
        assert _outcome(ours, 1) == _outcome(theirs, 1), name
        assert _outcome(ours, no_such_field=1) == _outcome(theirs, no_such_field=1), name


def test_defaults_made_per_instance_are_fresh() -> None:
    from trafka.codec.messages import k01_fetch

    a, b = k01_fetch.FetchRequest(), k01_fetch.FetchRequest()
    assert a.topics == [] and a.topics is not b.topics
    assert a.replica_state == b.replica_state and a.replica_state is not b.replica_state
    # The marker is what the signature shows, as the dataclass's does.
    assert repr(_frozen.LIST) == "<factory>"
    given: list[k01_fetch.FetchRequest.FetchTopic] = []
    assert k01_fetch.FetchRequest(topics=given).topics is given
