"""What keeping the client's bytes costs a same-dialect request (``gateway.dialects.client_json.splice``), against
encoding the decided body whole (``orjson.dumps``, what a same-dialect body cost before), in the same run.

    python bench/client_json.py [--turns 10,100,500] [--repeat 200]

The body: a chat completions tool loop of N turns (3 KB tool results, 500-character reasoning with a signature on
every assistant message), with tools, sampling and stream fields; thinkgate's decision replaces ``messages`` and
``stream_options`` and passes the rest. Prints microseconds per body and the ratio to the baseline.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.latency import median_us
from gateway.dialects.client_json import splice


def body(turns: int) -> dict[str, Any]:
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "x" * 3000}]
    for i in range(turns):
        msgs.append({"role": "assistant", "content": None, "reasoning_details": [
            {"type": "reasoning.text", "text": "t" * 500, "signature": "s" * 200}],
            "tool_calls": [{"id": f"c{i}", "type": "function", "function": {"name": "f", "arguments": '{"a":1}'}}]})
        msgs.append({"role": "tool", "tool_call_id": f"c{i}", "content": "y" * 3000})
    return {"model": "m", "messages": msgs, "temperature": 0.5, "stream": True,
            "stream_options": {"include_usage": False}, "reasoning_effort": "low", "metadata": {"run": "bench"},
            "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--turns", default="10,100,500")
    ap.add_argument("--repeat", type=int, default=1000)
    args = ap.parse_args()
    print("| turns | body | encode whole (baseline) | splice | ratio |")
    print("|---:|---:|---:|---:|---:|")
    for turns in (int(t) for t in args.turns.split(",")):
        sent = body(turns)
        raw = orjson.dumps(sent)
        client = {k: (None if k == "messages" else v) for k, v in orjson.loads(raw).items()}
        out = {**client, "messages": sent["messages"], "stream_options": {"include_usage": True}}
        assert orjson.loads(splice(raw, client, out, "messages")) == orjson.loads(orjson.dumps(out))
        repeat = max(10, args.repeat * 10 // max(turns, 10))
        base = median_us(lambda: orjson.dumps(out), repeat)  # noqa: B023
        spliced = median_us(lambda: splice(raw, client, out, "messages"), repeat)  # noqa: B023
        print(f"| {turns} | {len(raw) / 1024:.0f} KB | {base:.0f} us | {spliced:.0f} us | {spliced / base:.2f}x |")


if __name__ == "__main__":
    main()
