"""The price table (``gateway.dialects.prices``): a turn's cost in micro-dollars by the first matching row, an
operator's file before the shipped rows, and a malformed file refused at startup with one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.app.settings import Settings, SettingsError
from gateway.dialects import prices

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "prices.json"


def test_a_turn_costs_its_tokens_at_the_first_matching_row() -> None:
    usage = {"input_tokens": 1000, "output_tokens": 200, "cache_read_input_tokens": 5000, "_reasoning_tokens": 150}
    # claude-sonnet-4-5: $3 in, $15 out, cache reads $0.30 (reasoning is inside output, not billed twice)
    assert prices.cost_micros(prices.DEFAULT, "claude-sonnet-4-5", usage) == 3000 + 3000 + 1500
    assert prices.billed_tokens(usage) == 6200
    own = prices.load(str(FIXTURE))
    assert prices.cost_micros(own, "claude-haiku-4-5", {"input_tokens": 10, "output_tokens": 2}) == 10 + 10
    assert prices.cost_micros(own, "gpt-5", {"input_tokens": 800}) == 1000  # a shipped row after the file's


def test_a_malformed_price_file_is_one_line_at_startup(tmp_path: Path) -> None:
    bad = tmp_path / "prices.json"
    bad.write_text('[{"input": 1}]')
    with pytest.raises(SettingsError, match="GATEWAY_PRICES_FILE: a row without a model"):
        Settings.from_env({"GATEWAY_PRICES_FILE": str(bad)})
    with pytest.raises(SettingsError, match="GATEWAY_PRICES_FILE"):
        Settings.from_env({"GATEWAY_PRICES_FILE": str(tmp_path / "missing.json")})
    assert Settings.from_env({"GATEWAY_PRICES_FILE": str(FIXTURE)}).prices_file == str(FIXTURE)
