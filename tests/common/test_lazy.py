"""common/lazy.py: names exported from a module but loaded on first use (PEP 562)."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator

import pytest

from trafka.common.lazy import lazy_exports


@pytest.fixture
def exporter() -> Iterator[types.ModuleType]:
    """A fresh module of the trafka.common package exporting ``RateLimitedLog``
    from ``.lograte`` (relative) and ``OrderedDict`` from ``collections``
    (absolute), neither bound until read."""
    name = "trafka.common._lazy_test_exporter"
    module = types.ModuleType(name)
    module.__package__ = "trafka.common"
    module.defined_here = 1  # type: ignore[attr-defined]
    sys.modules[name] = module
    try:
        getattr_, dir_ = lazy_exports(
            name, {"RateLimitedLog": ".lograte", "OrderedDict": "collections"}
        )
        module.__getattr__ = getattr_  # type: ignore[method-assign]
        module.__dir__ = dir_  # type: ignore[method-assign]
        yield module
    finally:
        del sys.modules[name]


def test_a_name_is_loaded_from_its_module_when_first_read_then_kept(
    exporter: types.ModuleType,
) -> None:
    import collections

    from trafka.common.lograte import RateLimitedLog

    assert "RateLimitedLog" not in vars(exporter)
    assert exporter.RateLimitedLog is RateLimitedLog
    assert vars(exporter)["RateLimitedLog"] is RateLimitedLog  # later reads skip __getattr__
    assert exporter.OrderedDict is collections.OrderedDict


def test_dir_lists_the_names_not_yet_loaded(exporter: types.ModuleType) -> None:
    listed = dir(exporter)
    assert {"RateLimitedLog", "OrderedDict", "defined_here"} <= set(listed)
    assert listed == sorted(listed)


def test_an_unknown_name_is_an_attribute_error_naming_the_module(
    exporter: types.ModuleType,
) -> None:
    with pytest.raises(AttributeError, match=r"'trafka.common._lazy_test_exporter'.*'nothing'"):
        exporter.nothing  # noqa: B018
    assert not hasattr(exporter, "nothing")
