"""The one model -> upstream table and per-model capabilities.

No other module inspects model names. Capabilities come from the reference's
model matrix (protocols.md 1.2 and 1.8): some Claude models accept only adaptive
thinking and cannot disable it.

Three kinds of upstream: ``anthropic`` (Messages API), ``gemini`` (generateContent)
and ``openai`` (an OpenAI-compatible chat completions API of one *flavor*: which
message-level reasoning fields it returns and wants back). The built-in table sends
``claude-*`` to the ``anthropic`` upstream, ``gemini-*`` to ``gemini`` and everything
else to ``openai`` (flavor ``GATEWAY_OPENAI_FLAVOR``). ``GATEWAY_ROUTES`` puts extra
routes in front of it (``parse_routes``): ``PREFIX=anthropic|gemini|openai`` or
``PREFIX=FLAVOR@BASE_URL`` for a further OpenAI-compatible upstream named after its flavor.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

Kind = Literal["anthropic", "gemini", "openai"]
KINDS: tuple[Kind, ...] = ("anthropic", "gemini", "openai")
FLAVORS = ("generic", "openrouter", "copilot", "deepseek")


class RouteError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class ModelCaps:
    upstream: str                  # key into the app's upstreams
    can_disable_thinking: bool = True
    adaptive_only: bool = False
    kind: Kind = "anthropic"       # the upstream's API dialect
    flavor: str = ""               # OpenAI-compatible upstreams: generic | openrouter | copilot | deepseek
    family: str = ""               # OpenAI-compatible upstreams: the model family behind it (``compat_family``)


@dataclass(frozen=True, slots=True)
class Route:
    prefix: str
    upstream: str
    kind: Kind
    flavor: str = ""
    base_url: str | None = None    # set for the named OpenAI-compatible upstreams of GATEWAY_ROUTES


# Ordered (pattern, caps): first match wins.
_TABLE: tuple[tuple[re.Pattern[str], ModelCaps], ...] = (
    (re.compile(r"^claude-(opus-4-7|opus-5|mythos)"), ModelCaps("anthropic", can_disable_thinking=False,
                                                               adaptive_only=True)),
    (re.compile(r"^claude-"), ModelCaps("anthropic")),
    (re.compile(r"^gemini-"), ModelCaps("gemini", kind="gemini")),
)
_FAMILY_SUFFIX = re.compile(r"(?:[-@]\d{8}|-latest)$")


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
                return ModelCaps(r.upstream, kind=r.kind, flavor=r.flavor or self.default.flavor,
                                 family=compat_family(model) if r.kind == "openai" else "")
        caps = _builtin(model, self.default)
        return replace(caps, family=compat_family(model)) if caps.kind == "openai" else caps

    def named_upstreams(self) -> dict[str, Route]:
        """The extra OpenAI-compatible upstreams the routes name (name -> route with its base URL)."""
        return {r.upstream: r for r in self.routes if r.base_url}


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
    """``claude-sonnet-4-5-20250929`` -> ``claude-sonnet-4-5``; Vertex ``@20250929`` too."""
    return _FAMILY_SUFFIX.sub("", model)


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
            raise RouteError(f"GATEWAY_ROUTES: {entry!r} is not PREFIX=TARGET")
        if target in KINDS:
            routes.append(Route(prefix, target, target))
            continue
        flavor, at, url = target.partition("@")
        if not at or flavor not in FLAVORS or not url.startswith(("http://", "https://")):
            raise RouteError(f"GATEWAY_ROUTES: {target!r} should be anthropic, gemini, openai or FLAVOR@URL "
                             f"with FLAVOR one of {', '.join(FLAVORS)}")
        if urls.setdefault(flavor, url) != url:
            raise RouteError(f"GATEWAY_ROUTES: flavor {flavor!r} names two base URLs")
        routes.append(Route(prefix, flavor, "openai", flavor, url))
    return tuple(routes)
