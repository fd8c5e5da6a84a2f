"""Every Anthropic rule of the simulator, sent through a real gateway.

Rules 1-4 (request parameters) pass through a gateway whose parameter repair is off:
the upstream's exact status, error text and request id come back unchanged. Rules
5-13 concern replayed history: the gateway's sanitizer exists to prevent them, so
the same requests sent through the gateway must reach the simulator in a form it
accepts (and straight to the simulator they are rejected with the exact text).
"""

from __future__ import annotations

import copy
from collections import Counter
from typing import Any

import httpx
import pytest

from tests.process_fixtures import GatewayFactory, ServerProcess, Sim
from thinkgate_sim.signing import Minter

KEY = {"x-api-key": "sk-test-rules", "anthropic-version": "2023-06-01"}
MODEL = "claude-opus-4-5"
FOREIGN = Minter(b"another-provider")
SIM_MINTER = Minter(b"thinkgate-sim")  # the simulator's default secret: mints blocks it accepts


def base(**kw: Any) -> dict[str, Any]:
    body = {"model": MODEL, "max_tokens": 4096, "thinking": {"type": "enabled", "budget_tokens": 2048},
            "messages": [{"role": "user", "content": "[[sim:tools=2]] go"}]}
    body.update(kw)
    return body


def tool_turn(thinking: dict[str, Any] | None, tid: str = "toolu_01A", first: str | None = None) -> list[dict]:
    content: list[dict[str, Any]] = []
    if thinking is not None:
        content.append(thinking)
    content.append({"type": "tool_use", "id": tid, "name": "get_weather", "input": {}})
    if first == "text":
        content.insert(0, {"type": "text", "text": "Checking."})
    return [{"role": "assistant", "content": content},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tid, "content": "sunny"}]}]


FORGED = {"type": "thinking", "thinking": "I think.", "signature": FOREIGN.mint_thinking(MODEL, "I think.", "m", 0)}

PARAM_RULES: dict[int, tuple[dict[str, Any], str]] = {
    1: (base(thinking={"type": "enabled", "budget_tokens": 100}), "greater than or equal to 1024"),
    2: (base(max_tokens=2048), "`max_tokens` must be greater than `thinking.budget_tokens`"),
    3: (base(tool_choice={"type": "any"}, tools=[{"name": "get_weather", "input_schema": {"type": "object"}}]),
        "Thinking may not be enabled when tool_choice forces tool use."),
    4: (base(temperature=0.2), "`temperature` may only be set to 1 when thinking is enabled"),
}


def history_rules() -> dict[int, dict[str, Any]]:
    u = [{"role": "user", "content": "[[sim:tools=2]] go"}]
    nosig = {"type": "thinking", "thinking": "I think."}
    return {
        5: base(messages=u + tool_turn(nosig)),
        6: base(messages=u + tool_turn(FORGED)),
        7: base(messages=[*u, {"role": "assistant", "content": [  # second block of a minted run dropped
            {"type": "thinking", "thinking": "one",
             "signature": SIM_MINTER.mint_thinking(MODEL, "one", "msg_r7", 0, run_pos=0, run_len=2)},
            {"type": "tool_use", "id": "toolu_01R7", "name": "get_weather", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01R7", "content": "x"}]}]),
        8: base(messages=u + tool_turn(FORGED, first="text")),
        9: base(messages=u + tool_turn(None)),
        10: {**base(messages=[*u, {"role": "assistant", "content": [FORGED, {"type": "text", "text": "x"}]}]),
             "thinking": {"type": "disabled"}},
        11: base(messages=[*u, {"role": "assistant", "content": [FORGED]}]),
        12: base(messages=[*u, tool_turn(FORGED)[0], {"role": "user", "content": "no results"}]),
        13: base(messages=[*u, {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_01Nobody", "content": "x"}]}]),
    }


# The exact texts of ../shared/reference/protocols.md ("Rules a strict upstream simulator must enforce"),
# filled in for the bodies above: the offending block is always messages.1.content.0.
HISTORY_ERRORS: dict[int, str] = {
    5: "messages.1.content.0.thinking.signature: Field required",
    6: "messages.1.content.0: Invalid `signature` in `thinking` block",
    7: "messages.1.content.0: `thinking` or `redacted_thinking` blocks in the latest assistant message cannot be "
       "modified. These blocks must remain as they were in the original response.",
    8: "messages.1.content.0: If an assistant message contains any thinking blocks, the first block must be "
       "thinking or redacted_thinking. Found text.",
    9: "messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found `tool_use`. When "
       "`thinking` is enabled, a final `assistant` message must start with a thinking block (preceeding the "
       "lastmost set of `tool_use` and `tool_result` blocks). We recommend you include thinking blocks from "
       "previous turns. To avoid this requirement, disable `thinking`. Please consult our documentation at "
       "https://docs.claude.com/en/docs/build-with-claude/extended-thinking",
    10: "messages.1.content.0: When thinking is disabled, an `assistant` message in the final position cannot "
        "contain `thinking`. To use thinking blocks, enable `thinking` in your request.",
    11: "messages.1: The final block in an assistant message cannot be `thinking`.",
    12: "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_01A. Each "
        "`tool_use` block must have a corresponding `tool_result` block in the next message.",
    13: "messages.1.content.0: unexpected `tool_use_id` found in `tool_result` blocks: toolu_01Nobody. Each "
        "`tool_result` block must have a corresponding `tool_use` block in the previous message.",
}


def test_every_history_rule_has_its_expected_error() -> None:
    assert sorted(HISTORY_ERRORS) == sorted(history_rules())


@pytest.fixture(scope="module")
def passthrough_gateway(sim: Sim, gateways: GatewayFactory) -> ServerProcess:
    return gateways.start(sim.url, {"GATEWAY_FIX_THINKING_PARAMS": "false"})


@pytest.mark.parametrize("rule", sorted(PARAM_RULES))
def test_param_rule_error_comes_back_unchanged(rule: int, sim: Sim, passthrough_gateway: ServerProcess) -> None:
    body, phrase = PARAM_RULES[rule]
    direct = httpx.post(sim.url + "/v1/messages", json=body, headers=KEY)
    via = httpx.post(passthrough_gateway.url + "/v1/messages", json=body, headers=KEY)
    assert direct.status_code == via.status_code == 400
    assert phrase in via.json()["error"]["message"]
    assert via.json()["error"] == direct.json()["error"]
    assert via.headers["request-id"] == via.json()["request_id"]


@pytest.mark.parametrize("rule", sorted(history_rules()))
def test_history_rule_is_prevented_by_the_gateway(rule: int, sim: Sim, gateway: ServerProcess) -> None:
    body = history_rules()[rule]
    rejected_before = sim.stats()["rejections"]
    direct = httpx.post(sim.url + "/v1/messages", json=copy.deepcopy(body), headers=KEY)
    assert direct.status_code == 400, direct.text
    assert direct.json()["error"] == {"type": "invalid_request_error", "message": HISTORY_ERRORS[rule]}
    rejected_direct = sim.stats()["rejections"]
    assert Counter(rejected_direct) - Counter(rejected_before) == Counter({str(rule): 1})  # this rule, no other
    via = httpx.post(gateway.url + "/v1/messages", json=body, headers=KEY)
    assert via.status_code == 200, via.text
    assert sim.stats()["rejections"] == rejected_direct  # the repaired request broke no rule at all
