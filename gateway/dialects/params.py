"""The chat completions parameters and what each route does with them: the one table.

A /v1/chat/completions request goes to one of four kinds of upstream (``gateway.dialects.routing``): an
OpenAI-compatible API (any flavor: the same dialect), the Anthropic Messages API, Gemini
generateContent or the OpenAI Responses API. Per top-level parameter and route, ``PARAMS`` says:

- ``passed``: sent upstream as received (same name, same value);
- ``mapped``: sent as the upstream's equivalent (``note`` says which);
- ``refused``: the upstream has no equivalent. A request asking for it (any value but the
  parameter's ``neutral`` ones, which ask for nothing: ``store: false``, ``n: 1``, a zero penalty)
  is a 400 naming the parameters, unless the operator sets ``GATEWAY_DROP_UNSUPPORTED_PARAMS=true``:
  then they are dropped, counted (``gateway_params_dropped_total``) and logged by name.

A parameter the table does not name is passed to an OpenAI-compatible upstream and refused by the
others. The README's "Parameters" table is ``markdown_table()`` (a test compares them).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from gateway.dialects.canonical import JSON

ParamRoute = Literal["openai", "anthropic", "gemini", "responses"]
Treatment = Literal["passed", "mapped", "refused"]
ROUTES: tuple[ParamRoute, ...] = ("openai", "anthropic", "gemini", "responses")


def route_of(kind: str) -> ParamRoute:
    """The table's column for an upstream kind (its entry's ``params_column``: Claude on a cloud platform reads the
    Anthropic column; a kind the table has no column for reads ``openai``'s, the widest)."""
    from gateway.dialects import registry  # (the registry's entries import nothing of this table)

    entry = registry.DIALECTS.get(kind)
    return _COLUMNS.get(entry.params_column if entry is not None else kind, "openai")


_COLUMNS: dict[str, ParamRoute] = {r: r for r in ROUTES}
UNKNOWN = "other"                  # the metric label of a parameter the table does not name


def _json_schema_or_text(v: JSON) -> bool:
    return isinstance(v, dict) and v.get("type") in ("text", "json_schema")


def _anthropic_tier(v: JSON) -> bool:
    return v in ANTHROPIC_SERVICE_TIERS


ANTHROPIC_SERVICE_TIERS = {"auto": "auto", "default": "standard_only"}  # OpenAI value -> Anthropic's


@dataclass(frozen=True, slots=True)
class Param:
    name: str
    openai: Treatment = "passed"
    anthropic: Treatment = "refused"
    gemini: Treatment = "refused"
    note: str = ""
    neutral: tuple[JSON, ...] = (None,)  # values that ask for nothing: accepted on every route, nothing sent
    # a mapped parameter whose other values have no equivalent there: route -> the values it can map
    maps_only: tuple[tuple[ParamRoute, Callable[[JSON], bool]], ...] = ()
    responses: Treatment = "refused"  # an OpenAI Responses upstream (through the canonical request)

    def on(self, route: ParamRoute) -> Treatment:
        return {"openai": self.openai, "anthropic": self.anthropic, "gemini": self.gemini,
                "responses": self.responses}[route]

    def asks(self, value: JSON, route: ParamRoute) -> bool:
        """Whether ``value`` asks for something ``route`` cannot honour."""
        if value in self.neutral:
            return False
        if self.on(route) == "refused":
            return True
        return any(r == route and not can(value) for r, can in self.maps_only)


_P: Treatment = "passed"
_M: Treatment = "mapped"
_R: Treatment = "refused"
PARAMS: tuple[Param, ...] = (
    Param("model", _P, _P, _M, "Gemini: the URL path", responses=_P),
    Param("messages", _P, _M, _M, "repaired on every route; Gemini: `contents`, `systemInstruction`; Responses: "
          "`input` items, `instructions`", responses=_M),
    Param("stream", _P, _P, _M, "Gemini: `:streamGenerateContent?alt=sse`", responses=_P),
    Param("stream_options", _M, _M, _M, "`include_usage` is answered by thinkgate; an OpenAI-compatible "
          "upstream streaming gets `include_usage: true`", responses=_M),
    Param("max_tokens", _P, _P, _M, "Gemini: `generationConfig.maxOutputTokens`; Responses: `max_output_tokens`",
          responses=_M),
    Param("max_completion_tokens", _P, _M, _M, "Anthropic: `max_tokens`; Gemini: `maxOutputTokens`; Responses: "
          "`max_output_tokens`", responses=_M),
    Param("temperature", _P, _P, _M, "Gemini: `generationConfig.temperature`; removed where thinking forbids "
          "it (`GATEWAY_FIX_THINKING_PARAMS`)", responses=_P),
    Param("top_p", _P, _P, _M, "Gemini: `topP`", responses=_P),
    Param("stop", _P, _M, _M, "Anthropic: `stop_sequences`; Gemini: `stopSequences`"),
    Param("user", _P, _M, _R, "Anthropic: `metadata.user_id`; Responses: `safety_identifier`", responses=_M),
    Param("safety_identifier", _P, _M, _R, "Anthropic: `metadata.user_id` (when `user` is absent)", responses=_M),
    Param("tools", _P, _M, _M, "function tools; `function.strict` -> Anthropic `strict`; Gemini: "
          "`functionDeclarations` (no per-function `strict` there); Responses: flat function tools", responses=_M),
    Param("tool_choice", _P, _M, _M, "Gemini: `toolConfig.functionCallingConfig`", responses=_M),
    Param("parallel_tool_calls", _P, _M, _R, "Anthropic: `tool_choice.disable_parallel_tool_use`",
          neutral=(None, True), responses=_M),
    Param("reasoning_effort", _P, _M, _M, "the thinking budget (adaptive models: `output_config.effort`); "
          "Gemini: `thinkingConfig`; Responses: `reasoning.effort`", responses=_M),
    Param("reasoning", _P, _M, _M, "OpenRouter's form: as `reasoning_effort`; `exclude` is answered by thinkgate",
          responses=_M),
    Param("thinking", _P, _P, _M, "Anthropic's form (vendor extension); Gemini: `thinkingConfig`", responses=_M),
    Param("output_config", _P, _P, _M, "Anthropic's form (vendor extension); Gemini: `effort` -> "
          "`thinkingLevel`, `format` -> `responseJsonSchema`; Responses: `reasoning.effort`, `text.format`",
          responses=_M),
    Param("response_format", _P, _M, _M, "`json_schema` -> Anthropic `output_config.format`, Gemini "
          "`responseMimeType` + `responseJsonSchema`; `json_object` -> Gemini `responseMimeType` (refused by "
          "Anthropic and Responses); Responses: `text.format`", neutral=(None, {"type": "text"}),
          maps_only=(("anthropic", _json_schema_or_text), ("responses", _json_schema_or_text)), responses=_M),
    Param("seed", gemini=_M, note="Gemini: `generationConfig.seed`"),
    Param("frequency_penalty", gemini=_M, note="Gemini: `frequencyPenalty`", neutral=(None, 0)),
    Param("presence_penalty", gemini=_M, note="Gemini: `presencePenalty`", neutral=(None, 0)),
    Param("service_tier", anthropic=_M, note="Anthropic: `auto` -> `auto`, `default` -> `standard_only` "
          "(others refused)", neutral=(None, "auto", "default"), maps_only=(("anthropic", _anthropic_tier),)),
    Param("top_k", _P, _P, _M, "vendor extension; Gemini: `topK`"),
    Param("context_management", _P, _P, _R, "vendor extension (Anthropic)"),
    Param("container", _P, _P, _R, "vendor extension (Anthropic)"),
    Param("mcp_servers", _P, _P, _R, "vendor extension (Anthropic)"),
    Param("n", _R, _R, _R, "one choice per answer: `n` > 1 is refused on every route", neutral=(None, 1)),
    Param("logit_bias", neutral=(None, {})),
    Param("logprobs", neutral=(None, False)),
    Param("top_logprobs", neutral=(None, 0)),
    Param("prediction"),
    Param("verbosity", neutral=(None, "medium")),
    Param("store", neutral=(None, False)),
    Param("metadata", neutral=(None, {})),
    Param("modalities", neutral=(None, ["text"])),
    Param("audio"),
    Param("web_search_options"),
    Param("prompt_cache_key"),
    Param("prompt_cache_retention"),
    Param("functions", note="deprecated; use `tools`"),
    Param("function_call", note="deprecated; use `tool_choice`"),
)
BY_NAME: dict[str, Param] = {p.name: p for p in PARAMS}
# the metric's ``param`` label values: every parameter some route may refuse, and UNKNOWN
REFUSABLE: frozenset[str] = frozenset({p.name for p in PARAMS if _R in (p.openai, p.anthropic, p.gemini, p.responses)
                                       or p.maps_only} | {UNKNOWN})


def maps(name: str, route: ParamRoute) -> bool:
    """Whether ``route`` takes parameter ``name`` mapped into its own form (the table's ``mapped``)."""
    return BY_NAME[name].on(route) == _M


def unsupported(body: dict[str, JSON], route: ParamRoute) -> list[str]:
    """The parameters of ``body`` that ask for something ``route`` cannot honour, in body order."""
    out: list[str] = []
    for key, value in body.items():
        p = BY_NAME.get(key)
        if p is None:
            if route != "openai":
                out.append(key)
        elif p.asks(value, route):
            out.append(key)
    return out


def refusal(names: Iterable[str], route: ParamRoute, model: str) -> str:
    upstream = {"openai": "OpenAI-compatible", "anthropic": "Anthropic", "gemini": "Gemini",
                "responses": "OpenAI Responses"}[route]
    listed = ", ".join(names)
    return (f"Unsupported parameters for model {model} (an {upstream} upstream): {listed}. thinkgate cannot "
            f"honour them there: remove them, or have the operator set GATEWAY_DROP_UNSUPPORTED_PARAMS=true to "
            f"drop them (see the Parameters table in thinkgate's README)")


def metric_label(name: str) -> str:
    return name if name in REFUSABLE else UNKNOWN


# ---------------------------------------------------------------- the README table

_HEADINGS = {"openai": "OpenAI-compatible upstream", "anthropic": "Anthropic upstream", "gemini": "Gemini upstream",
             "responses": "OpenAI Responses upstream"}


def markdown_table() -> str:
    """The README's "Parameters" table (one row per parameter, one column per route)."""
    rows = ["| parameter | " + " | ".join(_HEADINGS[r] for r in ROUTES) + " | notes |",
            "| --- | " + " | ".join("---" for _ in ROUTES) + " | --- |"]
    rows += [f"| `{p.name}` | " + " | ".join(p.on(r) for r in ROUTES) + f" | {p.note} |" for p in PARAMS]
    rows.append("| any other | passed | refused | refused | refused | |")
    return "\n".join(rows) + "\n"
