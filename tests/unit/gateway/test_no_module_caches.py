"""Issue 21: no module-level mutable cache anywhere in ``gateway/`` or ``state/``. Every per-worker cache lives in
the ``WorkerCaches`` the ``Gateway`` holds (sizes from settings); a memoising decorator or a ``global`` rebinding
at module level would be process-global state that tests and workers share unseen."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
CACHING = {"lru_cache", "cache"}  # functools' memoising decorators (``cached_property`` is per instance: allowed)


def _sources() -> list[Path]:
    return sorted(p for pkg in ("gateway", "state") for p in (ROOT / pkg).rglob("*.py"))


def _name(node: ast.expr) -> str:
    node = node.func if isinstance(node, ast.Call) else node
    return node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""


@pytest.mark.unit
@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_memoising_decorator_or_global_rebinding(path: Path) -> None:
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            found += [f"{node.name}: @{_name(d)}" for d in node.decorator_list if _name(d) in CACHING]
        elif isinstance(node, ast.Global):
            found.append(f"global {', '.join(node.names)}")
    assert not found, f"{path.name}: module-level cache or global state: {found}"


@pytest.mark.unit
def test_the_check_sees_a_cache() -> None:
    """The scan above would catch the forms it looks for."""
    tree = ast.parse("import functools\n@functools.lru_cache(maxsize=8)\ndef f(x): return x\n"
                     "def g():\n    global X\n")
    decorators = [_name(d) for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) for d in n.decorator_list]
    assert decorators == ["lru_cache"] and any(isinstance(n, ast.Global) for n in ast.walk(tree))
