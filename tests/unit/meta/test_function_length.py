"""No function in the pipeline's stages, identify, repair or sanitize modules is longer than 50 lines (issue 33 item
5): the places a change is hardest to get right stay small enough to read whole."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
LIMIT = 50


def test_no_pipeline_function_is_longer_than_the_limit() -> None:
    long: list[str] = []
    for path in sorted((ROOT / "gateway" / "pipeline").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > LIMIT:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({length} lines)")
    assert long == []
