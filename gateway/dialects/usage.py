"""Token usage, from each upstream dialect's report into the canonical (Anthropic-shaped) usage, and out again as the
token counts the metrics count.

Canonical usage has Anthropic's meaning (the Messages API's ``usage``, https://docs.claude.com/en/api/messages; what
each upstream reports: docs/upstream-rules.md, "Usage"): ``input_tokens`` are the
prompt tokens that were neither read from nor written to the cache, ``cache_read_input_tokens`` and
``cache_creation_input_tokens`` the cached ones, ``output_tokens`` everything generated (thinking included). The
reasoning share of the output, which Anthropic does not report and OpenAI-compatible and Gemini upstreams do, rides
under the reserved key ``REASONING`` (a gateway key, like ``_provider``: no client encoder copies it).

- OpenAI chat completions ``usage``: ``prompt_tokens`` include ``prompt_tokens_details.cached_tokens``;
  ``completion_tokens`` include ``completion_tokens_details.reasoning_tokens``.
- Gemini ``usageMetadata``: ``promptTokenCount`` includes ``cachedContentTokenCount``; ``candidatesTokenCount``
  excludes ``thoughtsTokenCount``.
"""

from __future__ import annotations

from typing import Any

REASONING = "_reasoning_tokens"
# the token kinds counted (``gateway_tokens_total{type}``) and the canonical usage key each is read from
TOKEN_KEYS = {"input": "input_tokens", "output": "output_tokens", "cache_read": "cache_read_input_tokens",
              "cache_write": "cache_creation_input_tokens", "reasoning": REASONING}


def _n(obj: Any, key: str) -> int:
    v = obj.get(key) if isinstance(obj, dict) else None
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else 0


def from_openai(u: Any) -> dict[str, Any]:
    """An OpenAI-compatible ``usage`` object -> canonical usage."""
    cached = _n(u.get("prompt_tokens_details") if isinstance(u, dict) else None, "cached_tokens")
    out: dict[str, Any] = {"input_tokens": max(0, _n(u, "prompt_tokens") - cached),
                           "output_tokens": _n(u, "completion_tokens")}
    if cached:
        out["cache_read_input_tokens"] = cached
    details = u.get("completion_tokens_details") if isinstance(u, dict) else None
    if isinstance(details, dict) and "reasoning_tokens" in details:
        out[REASONING] = _n(details, "reasoning_tokens")
    return out


def from_gemini(meta: Any) -> dict[str, Any]:
    """A Gemini ``usageMetadata`` object -> canonical usage."""
    cached, thoughts = _n(meta, "cachedContentTokenCount"), _n(meta, "thoughtsTokenCount")
    out: dict[str, Any] = {"input_tokens": max(0, _n(meta, "promptTokenCount") - cached),
                           "output_tokens": _n(meta, "candidatesTokenCount") + thoughts,
                           "cache_read_input_tokens": cached}
    if isinstance(meta, dict) and "thoughtsTokenCount" in meta:
        out[REASONING] = thoughts
    return out


def token_counts(usage: Any) -> dict[str, int]:
    """Canonical usage -> the token kinds it reports (a kind it does not report is left out, not 0)."""
    if not isinstance(usage, dict):
        return {}
    return {kind: _n(usage, key) for kind, key in TOKEN_KEYS.items() if key in usage}
