"""Concurrent tool-loop conversations with the official anthropic SDK (one thread each), and the
gateway's structured access log read back (``GATEWAY_LOG_FORMAT=json``, ``GATEWAY_LOG_LEVEL=INFO``).

Each thread plays conversation after conversation (``[[sim:tools=N]]``, thinking on, the full
history replayed with its signatures, the conversation id sent back in ``x-ag-conversation-id``)
until ``stop`` is set; it never retries, so every failure is counted.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import anthropic

from tests.support.e2e.helpers import WEATHER_TOOL, block_dicts, send, tool_results

MODEL = "claude-opus-4-5"
THINKING = {"type": "enabled", "budget_tokens": 2048}
BETA = {"anthropic-beta": "interleaved-thinking-2025-05-14"}
SCID = "x-ag-conversation-id"


@dataclass
class Worker:
    index: int
    requests: int = 0
    conversations: int = 0
    finished: int = 0
    thinking_answers: int = 0
    errors: list[str] = field(default_factory=list)
    done_at: list[float] = field(default_factory=list)  # wall time of each answer


def _one_conversation(client: anthropic.Anthropic, w: Worker, stream: bool, rounds: int, stop: threading.Event,
                      tag: str) -> None:
    history: list[dict[str, Any]] = [
        {"role": "user", "content": f"[[sim:tools={rounds}]] weather? {tag} worker {w.index} conv {w.conversations}"}]
    scid: str | None = None
    w.conversations += 1
    for _ in range(rounds + 1):
        params: dict[str, Any] = {"model": MODEL, "max_tokens": 4096, "tools": [WEATHER_TOOL], "thinking": THINKING,
                                  "messages": history, "extra_headers": {SCID: scid} if scid else {}}
        w.requests += 1
        try:
            answer, headers = send(client, params, stream=stream)
        except Exception as e:  # every failure is the finding: record it, start a new conversation
            w.errors.append(f"{type(e).__name__}: {str(e)[:200]}")
            return
        w.done_at.append(time.time())
        scid = headers.get(SCID)
        if answer.content and answer.content[0].type == "thinking":
            w.thinking_answers += 1
        if answer.stop_reason != "tool_use":
            w.finished += 1
            return
        if stop.is_set():
            return
        history = [*history, {"role": "assistant", "content": block_dicts(answer)},
                   {"role": "user", "content": tool_results(answer)}]


def run_loops(url: str, n: int, stop: threading.Event, *, key: str, rounds: int = 3, tag: str = "",
              max_seconds: float = 45.0) -> tuple[list[Worker], list[threading.Thread]]:
    """Start ``n`` threads playing tool loops against ``url`` until ``stop`` (or ``max_seconds``)."""
    workers = [Worker(i) for i in range(n)]
    deadline = time.monotonic() + max_seconds

    def play(w: Worker) -> None:
        client = anthropic.Anthropic(base_url=url, api_key=key, max_retries=0, timeout=20, default_headers=BETA)
        try:
            while not stop.is_set() and time.monotonic() < deadline:
                _one_conversation(client, w, w.index % 2 == 0, rounds, stop, tag)
        finally:
            client.close()

    threads = [threading.Thread(target=play, args=(w,), daemon=True) for w in workers]
    for t in threads:
        t.start()
    return workers, threads


def access_lines(lines: list[str]) -> list[dict[str, Any]]:
    """The gateway's access-log lines (JSON format) among a process's complete log lines
    (``ServerProcess.log_lines``), each with ``t`` = its wall time (epoch seconds)."""
    out = []
    for line in lines:
        if not line.startswith("{"):
            continue
        rec = json.loads(line)
        if rec.get("logger") == "thinkgate.access":
            rec["t"] = datetime.fromisoformat(rec["ts"]).timestamp()
            out.append(rec)
    return out
