"""The folder tree, ARCHITECTURE.md and the import contracts tell the same story: every package of ``gateway`` is a
row of ARCHITECTURE.md's layers table and sits in the layers contract, and every module the contract names exists."""

from __future__ import annotations

import importlib.util
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def _layers_contract() -> dict[str, object]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    return next(c for c in config if c["type"] == "layers" and "containers" not in c)


def test_every_package_is_in_the_architecture_and_the_contract() -> None:
    packages = sorted(p.name for p in (ROOT / "gateway").iterdir() if (p / "__init__.py").exists())
    doc = (ROOT / "ARCHITECTURE.md").read_text()
    table = doc.split("## The layers", 1)[1].split("\n## ", 1)[0]
    assert [p for p in packages if f"`gateway/{p}/`" not in table] == []
    layers = " ".join(str(x) for x in _layers_contract()["layers"])  # type: ignore[attr-defined]
    assert [p for p in packages if not re.search(rf"\bgateway\.{p}\b", layers)] == []


def test_every_module_the_contract_names_exists() -> None:
    contract = _layers_contract()
    names = [n.strip() for layer in contract["layers"] for n in str(layer).split("|")]  # type: ignore[attr-defined]
    names += [side.strip() for rule in contract.get("ignore_imports", []) for side in str(rule).split("->")]  # type: ignore[attr-defined]
    assert [n for n in names if importlib.util.find_spec(n) is None] == []


# import-linter builds its graph from regular packages only: a module in a namespace package is invisible to the
# layer contracts (``gateway/transport/streaming`` was one; the dialects' imports of the SSE framing and the
# accumulator there broke the layers unseen)
def test_every_code_directory_is_a_package_import_linter_sees() -> None:
    missing = [str(d.relative_to(ROOT)) for top in ("gateway", "state", "thinkgate_sim")
               for d in [ROOT / top, *(ROOT / top).rglob("*")]
               if d.is_dir() and d.name != "__pycache__" and any(d.glob("*.py")) and not (d / "__init__.py").exists()]
    assert missing == []


# a citation a maintainer cannot follow from the repository: the planning issues, the design notes outside it
OUTSIDE = re.compile(r"\bissues? \d+|protocols\.md|seed invariant|\bseeds/")


def test_the_code_cites_nothing_outside_the_repository() -> None:
    """A rule's source is the vendor's documentation or ``docs/`` (``docs/upstream-rules.md``), never a planning issue
    or a design note a reader of the code does not have."""
    found = [f"{p.relative_to(ROOT)}:{n}: {line.strip()}"
             for package in ("gateway", "state", "thinkgate_sim") for p in sorted((ROOT / package).rglob("*.py"))
             for n, line in enumerate(p.read_text().splitlines(), 1) if OUTSIDE.search(line)]
    assert found == [], "\n".join(found)
