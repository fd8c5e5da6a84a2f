"""The one model -> upstream table, per-model capabilities, and the chat parameters each route takes.

No other module inspects model names. Capabilities come from the vendors' model
matrix (https://docs.aws.amazon.com/bedrock/latest/userguide/claude-messages-adaptive-thinking.html,
https://platform.claude.com/docs/en/build-with-claude/adaptive-thinking; binding models: docs/upstream-rules.md,
"thinking-block binding"): some Claude models accept only adaptive thinking and cannot disable it.

Four kinds of upstream: ``anthropic`` (Messages API), ``gemini`` (generateContent),
``responses`` (the OpenAI Responses API, ``PREFIX=responses@BASE_URL`` only)
and ``openai`` (an OpenAI-compatible chat completions API of one *flavor*: which
message-level reasoning fields it returns and wants back). The built-in table sends
``claude-*`` to the ``anthropic`` upstream, ``gemini-*`` to ``gemini`` and everything
else to ``openai`` (flavor ``GATEWAY_OPENAI_FLAVOR``). ``GATEWAY_ROUTES`` puts extra
routes in front of it (``parse_routes``): ``PREFIX=anthropic|gemini|openai`` or
``PREFIX=FLAVOR@BASE_URL`` for a further OpenAI-compatible upstream named after its flavor
(``responses@BASE_URL``: a Responses API upstream, named ``responses``).

The chat completions parameters and what each route does with them (``PARAMS``), the one table: a
/v1/chat/completions request goes to one of four kinds of upstream (its ``ParamRoute``): an
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

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from gateway.dialects import registry
from gateway.dialects.canonical import JSON
from gateway.dialects.urls import credentials_problem, display_url, redact_urls

Kind = str  # an upstream kind: a key of ``registry.DIALECTS``
KINDS: tuple[Kind, ...] = registry.BARE_ROUTES  # the targets a route names without a base URL
FLAVORS = tuple(registry.FLAVORS)  # the OpenAI-compatible flavors a route names with its base URL
NAMED = (*FLAVORS, *registry.NAMED_KINDS)  # ``NAME@BASE_URL`` targets (``responses@``: a Responses API upstream)


class RouteError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class ModelCaps:
    upstream: str                  # key into the app's upstreams
    can_disable_thinking: bool = True
    adaptive_only: bool = False
    kind: Kind = "anthropic"       # the upstream's API dialect
    flavor: str = ""               # OpenAI-compatible upstreams: generic | openrouter | copilot | deepseek
    # the model binds thinking blocks to their model (docs/upstream-rules.md, "thinking-block binding"): a block it
    # cannot read is dropped by
    # the API before the model sees it, without an error; older models answer such a block with a 400 instead
    drops_unreadable_thinking: bool = False
    family: str = ""               # OpenAI-compatible upstreams: the model family behind it (``compat_family``)
    # Thinking blocks bound to their prefix (system, tool set, earlier messages; docs/upstream-rules.md,
    # "thinking-block binding"): a changed
    # prefix is the binding 400 unless the request opts into ``drop_block`` (``gateway.pipeline.repair.prefix``)
    prefix_bound: bool = False
    # The append-only forms that keep a prefix unchanged (1.9): a mid-conversation ``role: "system"`` message, and
    # ``tool_addition`` / ``tool_removal`` blocks (beta ``mid-conversation-tool-changes-2026-07-01``)
    system_messages: bool = False
    tool_changes: bool = False


@dataclass(frozen=True, slots=True)
class Route:
    prefix: str
    upstream: str
    kind: Kind
    flavor: str = ""
    base_url: str | None = None    # set for the named OpenAI-compatible upstreams of GATEWAY_ROUTES
    location: str = ""             # a cloud platform's (``bedrock@REGION``, ``vertex@PROJECT/REGION``)


# Ordered (pattern, caps): first match wins.
_TABLE: tuple[tuple[re.Pattern[str], ModelCaps], ...] = (
    # the models that run the prefix check (1.9: Fable/Mythos 5.x, Opus/Sonnet/Haiku 5.5); they take adaptive thinking
    # only and accept both append-only forms (the mid-conversation-system-messages page lists them all)
    (re.compile(r"^claude-((fable|mythos)-5|(opus|sonnet|haiku)-5-5)"),
     ModelCaps("anthropic", can_disable_thinking=False, adaptive_only=True, prefix_bound=True, system_messages=True,
               tool_changes=True, drops_unreadable_thinking=True)),
    (re.compile(r"^claude-(fable|mythos|opus|sonnet|haiku)-5"), ModelCaps(
        "anthropic", can_disable_thinking=False, adaptive_only=True, drops_unreadable_thinking=True)),
    (re.compile(r"^claude-(opus-4-7|opus-5|mythos)"), ModelCaps("anthropic", can_disable_thinking=False,
                                                               adaptive_only=True)),
    (re.compile(r"^claude-"), ModelCaps("anthropic")),
    (re.compile(r"^gemini-"), ModelCaps("gemini", kind="gemini")),
)
_FAMILY_SUFFIX = re.compile(r"(?:[-@]\d{8}|-latest)$")
# a Bedrock model id around the Claude name: ``us.anthropic.claude-sonnet-4-5-20250929-v1:0``
_BEDROCK_ID = re.compile(r"^(?:[a-z]{2,6}\.)?anthropic\.|-v\d+(?::\d+)?$")


class Router:
    """The configured table: ``routes`` (GATEWAY_ROUTES) first, then the built-in one."""

    def __init__(self, routes: Sequence[Route] = (), openai_flavor: str = "generic") -> None:
        self.routes = tuple(routes)
        self.default = ModelCaps("openai", kind="openai", flavor=openai_flavor)

    def caps_for(self, model: str) -> ModelCaps:
        for r in self.routes:
            if model.startswith(r.prefix):
                if r.kind == "anthropic":
                    return _builtin(model, ModelCaps("anthropic"))
                if r.location:
                    return _on_platform(model, r)
                return ModelCaps(r.upstream, kind=r.kind, flavor=r.flavor or self.default.flavor,
                                 family=compat_family(model) if r.kind == "openai" else "")
        caps = _builtin(model, self.default)
        return replace(caps, family=compat_family(model)) if caps.kind == "openai" else caps

    def named_upstreams(self) -> dict[str, Route]:
        """The extra upstreams the routes name (name -> route with its base URL): OpenAI-compatible ones and the
        cloud platforms'."""
        return {r.upstream: r for r in self.routes if r.base_url or r.location}


def _on_platform(model: str, route: Route) -> ModelCaps:
    """A model on a cloud platform: the kind its target serves it as; a Claude model keeps the built-in table's
    capabilities (by its name without the platform's prefix and version)."""
    kind = registry.CLOUD[route.upstream].kind_for(model)
    if registry.dialect(kind).thinking_blocks:
        return replace(_builtin(model_family(model), ModelCaps(route.upstream)), upstream=route.upstream, kind=kind)
    return ModelCaps(route.upstream, kind=kind)


# The model families an OpenAI-compatible upstream may serve whose reasoning rules thinkgate knows: a Gemini model
# (``google/gemini-3-pro-preview`` on OpenRouter, ``gemini-3-pro-preview`` on Copilot or Gemini's compatibility
# layer) needs its reasoning back on the current turn's calls and cannot disable thinking; an Anthropic model
# (``anthropic/claude-sonnet-4.5``) follows Anthropic's thinking rules behind the compat translation.
_COMPAT_FAMILIES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"(?:^|/)gemini-"), "gemini"),
    (re.compile(r"^anthropic/|(?:^|/)claude-"), "anthropic"),
)


def compat_family(model: str) -> str:
    """The family of a model an OpenAI-compatible upstream serves: ``gemini``, ``anthropic`` or ``""`` (other)."""
    return next((family for pattern, family in _COMPAT_FAMILIES if pattern.search(model)), "")


def _builtin(model: str, default: ModelCaps) -> ModelCaps:
    for pattern, caps in _TABLE:
        if pattern.search(model):
            return caps
    return default


_BUILTIN = Router()


def caps_for(model: str) -> ModelCaps:
    """Capabilities by the built-in table alone (Claude model matrix; tests and pure code)."""
    return _BUILTIN.caps_for(model)


def model_family(model: str) -> str:
    """``claude-sonnet-4-5-20250929`` -> ``claude-sonnet-4-5``; Vertex ``@20250929`` and Bedrock's
    ``us.anthropic.claude-sonnet-4-5-20250929-v1:0`` too."""
    return _FAMILY_SUFFIX.sub("", _BEDROCK_ID.sub("", model))


# Which other producers' thinking blocks a model that binds them reads, by family (docs/upstream-rules.md,
# "thinking-block binding": "Opus 5.5
# reads blocks of earlier Opus/Sonnet/Haiku models (and ... Sonnet/Haiku 5.5), not Fable or Mythos"; 1.8: "Fable
# 5.1 reads blocks from Opus 5 and ... Opus 5.5"). Every model reads its own family's.
_READS: tuple[tuple[re.Pattern[str], re.Pattern[str]], ...] = (
    (re.compile(r"^claude-opus-5-5$"), re.compile(r"^claude-((opus|sonnet|haiku)-[34]|3-|(sonnet|haiku)-5-5$)")),
    (re.compile(r"^claude-fable-5-1$"), re.compile(r"^claude-opus-5(-5)?$")),
)


def reads_thinking(model: str, producer: str) -> bool:
    """Whether ``model`` can read a thinking block ``producer`` minted (same family, or ``_READS``)."""
    reader, made = model_family(model), model_family(producer)
    return reader == made or any(r.search(reader) and p.search(made) for r, p in _READS)


# The model families the metrics name (``gateway_*{model}``): a closed set, first match wins, a model none matches is
# "other", so a label never carries the client's text. A tier, not a version: a client's made-up version numbers
# cannot multiply the series. An OpenRouter-style ``vendor/`` prefix is skipped.
MODEL_FAMILIES: tuple[tuple[str, re.Pattern[str]], ...] = tuple((name, re.compile(pattern)) for name, pattern in (
    ("claude-opus", r"^claude-(?:[\d.-]+-)?opus"),
    ("claude-sonnet", r"^claude-(?:[\d.-]+-)?sonnet"),
    ("claude-haiku", r"^claude-(?:[\d.-]+-)?haiku"),
    ("claude", r"^claude-"),
    ("gemini-pro", r"^gemini-[\w.-]*-pro\b"),
    ("gemini-flash-lite", r"^gemini-[\w.-]*-flash-lite\b"),
    ("gemini-flash", r"^gemini-[\w.-]*-flash\b"),
    ("gemini", r"^gemini-"),
    ("gpt", r"^gpt-"),
    ("openai-o", r"^o\d+(?:-|$)"),
    ("deepseek-reasoner", r"^deepseek-(?:reasoner|r\d)"),
    ("deepseek", r"^deepseek-"),
))
MODEL_LABELS = frozenset(name for name, _ in MODEL_FAMILIES) | {"other"}
# the table as one alternation (first alternative wins, as the table's order), after an optional ``vendor/``
_FAMILY = re.compile(r"(?:[a-z0-9-]{1,40}/)?(?:" + "|".join(
    f"(?P<f{i}>{pattern.pattern.removeprefix('^')})" for i, (_, pattern) in enumerate(MODEL_FAMILIES)) + ")")


def model_label(model: object) -> str:
    """The metrics' ``model`` label of a request's model (one of ``MODEL_LABELS``)."""
    m = _FAMILY.match(model[:200].lower()) if isinstance(model, str) else None
    return MODEL_FAMILIES[int(m.lastgroup[1:])][0] if m is not None and m.lastgroup else "other"


def origin_of(caps: ModelCaps, model: str) -> str:
    """Who minted a signature: the upstream and the model family. Provider reasoning is only ever
    sent back to the same origin."""
    return f"{caps.upstream}/{model_family(model)}"


def parse_routes(spec: str) -> tuple[Route, ...]:
    """``PREFIX=TARGET[,PREFIX=TARGET...]``; TARGET is ``anthropic``, ``gemini``, ``openai`` or
    ``FLAVOR@BASE_URL`` (an OpenAI-compatible upstream named FLAVOR)."""
    routes: list[Route] = []
    urls: dict[str, str] = {}
    for entry in (e.strip() for e in spec.split(",")):
        if not entry:
            continue
        prefix, sep, target = (s.strip() for s in entry.partition("="))
        if not sep or not prefix or not target:
            raise RouteError(f"GATEWAY_ROUTES: {redact_urls(entry)!r} is not PREFIX=TARGET")
        if target in KINDS:
            routes.append(Route(prefix, target, target))
            continue
        flavor, at, url = target.partition("@")
        if flavor in registry.CLOUD and at:
            routes.append(_cloud_route(prefix, flavor, url, urls))
            continue
        if not at or flavor not in NAMED or not url.startswith(("http://", "https://")):
            raise RouteError(f"GATEWAY_ROUTES: {redact_urls(target)!r} should be {', '.join(KINDS)}, "
                             f"FLAVOR@URL with FLAVOR one of {', '.join(NAMED)}, or PLATFORM@LOCATION with PLATFORM "
                             f"one of {', '.join(registry.CLOUD)}")
        if problem := credentials_problem(url):
            raise RouteError(f"GATEWAY_ROUTES: the base URL of {prefix!r} ({display_url(url)}) {problem}")
        if urls.setdefault(flavor, url) != url:
            raise RouteError(f"GATEWAY_ROUTES: flavor {flavor!r} names two base URLs")
        kind = flavor if flavor in registry.NAMED_KINDS else "openai"
        routes.append(Route(prefix, flavor, kind, flavor, url))
    return tuple(routes)


def _cloud_route(prefix: str, name: str, location: str, locations: dict[str, str]) -> Route:
    """``PREFIX=NAME@LOCATION`` for a cloud platform's target (``bedrock@us-east-1``, ``vertex@PROJECT/REGION``)."""
    cloud = registry.CLOUD[name]
    if problem := cloud.problem(location):
        raise RouteError(f"GATEWAY_ROUTES: the location of {prefix!r} ({location[:100]!r}) {problem}")
    if locations.setdefault(name, location) != location:
        raise RouteError(f"GATEWAY_ROUTES: {name!r} names two locations")
    return Route(prefix, name, cloud.kind_for(""), location=location)


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
