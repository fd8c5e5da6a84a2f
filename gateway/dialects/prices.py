"""What a turn costs: a price table per model (USD per million tokens of input, output, cache reads and cache
writes; thinking is billed as output, where upstreams report it inside the output), first matching pattern wins.
The shipped table covers the models the simulator knows at the vendors' list prices when it was written; an operator
overrides it with a JSON file (``GATEWAY_PRICES_FILE``: ``[{"model": "claude-opus-*", "input": 5, "output": 25,
"cache_read": 0.5, "cache_write": 6.25}, ...]``, checked at startup), whose rows come first."""

from __future__ import annotations

import fnmatch
import json
from dataclasses import dataclass
from pathlib import Path

from gateway.dialects.canonical import token_counts

BILLED = ("input", "output", "cache_read", "cache_write")  # (reasoning is inside output)


@dataclass(frozen=True, slots=True)
class Price:
    model: str  # an fnmatch pattern
    input: float
    output: float
    cache_read: float = 0.0
    cache_write: float = 0.0


def _claude(pattern: str, inp: float, out: float) -> Price:
    return Price(pattern, inp, out, inp / 10, inp * 1.25)  # cache reads at 0.1x, 5-minute writes at 1.25x input


DEFAULT: tuple[Price, ...] = (
    _claude("claude-opus-4-5*", 5, 25), _claude("claude-opus-4-1*", 15, 75), _claude("claude-opus-4*", 15, 75),
    _claude("claude-opus-*", 5, 25), _claude("claude-sonnet-*", 3, 15), _claude("claude-haiku-4-5*", 1, 5),
    _claude("claude-haiku-*", 0.8, 4), _claude("*claude*", 3, 15),
    Price("gemini-*-pro*", 2, 12, 0.2), Price("*gemini-*-flash*", 0.3, 2.5, 0.03), Price("*gemini*", 2, 12, 0.2),
    Price("gpt-5*", 1.25, 10, 0.125), Price("deepseek-*", 0.28, 0.42, 0.028), Price("*", 3, 15),
)


def load(path: str | None) -> tuple[Price, ...]:
    """The table: an operator's file's rows, then the shipped ones. A malformed file is a ValueError."""
    if not path:
        return DEFAULT
    rows = json.loads(Path(path).read_text())
    if not isinstance(rows, list):
        raise ValueError("a JSON list of {model, input, output, cache_read, cache_write}")
    try:
        own = tuple(Price(str(r["model"]), *(float(r.get(k, 0)) for k in BILLED)) for r in rows)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise ValueError(f"a row without a model or with a price that is not a number ({e})") from None
    return own + DEFAULT


def cost_micros(table: tuple[Price, ...], model: str, usage: object) -> int:
    """The turn's cost in millionths of a dollar (the first row whose pattern matches ``model``)."""
    price = next((p for p in table if fnmatch.fnmatchcase(model, p.model)), None)
    if price is None:
        return 0
    counts = token_counts(usage)
    rates = {"input": price.input, "output": price.output, "cache_read": price.cache_read,
             "cache_write": price.cache_write}
    return round(sum(counts.get(kind, 0) * rate for kind, rate in rates.items()))


def billed_tokens(usage: object) -> int:
    """The tokens a turn counts against a key's tokens per minute: input, output (thinking included), cache."""
    counts = token_counts(usage)
    return sum(counts.get(kind, 0) for kind in BILLED)
