"""Each handler declares the ports it uses, and uses no others (#47).

A port is one of the broker's parts as a handler's :class:`RequestContext` offers
it (``ctx.logs``, ``ctx.groups``...; :class:`~trafka.brokerlite.handlers._base.Port`).
``HandlerSpec.uses`` names those a handler reaches; this test reads each
handler's code and holds it to that, both ways: a port used and not declared
fails, and so does one declared and not used.

How ``ctx`` is followed (from the ``handle`` of the handler's ``SPEC``):

* ``ctx.<attr>``: a port is used as is; one of the context's own helpers
  (``ctx.allowed``, ``ctx.park``...) uses the ports its body uses, read the
  same way from ``_base.py``; the request (``ctx.version``, ``ctx.session``...)
  and the broker's identity (``_base.IDENTITY``) are no port.
* ``ctx.broker.<operation>`` uses ``Port.BROKER``, and only
  :class:`BrokerPort`'s methods may be reached through it: ``ctx.broker.logs``
  is refused, it would hide a use of ``ctx.logs``.
* ``ctx`` given to a function or class of the handlers package (positionally or
  by keyword): that function's uses of its parameter count, and a class's uses
  of the attributes its ``__init__`` stores ``ctx`` in, in all its methods.
* ``other = ctx`` and ``dataclasses.replace(ctx, ...)`` are ``ctx`` again.
* Anything else (``ctx`` returned, put in a list, given to a function outside
  the package or to a method of one of its parts) is refused: the check could
  not see what is done with it.
"""

from __future__ import annotations

import ast
import functools
import importlib
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

from trafka.brokerlite.handlers import HANDLERS
from trafka.brokerlite.handlers._base import IDENTITY, HandlerSpec, Port

HANDLERS_DIR = Path(__file__).resolve().parents[2] / "brokerlite" / "handlers"
PACKAGE = "trafka.brokerlite.handlers"
PORTS = {port.name.lower() for port in Port if port.name is not None}

# The handlers that use the broker as a whole, and the operation each needs:
# adding one is a decision to make here, in review, not by accident.
WHOLE_BROKER = {
    "k00_produce": "check_min_isr (an acks=all write against min.insync.replicas)",
    "k09_offset_fetch": "pending_offset_partitions (groups' and transactions' pending offsets)",
    "k18_api_versions": "api_versions (what the broker serves and advertises)",
    "k20_delete_topics": "notify_topic_changed (parked requests, fetch sessions, groups)",
    "k34_alter_replica_log_dirs": "reopen_partition (an offline partition back online)",
    "k37_create_partitions": "notify_topic_changed (parked requests, fetch sessions, groups)",
}


def _is_replace(node: ast.expr) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "replace"
        and isinstance(node.value, ast.Name)
        and node.value.id == "dataclasses"
    )


def _parents(root: ast.AST) -> dict[ast.AST, ast.AST]:
    return {child: node for node in ast.walk(root) for child in ast.iter_child_nodes(node)}


class ContextFlow:
    """Where ``ctx`` goes in the handler modules, given as ``{module: parsed source}``."""

    def __init__(self, trees: Mapping[str, ast.Module]) -> None:
        self.trees = trees
        self.problems: list[str] = []
        self._memo: dict[tuple[str, str, str], set[str]] = {}
        base = self.trees["_base"]
        classes = {n.name: n for n in base.body if isinstance(n, ast.ClassDef)}
        context = classes["RequestContext"]
        self._context_fields = {
            n.target.id
            for n in context.body
            if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
        }
        self._context_members = {n.name: n for n in context.body if isinstance(n, ast.FunctionDef)}
        broker_port = classes["BrokerPort"]
        self.broker_operations = {
            n.name for n in broker_port.body if isinstance(n, ast.FunctionDef)
        }

    # -- resolving names ------------------------------------------------------------------

    def _definition(self, module: str, name: str) -> tuple[str, ast.AST] | None:
        for node in self.trees[module].body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name:
                return module, node
            if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module in self.trees:
                for alias in node.names:
                    if (alias.asname or alias.name) == name:
                        return self._definition(node.module, alias.name)
        return None

    # -- following ctx --------------------------------------------------------------------

    def function(self, module: str, func: ast.FunctionDef, param: str) -> set[str]:
        """The ``ctx`` attributes ``func`` uses when ``ctx`` is its parameter ``param``."""
        key = (module, f"{func.name}:{func.lineno}", param)
        if key not in self._memo:
            self._memo[key] = set()  # a recursion sees what is known so far
            self._memo[key] = self._walk(module, func, {param}, set())
        return self._memo[key]

    def cls(self, module: str, node: ast.ClassDef, param: str) -> set[str]:
        """The ``ctx`` attributes class ``node`` uses when ``ctx`` is its ``__init__``'s ``param``."""
        key = (module, node.name, param)
        if key in self._memo:
            return self._memo[key]
        self._memo[key] = set()
        methods = [n for n in node.body if isinstance(n, ast.FunctionDef)]
        init = next((m for m in methods if m.name == "__init__"), None)
        if init is None:
            self.problems.append(f"{module}: ctx given to {node.name}, which has no __init__")
            return set()
        aliases = self._aliases(init, {param}, set())
        holders = {
            target.attr
            for assign in ast.walk(init)
            if isinstance(assign, ast.Assign)
            and isinstance(assign.value, ast.Name)
            and assign.value.id in aliases
            for target in assign.targets
            if isinstance(target, ast.Attribute)
            and isinstance(target.value, ast.Name)
            and target.value.id == "self"
        }
        used = self._walk(module, init, {param}, holders)
        for method in methods:
            if method is not init:
                used |= self._walk(module, method, set(), holders)
        self._memo[key] = used
        return used

    def _is_ctx(self, node: ast.AST, aliases: set[str], holders: set[str]) -> bool:
        if isinstance(node, ast.Name):
            return node.id in aliases and isinstance(node.ctx, ast.Load)
        if isinstance(node, ast.Attribute):
            return (
                node.attr in holders
                and isinstance(node.value, ast.Name)
                and node.value.id == "self"
                and isinstance(node.ctx, ast.Load)
            )
        if isinstance(node, ast.Call):
            return (
                _is_replace(node.func)
                and bool(node.args)
                and self._is_ctx(node.args[0], aliases, holders)
            )
        return False

    def _aliases(self, func: ast.FunctionDef, aliases: set[str], holders: set[str]) -> set[str]:
        aliases = set(aliases)
        while True:
            more = {
                target.id
                for assign in ast.walk(func)
                if isinstance(assign, ast.Assign) and self._is_ctx(assign.value, aliases, holders)
                for target in assign.targets
                if isinstance(target, ast.Name)
            }
            if more <= aliases:
                return aliases
            aliases |= more

    def _walk(
        self, module: str, func: ast.FunctionDef, params: set[str], holders: set[str]
    ) -> set[str]:
        aliases = self._aliases(func, params, holders)
        parents = _parents(func)
        used: set[str] = set()
        for node in ast.walk(func):
            if node is func or not self._is_ctx(node, aliases, holders):
                continue
            where = f"{module}.py:{getattr(node, 'lineno', '?')}"
            parent = parents[node]
            if isinstance(parent, ast.Attribute) and parent.value is node:
                if parent.attr != "broker":
                    used.add(parent.attr)
                    continue
                operation = parents.get(parent)
                if isinstance(operation, ast.Attribute) and operation.value is parent:
                    if operation.attr in self.broker_operations:
                        used.add("broker")
                    else:
                        self.problems.append(
                            f"{where}: ctx.broker.{operation.attr} is not one of BrokerPort's "
                            f"operations (a part is reached as ctx.{operation.attr})"
                        )
                else:
                    self.problems.append(f"{where}: ctx.broker used other than for an operation")
            elif isinstance(parent, ast.Call) and parent.func is not node:
                if _is_replace(parent.func) and parent.args and parent.args[0] is node:
                    continue  # the copy is ctx again, followed where it goes
                used |= self._call(module, where, parent, node)
            elif isinstance(parent, ast.keyword):
                call = parents[parent]
                assert isinstance(call, ast.Call)
                used |= self._call(module, where, call, node, keyword=parent.arg)
            elif isinstance(parent, ast.Assign) and parent.value is node:
                if not all(
                    isinstance(t, ast.Name)
                    or (
                        isinstance(t, ast.Attribute)
                        and isinstance(t.value, ast.Name)
                        and t.value.id == "self"
                        and t.attr in holders
                    )
                    for t in parent.targets
                ):
                    self.problems.append(f"{where}: ctx stored where the check cannot follow it")
            else:
                self.problems.append(f"{where}: ctx used in a way the check cannot follow")
        return used

    def _call(
        self,
        module: str,
        where: str,
        call: ast.Call,
        arg: ast.AST,
        keyword: str | None = None,
    ) -> set[str]:
        callee = call.func
        found = self._definition(module, callee.id) if isinstance(callee, ast.Name) else None
        if found is None:
            self.problems.append(
                f"{where}: ctx given to {ast.unparse(callee)}, outside the handlers package"
            )
            return set()
        target_module, definition = found
        if isinstance(definition, ast.ClassDef):
            init = next(
                (
                    n
                    for n in definition.body
                    if isinstance(n, ast.FunctionDef) and n.name == "__init__"
                ),
                None,
            )
            params = (
                [] if init is None else [a.arg for a in init.args.posonlyargs + init.args.args][1:]
            )
        else:
            assert isinstance(definition, ast.FunctionDef)
            params = [a.arg for a in definition.args.posonlyargs + definition.args.args]
        if keyword is not None:
            param = keyword
        else:
            index = call.args.index(arg)  # type: ignore[arg-type]
            if index >= len(params):
                self.problems.append(f"{where}: ctx given as *args, which the check cannot follow")
                return set()
            param = params[index]
        if isinstance(definition, ast.ClassDef):
            return self.cls(target_module, definition, param)
        assert isinstance(definition, ast.FunctionDef)
        return self.function(target_module, definition, param)

    # -- from attributes to ports ---------------------------------------------------------

    def ports(self, attributes: Iterable[str], seen: frozenset[str] = frozenset()) -> set[str]:
        """The ports behind ``ctx`` attributes: the context's helpers are read through."""
        found: set[str] = set()
        for attr in attributes:
            if attr in PORTS:
                found.add(attr)
            elif attr in IDENTITY or attr in self._context_fields or attr in seen:
                continue
            elif attr in self._context_members:
                member = self._context_members[attr]
                inner = self._walk("_base", member, {"self"}, set())
                found |= self.ports(inner, seen | {attr})
            else:
                self.problems.append(f"ctx.{attr} is not an attribute of RequestContext")
        return found

    def handler_ports(self, module: str, handle: str) -> set[str]:
        found = self._definition(module, handle)
        assert found is not None and isinstance(found[1], ast.FunctionDef), (module, handle)
        func = found[1]
        return self.ports(self.function(module, func, func.args.args[0].arg))


@functools.cache
def _package_trees() -> dict[str, ast.Module]:
    return {
        path.stem: ast.parse(path.read_text(), path.name)
        for path in sorted(HANDLERS_DIR.glob("*.py"))
    }


def _declared(ports: Port) -> set[str]:
    return {port.name.lower() for port in ports if port.name is not None}


# -- the rule, on the real handlers ----------------------------------------------------------


def test_every_port_is_a_context_attribute() -> None:
    from trafka.brokerlite.handlers._base import RequestContext

    assert all(isinstance(getattr(RequestContext, name), property) for name in PORTS - {"broker"})
    assert "broker" in RequestContext.__dataclass_fields__
    assert not PORTS & IDENTITY


def test_each_handler_declares_exactly_the_ports_it_uses() -> None:
    flow = ContextFlow(_package_trees())
    wrong = {}
    for spec in HANDLERS.values():
        module = spec.handle.__module__.rsplit(".", 1)[1]
        used = flow.handler_ports(module, spec.handle.__name__)
        declared = _declared(spec.ports)
        if used != declared:
            wrong[module] = {
                "undeclared": sorted(used - declared),
                "unused": sorted(declared - used),
            }
    assert flow.problems == []
    assert wrong == {}


def test_the_whole_broker_is_declared_rarely_and_on_purpose() -> None:
    declaring = {
        spec.handle.__module__.rsplit(".", 1)[1]
        for spec in HANDLERS.values()
        if Port.BROKER in spec.ports
    }
    assert declaring == set(WHOLE_BROKER)


@pytest.mark.parametrize("uses", ["logz", "Groups", "groups groups", "none", "groups,txn"])
def test_a_spec_names_only_ports_each_once(uses: str) -> None:
    heartbeat = HANDLERS[12]
    with pytest.raises(ValueError, match="must name ports"):
        HandlerSpec(12, 0, 4, heartbeat.handle, heartbeat.error_response, uses=uses)


def test_a_specs_ports_are_its_names() -> None:
    heartbeat = HANDLERS[12]
    spec = HandlerSpec(12, 0, 4, heartbeat.handle, None, uses=" txn  groups ")
    assert spec.ports == Port.GROUPS | Port.TXN
    assert HandlerSpec(12, 0, 4, heartbeat.handle, None).ports == Port.NONE


def test_every_handler_module_is_checked() -> None:
    modules = {p.stem for p in HANDLERS_DIR.glob("k*.py")}
    checked = {spec.handle.__module__.rsplit(".", 1)[1] for spec in HANDLERS.values()}
    assert checked == modules
    for module in modules:
        handler = importlib.import_module(f"{PACKAGE}.{module}")
        assert handler.SPEC.handle.__module__ == handler.__name__


# -- the check itself: it sees what it must, and refuses what it cannot follow ---------------

_SPEC_LINE = "SPEC = None\n"


def _flow_of(handler_source: str) -> tuple[ContextFlow, set[str]]:
    flow = ContextFlow({**_package_trees(), "k99_probe": ast.parse(handler_source)})
    return flow, flow.handler_ports("k99_probe", "handle")


@pytest.mark.parametrize(
    ("source", "ports"),
    [
        ("def handle(ctx, r):\n    return ctx.version, ctx.now_ms, ctx.node_id\n", set()),
        ("def handle(ctx, r):\n    return ctx.groups.heartbeat(r, ctx.version)\n", {"groups"}),
        # the context's helpers, read through in _base.py
        ("def handle(ctx, r):\n    return ctx.allowed(1, 2, 'g')\n", {"authorizer"}),
        ("def handle(ctx, r):\n    return ctx.mutation_quota(5)\n", {"quotas"}),
        ("def handle(ctx, r):\n    return ctx.topic_name(r)\n", {"logs"}),
        # helpers of the package, by position and by keyword, through aliases
        (
            "from ._authz import group_allowed\n"
            "def handle(ctx, r):\n    return group_allowed(ctx, 1, 'g')\n",
            {"authorizer"},
        ),
        (
            "from ._util import leader_log\n"
            "def handle(ctx, r):\n    c = ctx\n    return leader_log(where=c, topic='t', partition=0)\n",
            {"logs", "cluster"},
        ),
        # a class that keeps ctx, and a copy with another time
        (
            "import dataclasses\n"
            "class Run:\n"
            "    def __init__(self, ctx):\n        self._ctx = ctx\n"
            "    def later(self, now):\n"
            "        ctx = dataclasses.replace(self._ctx, now_ms=now)\n"
            "        return helper(ctx)\n"
            "def helper(context):\n    return context.txn\n"
            "def handle(ctx, r):\n    return Run(ctx)\n",
            {"txn"},
        ),
        ("def handle(ctx, r):\n    return ctx.broker.api_versions()\n", {"broker"}),
    ],
)
def test_the_check_follows_ctx(source: str, ports: set[str]) -> None:
    flow, found = _flow_of(source + _SPEC_LINE)
    assert flow.problems == []
    assert found == ports


@pytest.mark.parametrize(
    ("source", "problem"),
    [
        ("def handle(ctx, r):\n    return ctx.broker.logs.topic('t')\n", "ctx.broker.logs"),
        ("def handle(ctx, r):\n    b = ctx.broker\n    return b\n", "ctx.broker used other"),
        ("def handle(ctx, r):\n    return ctx.groups.join(ctx)\n", "ctx given to ctx.groups.join"),
        ("def handle(ctx, r):\n    return print(ctx)\n", "ctx given to print"),
        ("def handle(ctx, r):\n    return [ctx]\n", "cannot follow"),
        ("def handle(ctx, r):\n    r.x = ctx\n", "ctx stored"),
        ("def handle(ctx, r):\n    return ctx.nonsense\n", "ctx.nonsense is not an attribute"),
    ],
)
def test_the_check_refuses_what_it_cannot_follow(source: str, problem: str) -> None:
    flow, _ = _flow_of(source + _SPEC_LINE)
    assert any(problem in p for p in flow.problems), flow.problems
