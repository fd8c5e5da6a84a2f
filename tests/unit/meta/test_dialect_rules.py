"""Upstream rules live in the dialect entries: outside ``gateway/dialects/`` no code compares an upstream kind or an
OpenAI-compatible flavor (``caps.kind == "anthropic"``, ``flavor in ("copilot", "deepseek")``,
``caps.family == "gemini"``); shared code asks the route's entry (``gateway.dialects.registry``) instead.

A client protocol (a surface's dialect, the protocol a model listing answers in, an export's format) shares names with
upstream kinds but is the surfaces' vocabulary: comparisons of the names ``dialect``, ``named`` and ``fmt`` are those.
The simulator (``thinkgate_sim``, its own package) plays the upstreams and is not the gateway's code.
"""

from __future__ import annotations

import ast
from pathlib import Path

from gateway.dialects import registry

ROOT = Path(__file__).resolve().parents[3]
NAMES = frozenset(registry.DIALECTS) | frozenset(registry.FLAVORS)  # the kinds and flavors the registry holds
CLIENT_PROTOCOL = frozenset({"dialect", "named", "fmt"})
ROUTE_ATTRS = frozenset({"flavor", "family"})


def _named(node: ast.expr) -> str | None:
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None


def _kind_literal(node: ast.expr) -> bool:
    if isinstance(node, ast.Constant):
        return node.value in NAMES
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return any(_kind_literal(e) for e in node.elts)
    return False


def comparisons(source: str) -> list[tuple[int, str]]:
    """The lines of ``source`` that compare an upstream kind or flavor, with the comparison's text."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        operands = [node.left, *node.comparators]
        if any(_named(o) in CLIENT_PROTOCOL for o in operands):
            continue
        if any(_kind_literal(o) for o in operands) or any(
                isinstance(o, ast.Attribute) and o.attr in ROUTE_ATTRS for o in operands):
            found.append((node.lineno, ast.unparse(node)))
    return found


def shared_modules(root: Path) -> list[Path]:
    gateway = root / "gateway"
    return sorted(p for p in gateway.rglob("*.py") if not p.is_relative_to(gateway / "dialects"))


def test_no_module_outside_the_dialect_packages_compares_a_kind() -> None:
    offenders = [f"{p.relative_to(ROOT)}:{line}: {text}" for p in shared_modules(ROOT)
                 for line, text in comparisons(p.read_text())]
    assert not offenders, "\n".join(offenders)


def test_the_check_sees_the_forms_it_forbids() -> None:
    forbidden = ['caps.kind == "anthropic"', 'caps.flavor in ("copilot", "deepseek")', 'c.family == "gemini"',
                 'kind in ("openai", "responses")', '"deepseek" != flavor', 'upstream == "anthropic" and x']
    allowed = ['dialect == "anthropic"', 'named in ("gemini", None)', 'fmt == "anthropic"', 'op.kind == MESSAGE',
               'kind == "function_call"', 'a.kind == ActionKind.RESTORED']
    assert all(comparisons(f"x = {s}") for s in forbidden)
    assert not any(comparisons(f"x = {s}") for s in allowed)


def test_the_metric_label_sets_come_from_the_registry() -> None:
    from gateway.ops import metrics
    assert set(registry.DIALECTS) | set(registry.FLAVORS) <= metrics.UPSTREAMS
    assert metrics.PARAM_ROUTES == frozenset(registry.DIALECTS) | {"other"}
