"""The handler index (``brokerlite/handlers/_index.py``) against the handlers,
and the lazy loading it allows (issue #60)."""

from __future__ import annotations

import importlib
import pkgutil
import re
import subprocess
import sys

import trafka.brokerlite.handlers as handlers_pkg
from trafka.brokerlite.handlers import HANDLERS, Handlers
from trafka.brokerlite.handlers._index import INDEX
from trafka.tools import handler_index


def _all_specs() -> dict[int, tuple[str, object]]:
    found = {}
    for info in pkgutil.iter_modules(handlers_pkg.__path__):
        if re.fullmatch(r"k\d\d_\w+", info.name):
            spec = importlib.import_module(f"{handlers_pkg.__name__}.{info.name}").SPEC
            found[spec.api_key] = (info.name, spec)
    return found


def test_index_matches_every_handler_module() -> None:
    specs = _all_specs()
    assert sorted(INDEX) == sorted(specs)
    for key, (module, spec) in specs.items():
        assert INDEX[key] == (module, spec.versions), f"key {key}: index is stale"


def test_generator_check_mode_passes_on_the_committed_index() -> None:
    assert handler_index.render() == handler_index.INDEX_PATH.read_text()
    assert handler_index.main(["--check"]) == 0


def test_lookup_imports_the_module_and_gives_its_spec() -> None:
    for key, (module, spec) in _all_specs().items():
        assert HANDLERS[key] is spec
        assert HANDLERS.get(key) is spec
        assert HANDLERS.versions(key) == spec.versions
        assert spec.handle.__module__.endswith(module)


def test_setting_and_deleting_a_key_changes_what_is_served() -> None:
    handlers = Handlers(INDEX)
    api_versions = handlers[18]
    handlers[18] = api_versions.__class__(
        api_key=18,
        min_version=0,
        max_version=1,
        handle=api_versions.handle,
        error_response=api_versions.error_response,
        uses=api_versions.uses,
    )
    assert handlers.versions(18).served("4.0") == (0, 1)
    del handlers[36]
    assert 36 not in handlers and handlers.get(36) is None
    assert len(handlers) == len(INDEX) - 1


def test_a_fresh_broker_process_imports_no_handler_it_did_not_serve() -> None:
    # A broker object built and asked for ApiVersions' list looks up no handler.
    code = (
        "import sys\n"
        "from trafka.brokerlite.config import BrokerConfig\n"
        "from trafka.brokerlite.intake import advertised_versions\n"
        "import trafka.brokerlite.server\n"
        "from trafka.brokerlite.handlers import HANDLERS\n"
        "assert advertised_versions(BrokerConfig())\n"
        "print(sorted(HANDLERS.imported()))\n"
        "print(' '.join(sorted(m for m in sys.modules if '.handlers.k' in m)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    ).stdout.splitlines()
    assert out[0] == "[]"
    # k01_fetch is imported by the broker's fetch plumbing (FetchPlan, its wake
    # reasons), not through HANDLERS; no other handler is loaded.
    assert out[1].split() == ["trafka.brokerlite.handlers.k01_fetch"]
