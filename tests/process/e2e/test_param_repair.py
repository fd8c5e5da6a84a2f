"""Parameters that thinking forbids, sent with the official anthropic SDK through a default gateway
(GATEWAY_FIX_THINKING_PARAMS=true): repaired before the upstream sees them (simulator rules 1-4).

tests/support/e2e/rules_through_gateway_tests.py checks the opposite: with the repair off, the upstream's
400 comes back unchanged.
"""

from __future__ import annotations

from typing import Any

import anthropic
import pytest

from tests.process.observability.test_processes import scrape
from tests.process_fixtures import ServerProcess, Sim

MODEL = "claude-opus-4-5"
TOOL = {"name": "get_weather", "input_schema": {"type": "object"}}

# rule -> (request parameters, check of the body the simulator received)
CASES: dict[str, tuple[dict[str, Any], Any]] = {
    "budget_below_minimum": ({"thinking": {"type": "enabled", "budget_tokens": 100}},
                             lambda b: b["thinking"]["budget_tokens"] >= 1024),
    "budget_not_below_max_tokens": ({"max_tokens": 2048, "thinking": {"type": "enabled", "budget_tokens": 2048}},
                                    lambda b: 1024 <= b["thinking"]["budget_tokens"] < b["max_tokens"]),
    "forced_tool_choice": ({"tool_choice": {"type": "tool", "name": "get_weather"}, "tools": [TOOL]},
                           lambda b: b["tool_choice"] == {"type": "auto"}),
    # (this SDK release has no ``temperature`` argument for these models: sent as an extra body field)
    "temperature": ({"extra_body": {"temperature": 0.2}}, lambda b: "temperature" not in b),
    "all_at_once": ({"max_tokens": 1000, "extra_body": {"temperature": 0.0}, "tool_choice": {"type": "any"},
                     "tools": [TOOL],
                     "thinking": {"type": "enabled", "budget_tokens": 500}},
                    lambda b: 1024 <= b["thinking"]["budget_tokens"] < b["max_tokens"]
                    and "temperature" not in b and b["tool_choice"] == {"type": "auto"}),
}


def params_fixed(gw: ServerProcess) -> float:
    return sum(v for labels, v in scrape(gw).get("gateway_sanitize_actions_total", {}).items()
               if ("action", "params_fixed") in labels)


@pytest.mark.parametrize("case", sorted(CASES))
def test_forbidden_thinking_params_are_repaired(sim: Sim, gateway: ServerProcess, case: str) -> None:
    params, check = CASES[case]
    body: dict[str, Any] = {"model": MODEL, "max_tokens": 4096, "thinking": {"type": "enabled", "budget_tokens": 2048},
                            "messages": [{"role": "user", "content": f"[[sim:tools=1]] params {case}"}], **params}
    rejected, fixed = sum(sim.stats()["rejections"].values()), params_fixed(gateway)
    with anthropic.Anthropic(base_url=gateway.url, api_key="sk-param-repair", max_retries=0) as client:
        answer = client.messages.create(**body)
    assert answer.content[0].type == "thinking"  # thinking stays on; only the parameters changed
    assert sum(sim.stats()["rejections"].values()) == rejected
    sent = sim.last()["body"]
    assert sent["thinking"]["type"] == "enabled" and check(sent), sent
    assert params_fixed(gateway) > fixed
