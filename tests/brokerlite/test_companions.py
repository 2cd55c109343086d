"""Companions: the broker finds the web console among the installed plug-ins
(entry points), never by importing it."""

from __future__ import annotations

import pytest

from trafka.brokerlite.companions import find
from trafka.brokerlite.errors import BrokerError


def test_the_console_is_found_as_a_plug_in() -> None:
    console = find("console")
    assert console.missing() is None  # the dev install has the console extra
    assert callable(console.serve)


def test_an_unknown_companion_is_a_clear_error() -> None:
    with pytest.raises(
        BrokerError, match=r"no nonesuch is installed: pip install 'trafka\[nonesuch\]'"
    ):
        find("nonesuch")
