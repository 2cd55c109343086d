"""Moved to :mod:`trafka.common.request_budget` (the proxy shares it); this name
stays for code that imported it from here."""

from trafka.common.request_budget import RequestBudget

__all__ = ["RequestBudget"]
