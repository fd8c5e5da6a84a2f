"""The upstream-error classifier: an error body (or in-stream ``error`` event) -> one closed kind.

One ordered table of patterns (``PATTERNS``) over the real error texts collected in
``docs``' protocol reference (Anthropic E1-E12, Gemini ``thought_signature`` in its AI Studio
and Vertex forms, OpenRouter "reasoning details to be preserved", DeepSeek ``reasoning_content``,
Copilot relaying the Vertex text). The first pattern that matches wins, so wrappers that quote
an inner error (OpenRouter's ``Upstream error: {...}``) are classified by the outer, more
specific text first.

Envelopes are unwrapped before matching, whatever nests in whatever:

- Anthropic ``{"type":"error","error":{"type","message"}}`` (also through Vertex, ``req_vrtx_``);
- Google ``{"error":{"code","message","status"}}`` and the OpenAI-compat array ``[{"error":{...}}]``;
- OpenAI-compatible ``{"error":{"message","type","code","param"}}``;
- OpenRouter ``{"error":{"message":"Provider returned error","metadata":{"raw":"<JSON or text>"}}}``;
- any message string that is itself JSON, or text followed by a JSON object, is decoded too.

Pure: no I/O, no metrics. ``classify(status, body)`` for HTTP bodies, ``classify_event(error)``
for the ``error`` object of an in-stream event.
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

from gateway.dialects import registry

KINDS: tuple[str, ...] = (
    "binding_mismatch",            # a thinking block bound to a different conversation (prefix binding, 1.8, 1.9)
    "invalid_signature",           # Anthropic signature invalid, forged, foreign, missing (E2, E3, rule 15)
    "thinking_block_in_disabled",  # thinking in a final assistant message while thinking is off (E6)
    "first_block_not_thinking",    # the loop's assistant message / a thinking message does not start with it (E1, E5)
    "thinking_modified",           # latest thinking blocks altered (E4) or a trailing thinking block (E7)
    "missing_thought_signature",   # Gemini thought_signature missing/corrupt (AI Studio, Vertex, Copilot)
    "reasoning_not_preserved",     # OpenRouter reasoning_details / DeepSeek reasoning_content not sent back
    "tool_chain",                  # tool_use/tool_result pairing (E8, E9, E9b; OpenAI and Gemini forms)
    "params",                      # parameters thinking forbids or requires (E10, E11, E12, budget minimum)
    "overloaded",
    "rate_limited",
    "other",
)
# The kinds that mean "history or thinking was not replayed intact": they should sit at zero.
SIGNATURE_KINDS: frozenset[str] = frozenset(KINDS[:7])
# The thinking 400s the last resort answers with one degraded retry (``pipeline.distrust``): every signature-class kind
# but the binding one, which has its own retry (by the block it names)
DISTRUSTED_KINDS: frozenset[str] = SIGNATURE_KINDS - {"binding_mismatch"}

_I = re.IGNORECASE
# THE table. Ordered: first match wins. Patterns are matched against the unwrapped messages,
# error types and statuses of the body, joined by newlines.
# The dialect entries' own texts come first (``registry.ERROR_PATTERNS``: OpenRouter's, which quotes the Vertex text
# after its own, and DeepSeek's), then the shared ones.
PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    *registry.ERROR_PATTERNS,
    ("missing_thought_signature", re.compile(r"missing a `?thought_signature`?", _I)),
    ("missing_thought_signature", re.compile(r"corrupted thought signature", _I)),
    # the binding 400 (docs/upstream-rules.md, "thinking-block binding") starts as the tampered-signature one: its own
    # sentence first
    ("binding_mismatch", re.compile(r"The block is bound to a different conversation", _I)),
    ("invalid_signature", re.compile(r"Invalid `?signature`? in `?thinking`? block", _I)),
    ("invalid_signature", re.compile(r"\.thinking\.signature: Field required", _I)),
    ("thinking_block_in_disabled", re.compile(
        r"When thinking is disabled, an `?assistant`? message in the final position cannot contain `?thinking", _I)),
    ("first_block_not_thinking", re.compile(
        r"Expected `?thinking`? or `?redacted_thinking`?, but found", _I)),
    ("first_block_not_thinking", re.compile(
        r"must start with a thinking block", _I)),
    ("first_block_not_thinking", re.compile(
        r"If an assistant message contains any thinking blocks, the first block must be thinking", _I)),
    ("thinking_modified", re.compile(
        r"`?thinking`? or `?redacted_thinking`? blocks in the latest assistant message cannot be modified", _I)),
    ("thinking_modified", re.compile(r"The final block in an assistant message cannot be `?thinking", _I)),
    ("tool_chain", re.compile(r"`?tool_use`? ids were found without `?tool_result`? blocks", _I)),
    ("tool_chain", re.compile(r"unexpected `?tool_use_id`? found in `?tool_result`? blocks", _I)),
    ("tool_chain", re.compile(r"Did not find \d+ `?tool_result`? block", _I)),
    # OpenAI-compatible and Gemini wordings of the same pairing rules (outside the reference).
    ("tool_chain", re.compile(r"must be followed by tool messages responding to each .?tool_call_id", _I)),
    ("tool_chain", re.compile(r"role .?tool.? must be a response to a preced\w* message with .?tool_calls", _I)),
    ("tool_chain", re.compile(r"function response turn comes immediately after a function call turn", _I)),
    ("params", re.compile(r"`?max_tokens`? must be greater than `?thinking\.budget_tokens", _I)),
    ("params", re.compile(r"budget_tokens: Input should be greater than or equal to", _I)),
    ("params", re.compile(r"Thinking may not be enabled when tool_choice forces tool use", _I)),
    ("params", re.compile(r"`?(temperature|top_p|top_k)`? may only be set to", _I)),
    ("params", re.compile(r"thinking_?level.{0,80}thinking_?budget|thinking_?budget.{0,80}thinking_?level", _I)),
    ("overloaded", re.compile(r"\boverloaded(_error)?\b", _I)),
    ("rate_limited", re.compile(r"\brate_limit(_error)?\b|\bRESOURCE_EXHAUSTED\b|rate limit", _I)),
)
# Status fallbacks when no text matched (e.g. an empty 529 body).
STATUS_KINDS: dict[int, str] = {429: "rate_limited", 503: "overloaded", 529: "overloaded"}

_MAX_DEPTH = 6
_MAX_TEXT = 64 * 1024


def classify(status: int, body: bytes | str | None) -> str:
    """The kind of an upstream error answer (HTTP ``status`` with raw ``body``)."""
    texts: list[str] = []
    if body:
        raw = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
        _collect_text(raw[:_MAX_TEXT], texts, 0)
    return _match(texts) or STATUS_KINDS.get(status, "other")


def classify_event(error: Any) -> str:
    """The kind of an in-stream ``error`` event's ``error`` object (or the whole event)."""
    texts: list[str] = []
    _collect(error, texts, 0)
    return _match(texts) or "other"


def _match(texts: list[str]) -> str | None:
    haystack = "\n".join(texts)
    for kind, pattern in PATTERNS:
        if pattern.search(haystack):
            return kind
    return None


def _collect(value: Any, out: list[str], depth: int) -> None:
    """Every string of a decoded error payload, JSON-in-strings decoded as well."""
    if depth > _MAX_DEPTH:
        return
    if isinstance(value, str):
        _collect_text(value, out, depth + 1)
    elif isinstance(value, dict):
        for v in value.values():
            _collect(v, out, depth + 1)
    elif isinstance(value, list):
        for v in value:
            _collect(v, out, depth + 1)


def _collect_text(text: str, out: list[str], depth: int) -> None:
    out.append(text)
    if depth > _MAX_DEPTH:
        return
    stripped = text.strip()
    if stripped[:1] in ("{", "["):
        try:
            _collect(orjson.loads(stripped), out, depth + 1)
            return
        except orjson.JSONDecodeError:
            pass
    start = text.find("{")
    if start > 0:  # "Upstream error: {...}" and similar: decode the first embedded object
        try:
            inner, _ = json.JSONDecoder().raw_decode(text, start)
        except ValueError:
            return
        _collect(inner, out, depth + 1)
