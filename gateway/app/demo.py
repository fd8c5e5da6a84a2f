"""``thinkgate demo``: a mangling IDE client, first straight to the simulator, then through thinkgate.

Everything runs in this process on loopback ports: the strict simulator, the gateway
(embedded store) and a Cursor-like client that replays history the way IDEs do
(signatures stripped, thinking text trimmed, CRLF turned into LF).
"""

from __future__ import annotations

import asyncio
import socket
from dataclasses import dataclass
from typing import Any

import aiohttp
from hypercorn.asyncio import serve
from hypercorn.config import Config

from gateway.app.factory import create_app
from gateway.app.settings import Settings
from thinkgate_sim.app import SimConfig, create_sim_app

PROMPT = "[[sim:tools=3]] What's the weather in Paris, Rome and Oslo?"
TOOLS = [{"name": "get_weather", "description": "Weather for a city",
          "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]


@dataclass
class Outcome:
    label: str
    turns_completed: int = 0
    rejected: int = 0
    thinking_kept: int = 0
    requests: int = 0
    last_error: str = ""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def mangle_like_an_ide(content: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for b in content:
        if b.get("type") == "thinking":
            out.append({"type": "thinking", "thinking": b.get("thinking", "").replace("\r\n", "\n").strip()})
        else:
            out.append(b)
    return out


async def play(session: aiohttp.ClientSession, base_url: str, label: str) -> Outcome:
    outcome = Outcome(label)
    history: list[dict[str, Any]] = [{"role": "user", "content": PROMPT}]
    headers = {"x-api-key": "sk-demo", "anthropic-version": "2023-06-01",
               "anthropic-beta": "interleaved-thinking-2025-05-14"}
    for _ in range(6):
        body = {"model": "claude-sonnet-4-6", "max_tokens": 4096, "tools": TOOLS,
                "thinking": {"type": "enabled", "budget_tokens": 2048}, "messages": history}
        outcome.requests += 1
        async with session.post(base_url + "/v1/messages", json=body, headers=headers) as r:
            data = await r.json(content_type=None)
            if r.status != 200:
                outcome.rejected += 1
                outcome.last_error = str(data.get("error", {}).get("message", ""))[:90]
                return outcome
        outcome.turns_completed += 1
        content = data["content"]
        if content and content[0].get("type") == "thinking":
            outcome.thinking_kept += 1
        if data.get("stop_reason") != "tool_use":
            return outcome
        history.append({"role": "assistant", "content": mangle_like_an_ide(content)})
        history.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": b["id"], "content": "sunny, 21°C"}
            for b in content if b.get("type") == "tool_use"]})
    return outcome


async def _main() -> int:
    sim_port, gw_port = _free_port(), _free_port()
    stop = asyncio.Event()
    sim_cfg, gw_cfg = Config(), Config()
    sim_cfg.bind, gw_cfg.bind = [f"127.0.0.1:{sim_port}"], [f"127.0.0.1:{gw_port}"]
    sim_cfg.accesslog = gw_cfg.accesslog = None
    sim_cfg.errorlog = gw_cfg.errorlog = None
    settings = Settings(anthropic_base_url=f"http://127.0.0.1:{sim_port}")
    servers = [
        asyncio.create_task(serve(create_sim_app(SimConfig()), sim_cfg, shutdown_trigger=stop.wait)),  # type: ignore[arg-type]
        asyncio.create_task(serve(create_app(settings), gw_cfg, shutdown_trigger=stop.wait)),  # type: ignore[arg-type]
    ]
    try:
        async with aiohttp.ClientSession() as session:
            for url in (f"http://127.0.0.1:{sim_port}/_sim/stats", f"http://127.0.0.1:{gw_port}/healthz"):
                for _ in range(200):
                    try:
                        async with session.get(url) as r:
                            if r.status == 200:
                                break
                    except aiohttp.ClientError:
                        await asyncio.sleep(0.02)
            direct = await play(session, f"http://127.0.0.1:{sim_port}", "direct to upstream")
            via = await play(session, f"http://127.0.0.1:{gw_port}", "through thinkgate")
    finally:
        stop.set()
        await asyncio.gather(*servers, return_exceptions=True)
    print("A Cursor-like client strips signatures and trims thinking on every replayed turn.\n")
    print(f"{'path':<22} {'requests':>8} {'turns ok':>8} {'400s':>5} {'thinking kept':>13}")
    for o in (direct, via):
        print(f"{o.label:<22} {o.requests:>8} {o.turns_completed:>8} {o.rejected:>5} {o.thinking_kept:>13}")
    if direct.last_error:
        print(f"\nupstream said (direct): {direct.last_error}...")
    return 0 if via.rejected == 0 else 1


def run_demo() -> int:
    return asyncio.run(_main())
