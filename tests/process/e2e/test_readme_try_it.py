"""README "Try it locally", run as written: its first block starts ``thinkgate sim`` and ``thinkgate serve`` (the
ports swapped for free ones), then every family's ``curl`` block is run through ``bash`` against them. Each answer
must be that family's answer with a tool call (``sim --tools 1``, no marker), and the gateway's access lines must
name every upstream the recipe routes to."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.dialects.routing import FLAVORS, KINDS
from tests.process_fixtures import ServerProcess, free_port
from tests.support.e2e.readme import blocks, commands, section, start_command, wait_ready

# the README's label of each family's block -> (the upstream its access line names, how its answer shows a call)
FAMILIES = {"Anthropic": "anthropic", "Gemini": "gemini", "OpenRouter-style": "openai",
            "Copilot-style": "copilot", "DeepSeek-style": "deepseek"}
# what the README says each OpenAI-style answer carries (issue 34 item 2: run verbatim, the OpenRouter one did not)
CARRIES = {"OpenRouter-style": ("reasoning_details",), "Copilot-style": ("reasoning_opaque", "reasoning_text"),
           "DeepSeek-style": ("reasoning_content",)}

pytestmark = [pytest.mark.process,
              pytest.mark.skipif(shutil.which("curl") is None, reason="the recipe calls curl")]


@pytest.fixture
def recipe() -> Iterator[tuple[dict[str, str], list[tuple[str, str]], ServerProcess]]:
    found = blocks(section("try-it"))
    ports = {"8090": str(free_port()), "8080": str(free_port())}

    def local(code: str) -> str:
        return re.sub(r"\b(8090|8080)\b", lambda m: ports[m[1]], code)

    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
               PYTHONUNBUFFERED="1")
    started: list[ServerProcess] = []
    try:
        start = commands(local(found[0][1]))
        assert [c.split()[0:2] for c in start if not c.startswith("GATEWAY_")] == [["thinkgate", "sim"]]
        for cmd in start:
            assert cmd.endswith("&"), f"the start block runs its servers in the background: {cmd!r}"
            started.append(start_command("sim" if " sim " in cmd else "gateway", cmd, env))
        sim, gateway = started
        wait_ready(sim, "/_sim/stats")
        wait_ready(gateway, "/readyz")
        yield env, [(label, local(code)) for label, code in found[1:]], gateway
    finally:
        for sp in started:
            sp.stop()
            os.unlink(sp.log_path)


def tool_call(family: str, answer: dict[str, Any]) -> str | None:
    """The name of the first tool the answer calls, in the family's own shape."""
    if family == "Anthropic":
        return next((b["name"] for b in answer["content"] if b["type"] == "tool_use"), None)
    if family == "Gemini":
        parts = answer["candidates"][0]["content"]["parts"]
        return next((p["functionCall"]["name"] for p in parts if "functionCall" in p), None)
    calls = answer["choices"][0]["message"].get("tool_calls") or []
    return calls[0]["function"]["name"] if calls else None


def test_readme_try_it_recipe_runs_for_every_upstream_family(recipe: Any) -> None:
    env, calls, gateway = recipe
    labels = [label for label, _ in calls]
    assert labels == list(FAMILIES), labels
    # every upstream kind and every OpenAI-compatible flavor but the generic one has its recipe
    assert set(FAMILIES.values()) - {"openai"} | {"openrouter"} == set(KINDS) - {"openai"} | set(FLAVORS) - {"generic"}
    for label, code in calls:
        done = subprocess.run(["bash", "-c", code], env=env, capture_output=True, text=True, timeout=30, check=False)
        assert done.returncode == 0, (label, done.stderr)
        answer = json.loads(done.stdout)
        assert "error" not in answer, (label, answer)
        if label in CARRIES:
            said = section("try-it").split(f"{label} (", 1)[1].split("```", 1)[0]
            assert all(f"`{field}`" in said for field in CARRIES[label]), (label, said)
            message = answer["choices"][0]["message"]
            assert all(message.get(field) for field in CARRIES[label]), (label, message)
        assert tool_call(label, answer) == "get_weather", (label, answer)
    # issue 34 item 1: the model list a client's picker shows holds what each upstream lists (it was empty: the
    # simulator's OpenAI-compatible profiles had no list), and a listed model can be looked up
    listed = json.loads(subprocess.run(["bash", "-c", f"curl -sS {gateway.url}/v1/models -H 'authorization: Bearer k'"],
                                       env=env, capture_output=True, text=True, timeout=30, check=True).stdout)
    ids = {m["id"] for m in listed["data"]}
    assert {"gpt-5", "deepseek-reasoner", "google/gemini-3-pro-preview"} <= ids, ids
    found = subprocess.run(["bash", "-c", f"curl -sS {gateway.url}/v1/models/gpt-5 -H 'authorization: Bearer k'"],
                           env=env, capture_output=True, text=True, timeout=30, check=True).stdout
    assert json.loads(found)["id"] == "gpt-5", found
    gateway.stop()  # each access line is written just after its answer went out: once drained, all are there
    upstreams = re.findall(r"thinkgate\.access request .* upstream=(\w+) upstream_status=200 status=200",
                           gateway.log())
    assert upstreams == list(FAMILIES.values()), gateway.log()
    banner = next(line for line in gateway.log().splitlines() if "starting thinkgate" in line)
    for url in ("/openrouter/api/v1", "/copilot", "/deepseek/v1"):
        assert url in banner
