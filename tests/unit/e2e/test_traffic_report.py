"""The traffic matrix's report (``tests/support/e2e/traffic.py`` ``Report``) as the long form writes it with
``--json``."""

from __future__ import annotations

import json
from dataclasses import asdict

from tests.support.e2e.traffic import CellResult, Report
from tests.support.reliability.recording_proxy import Figures


def test_a_report_with_refusals_and_stream_figures_is_written_as_json() -> None:
    cell = CellResult("responses->anthropic", runs=4, completed=3, refused=1)
    cell.refused_cases["references"] = cell.refused_cases.get("references", 0) + 1
    report = Report("off", {cell.cell: cell}, 1.0, 8, 8, 2, {}, 0, 3.0, 11,
                    Figures(2, 40, {"crlf": 1, "utf8": 2}))
    written = json.loads(json.dumps(asdict(report), default=str))  # bench/mangling_traffic.py --json
    assert written["cells"]["responses->anthropic"]["refused_cases"] == {"references": 1}
    assert written["stream"] == {"streamed": 2, "pieces": 40, "cuts": {"crlf": 1, "utf8": 2}}
