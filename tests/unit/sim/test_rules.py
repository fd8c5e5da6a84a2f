"""One test per Anthropic rule 1-13: exact status, error type and message text, through the HTTP app."""

from __future__ import annotations

import copy
from typing import Any

import httpx
import orjson

from tests.support.sim.helpers import INTERLEAVED, answer, history, post, rejection, request, run_loop, tool_results
from thinkgate_sim.rules import check_messages_request
from thinkgate_sim.signing import Minter

INVALID_REQUEST = "invalid_request_error"


async def assert_rejected(client: httpx.AsyncClient, body: dict[str, Any], message: str,
                          headers: dict[str, str] | None = None) -> None:
    assert await rejection(client, body, headers) == (400, INVALID_REQUEST, message)


async def test_rule_1_budget_below_1024(client: httpx.AsyncClient) -> None:
    body = request("hi")
    body["thinking"]["budget_tokens"] = 1023
    await assert_rejected(client, body,
                          "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024")


async def test_rule_2_max_tokens_not_above_budget(client: httpx.AsyncClient) -> None:
    body = request("hi", max_tokens=2048)
    await assert_rejected(client, body, (
        "`max_tokens` must be greater than `thinking.budget_tokens`. Please consult our documentation at "
        "https://docs.claude.com/en/docs/build-with-claude/extended-thinking#max-tokens-and-context-window-size"))
    assert (await post(client, body, INTERLEAVED)).status_code == 200  # the beta lifts the limit


async def test_rule_3_forced_tool_choice(client: httpx.AsyncClient) -> None:
    for mode in ("enabled", "adaptive"):
        for choice in ({"type": "any"}, {"type": "tool", "name": "get_weather"}):
            await assert_rejected(client, request("hi", thinking=mode, tool_choice=choice),
                                  "Thinking may not be enabled when tool_choice forces tool use.")
    assert (await post(client, request("hi", tool_choice={"type": "auto"}))).status_code == 200
    assert (await post(client, request("hi", thinking=None, tool_choice={"type": "any"}))).status_code == 200


async def test_rule_4_temperature(client: httpx.AsyncClient) -> None:
    await assert_rejected(client, request("hi", temperature=0.5), (
        "`temperature` may only be set to 1 when thinking is enabled. Please consult our documentation at "
        "https://docs.anthropic.com/en/docs/build-with-claude/extended-thinking"
        "#important-considerations-when-using-extended-thinking"))
    await assert_rejected(client, request("hi", thinking="adaptive", temperature=0),
                          "temperature may only be set to 1 when thinking is enabled or in adaptive mode")
    assert (await post(client, request("hi", temperature=1))).status_code == 200
    assert (await post(client, request("hi", thinking=None, temperature=0.2))).status_code == 200


async def test_rule_5_missing_signature(client: httpx.AsyncClient) -> None:
    body = await history(client, request("q [[sim:tools=1]]"), 1)
    del body["messages"][1]["content"][0]["signature"]
    await assert_rejected(client, body, "messages.1.content.0.thinking.signature: Field required")


async def test_rule_6_invalid_signature_in_latest_message(client: httpx.AsyncClient) -> None:
    body = await history(client, request("q [[sim:tools=2]]"), 1)
    block = body["messages"][1]["content"][0]
    block["thinking"] = block["thinking"].replace("\r\n", "\n")
    await assert_rejected(client, body, "messages.1.content.0: Invalid `signature` in `thinking` block")


async def test_rule_6_checks_older_turns_with_raw_indices(client: httpx.AsyncClient) -> None:
    body = await history(client, request("q [[sim:tools=2]]"), 2)  # [u, a(thinking), u, a, u]
    body["messages"].insert(1, {"role": "system", "content": "Claude Code puts one here"})  # (never first)
    body["messages"][2]["content"][0]["signature"] = "EqQBforged"
    await assert_rejected(client, body, "messages.2.content.0: Invalid `signature` in `thinking` block")


async def test_rule_6_forged_redacted_data(client: httpx.AsyncClient) -> None:
    body = await history(client, request("q [[sim:tools=2]] [[sim:redacted]]"), 2)
    body["messages"][1]["content"][1]["data"] = "EmwKAhgBEgy3forged"
    await assert_rejected(client, body, "messages.1.content.1: Invalid `signature` in `thinking` block")


async def test_rule_6_strict_and_relaxed_older_turns(client: httpx.AsyncClient, minter: Minter) -> None:
    body, replies = await run_loop(client, request("q [[sim:tools=1]]"))
    body["messages"].append({"role": "assistant", "content": replies[-1]["content"]})
    body["messages"].append({"role": "user", "content": "next question"})
    body["messages"][1]["content"][0]["thinking"] += " "  # an older turn, tampered
    strict = check_messages_request(body, betas=frozenset(), minter=minter)
    assert strict is not None and strict.rule == 6
    assert strict.message == "messages.1.content.0: Invalid `signature` in `thinking` block"
    assert check_messages_request(body, betas=frozenset(), minter=minter, strict_older_turns=False) is None


MSG_7 = ("messages.1.content.{j}: `thinking` or `redacted_thinking` blocks in the latest assistant message "
         "cannot be modified. These blocks must remain as they were in the original response.")


async def test_rule_7_latest_message_thinking_run_modified(client: httpx.AsyncClient) -> None:
    base = await history(client, request("q [[sim:tools=2]] [[sim:redacted]]"), 1)
    assert [b["type"] for b in base["messages"][1]["content"]][:2] == ["thinking", "redacted_thinking"]
    assert (await post(client, base)).status_code == 200

    def variant(fn: Any) -> dict[str, Any]:
        body = copy.deepcopy(base)
        body["messages"][1]["content"] = fn(body["messages"][1]["content"])
        return body

    swapped = variant(lambda c: [c[1], c[0], *c[2:]])
    dropped_redacted = variant(lambda c: [c[0], *c[2:]])
    dropped_thinking = variant(lambda c: c[1:])

    def edit(c: list[dict[str, Any]]) -> list[dict[str, Any]]:
        c[0]["thinking"] = c[0]["thinking"].rstrip()
        return c

    for body in (swapped, dropped_redacted, dropped_thinking, variant(edit)):
        await assert_rejected(client, body, MSG_7.format(j=0))


async def test_rule_8_thinking_not_first(client: httpx.AsyncClient) -> None:
    body = await history(client, request("q [[sim:tools=2]]"), 1)
    content = body["messages"][1]["content"]
    body["messages"][1]["content"] = [content[1], content[0], *content[2:]]  # text, thinking, tool_use
    await assert_rejected(client, body, (
        "messages.1.content.0: If an assistant message contains any thinking blocks, the first block "
        "must be thinking or redacted_thinking. Found text."))


MSG_9 = ("messages.{i}.content.0.type: Expected `thinking` or `redacted_thinking`, but found `{type}`. "
         "When `thinking` is enabled, a final `assistant` message must start with a thinking block "
         "(preceeding the lastmost set of `tool_use` and `tool_result` blocks). We recommend you include "
         "thinking blocks from previous turns. To avoid this requirement, disable `thinking`. Please consult "
         "our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking")


async def test_rule_9_tool_loop_opener_without_thinking(client: httpx.AsyncClient) -> None:
    body = await history(client, request("q [[sim:tools=3]]"), 2)
    without = copy.deepcopy(body)
    without["messages"][1]["content"] = without["messages"][1]["content"][1:]
    await assert_rejected(client, without, MSG_9.format(i=1, type="text"))
    tool_only = copy.deepcopy(body)
    tool_only["messages"][1]["content"] = tool_only["messages"][1]["content"][2:]
    await assert_rejected(client, tool_only, MSG_9.format(i=1, type="tool_use"))
    # without thinking the same history is fine (older thinking blocks are stripped)
    assert (await post(client, {**without, "thinking": {"type": "disabled"}})).status_code == 200


async def test_rule_10_prefill_with_thinking_when_disabled(client: httpx.AsyncClient) -> None:
    reply = await answer(client, request("q"))
    for thinking in (None, "disabled"):
        body = request("q", thinking=thinking)
        body["messages"].append({"role": "assistant", "content": reply["content"]})
        await assert_rejected(client, body, (
            "messages.1.content.0: When thinking is disabled, an `assistant` message in the final position "
            "cannot contain `thinking`. To use thinking blocks, enable `thinking` in your request."))


async def test_rule_11_final_block_thinking(client: httpx.AsyncClient) -> None:
    reply = await answer(client, request("q"))
    body = request("q")
    body["messages"].append({"role": "assistant", "content": reply["content"][:1]})
    await assert_rejected(client, body, "messages.1: The final block in an assistant message cannot be `thinking`.")


MSG_12 = ("messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: {ids}. "
          "Each `tool_use` block must have a corresponding `tool_result` block in the next message.")


async def test_rule_12_tool_use_without_result(client: httpx.AsyncClient) -> None:
    base = request("q [[sim:tools=1]] [[sim:parallel=2]]")
    reply = await answer(client, base)
    ids = [b["id"] for b in reply["content"] if b["type"] == "tool_use"]
    body = copy.deepcopy(base)
    body["messages"].append({"role": "assistant", "content": reply["content"]})
    results = tool_results(reply)
    body["messages"].append({"role": "user", "content": results["content"][:1]})
    await assert_rejected(client, body, MSG_12.format(ids=ids[1]))
    body["messages"][-1] = {"role": "user", "content": "never mind"}
    await assert_rejected(client, body, MSG_12.format(ids=", ".join(ids)))


async def test_rule_13_unexpected_tool_result(client: httpx.AsyncClient) -> None:
    body = await history(client, request("q [[sim:tools=2]]"), 1)
    body["messages"][2]["content"].append({"type": "tool_result", "tool_use_id": "toolu_01Stale0000000000000000",
                                           "content": "old"})
    await assert_rejected(client, body, (
        "messages.2.content.1: unexpected `tool_use_id` found in `tool_result` blocks: "
        "toolu_01Stale0000000000000000. Each `tool_result` block must have a corresponding `tool_use` "
        "block in the previous message."))
    orphan = request("q")
    orphan["messages"][0]["content"] = [{"type": "tool_result", "tool_use_id": "toolu_01X", "content": "x"},
                                        {"type": "text", "text": "q"}]
    await assert_rejected(client, orphan, (
        "messages.0.content.0: unexpected `tool_use_id` found in `tool_result` blocks: toolu_01X. Each "
        "`tool_result` block must have a corresponding `tool_use` block in the previous message."))


async def test_rule_108_tool_names_must_be_unique(client: httpx.AsyncClient) -> None:
    """Two ``tools`` entries with one name: the API's ``tools: Tool names must be unique.`` (docs/upstream-rules.md);
    distinct names pass."""
    tool = {"name": "get_weather", "input_schema": {"type": "object", "properties": {}}}
    await assert_rejected(client, request("hi", tools=[tool, {**tool, "description": "again"}]),
                          "tools: Tool names must be unique.")
    assert (await client.get("/_sim/stats")).json()["rejections"] == {"108": 1}
    ok = await post(client, request("hi", tools=[tool, {**tool, "name": "get_time"}]))
    assert ok.status_code == 200, ok.text


MSG_DUP = "messages.{i}.content.{j}: `tool_use` ids must be unique"


def _tool_use_positions(message: dict[str, Any]) -> list[int]:
    return [j for j, b in enumerate(message["content"]) if b["type"] == "tool_use"]


async def test_duplicate_tool_use_id_across_turns(client: httpx.AsyncClient) -> None:
    """Two assistant messages carrying the same tool_use id (what a replay that restores one turn twice
    sends): reported at the second occurrence, even though every pairing is satisfied."""
    body = await history(client, request("q [[sim:tools=3]]"), 2)  # [u, a, u(results), a, u(results)]
    first = body["messages"][1]["content"][_tool_use_positions(body["messages"][1])[0]]["id"]
    j = _tool_use_positions(body["messages"][3])[0]
    body["messages"][3]["content"][j]["id"] = first
    body["messages"][4]["content"][0]["tool_use_id"] = first
    await assert_rejected(client, body, MSG_DUP.format(i=3, j=j))
    stats = (await client.get("/_sim/stats")).json()
    assert stats["rejections"] == {"102": 1}


async def test_duplicate_tool_use_id_in_one_message(client: httpx.AsyncClient) -> None:
    body = await history(client, request("q [[sim:tools=2]] [[sim:parallel=2]]"), 1)
    j1, j2 = _tool_use_positions(body["messages"][1])
    content = body["messages"][1]["content"]
    content[j2]["id"] = content[j1]["id"]
    body["messages"][2]["content"][1]["tool_use_id"] = content[j1]["id"]
    await assert_rejected(client, body, MSG_DUP.format(i=1, j=j2))


async def test_duplicate_tool_use_id_comes_before_pairing_and_signatures(client: httpx.AsyncClient,
                                                                          minter: Minter) -> None:
    body = await history(client, request("q [[sim:tools=3]]"), 2)
    body["messages"].insert(1, {"role": "system", "content": "raw indices count this one"})
    first = body["messages"][2]["content"][_tool_use_positions(body["messages"][2])[0]]["id"]
    j = _tool_use_positions(body["messages"][4])[0]
    body["messages"][4]["content"][j]["id"] = first  # its own id is now unanswered (rule 12)
    body["messages"][2]["content"][0]["signature"] = "EqQBforged"  # and rule 6
    violation = check_messages_request(body, betas=frozenset(), minter=minter)
    assert violation is not None and (violation.rule, violation.message) == (102, MSG_DUP.format(i=4, j=j))
    body["messages"][4]["content"][j]["id"] = "toolu_01Fresh000000000000000"  # ids unique again
    violation = check_messages_request(body, betas=frozenset(), minter=minter)
    assert violation is not None and violation.rule == 12


async def test_duplicate_tool_call_id_relayed_by_openrouter_for_anthropic_models(client: httpx.AsyncClient) -> None:
    """OpenRouter relays Anthropic's 400 in its ``Provider returned error`` envelope; other models and
    other profiles do not check ids."""
    call = {"id": "toolu_01Same", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "q"},
                {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "toolu_01Same", "content": "1"},
                {"role": "user", "content": "again"},
                {"role": "assistant", "content": "Once more.", "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "toolu_01Same", "content": "2"}]
    auth = {"authorization": "Bearer sk-test"}
    resp = await client.post("/openrouter/api/v1/chat/completions", headers=auth,
                             json={"model": "anthropic/claude-sonnet-4.5", "messages": messages})
    assert resp.status_code == 400
    error = resp.json()["error"]
    assert (error["message"], error["code"], error["metadata"]["provider_name"]) == (
        "Provider returned error", 400, "Anthropic")
    assert orjson.loads(error["metadata"]["raw"]) == {"type": "error", "error": {
        "type": "invalid_request_error", "message": MSG_DUP.format(i=3, j=1)}}
    assert (await client.get("/_sim/stats")).json()["rejections"] == {"compat-102": 1}
    for path, model in (("/openrouter/api/v1/chat/completions", "google/gemini-3-pro-preview"),
                        ("/deepseek/v1/chat/completions", "deepseek-reasoner"),
                        ("/copilot/chat/completions", "copilot/claude-sonnet-4.5")):
        resp = await client.post(path, headers=auth, json={"model": model, "messages": messages})
        assert resp.status_code == 200, (path, resp.text)
