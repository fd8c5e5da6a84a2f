"""The registry: every upstream dialect and every OpenAI-compatible flavor thinkgate knows, one entry each.

Adding one is a subpackage of ``gateway.dialects`` (its ``DIALECT`` or ``FLAVOR``, and for a new wire protocol its
``wire`` module) and one entry below; routes, metric label sets, model listing and every rule of the shared code read
them from here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway.dialects import anthropic, bedrock, copilot, deepseek, gemini, openrouter, responses, vertex
from gateway.dialects.cloud import CloudTarget
from gateway.dialects.entry import Dialect
from gateway.dialects.openai_compat import GENERIC, Flavor, OpenAICompat

if TYPE_CHECKING:
    from gateway.dialects.routing import ModelCaps

FLAVORS: dict[str, Flavor] = {f.name: f for f in (GENERIC, openrouter.FLAVOR, copilot.FLAVOR, deepseek.FLAVOR)}
DIALECTS: dict[str, Dialect] = {d.kind: d for d in (
    anthropic.DIALECT, gemini.DIALECT, OpenAICompat(FLAVORS), responses.DIALECT, bedrock.DIALECT, bedrock.CONVERSE,
    vertex.CLAUDE, vertex.GEMINI)}
# the cloud platforms' route targets (``NAME@LOCATION``): the upstream each names and the kind each model takes there
CLOUD: dict[str, CloudTarget] = {t.name: t for t in (*bedrock.TARGETS, *vertex.TARGETS)}

BARE_ROUTES = tuple(k for k, d in DIALECTS.items() if d.bare_route)  # ``PREFIX=KIND`` targets (built-in upstreams)
NAMED_KINDS = tuple(k for k, d in DIALECTS.items() if not d.bare_route and not d.platform)  # ``KIND@BASE_URL``
# the metrics' label sets: an upstream is named after its kind (built-in) or its flavor / kind (``NAME@BASE_URL``)
UPSTREAM_LABELS = frozenset(DIALECTS) | frozenset(FLAVORS) | frozenset(CLOUD) | {"none", "other"}
PARAM_ROUTES = frozenset(DIALECTS) | {"other"}
# the error texts of the entries' own, in registry order (the classifier matches them before its shared table)
ERROR_PATTERNS = tuple(p for f in FLAVORS.values() for p in f.errors) + tuple(
    p for d in DIALECTS.values() for p in d.errors)


def dialect(kind: str) -> Dialect:
    """The entry of an upstream kind (a route's ``ModelCaps.kind``)."""
    return DIALECTS[kind]


def of(caps: ModelCaps) -> Dialect:
    """The entry of a routed model's upstream."""
    return DIALECTS[caps.kind]


def speaking(wire: str) -> tuple[str, ...]:
    """The kinds whose upstream speaks ``wire`` (a surface that relays that protocol can call them)."""
    return tuple(k for k, d in DIALECTS.items() if d.wire == wire)


def flavor(name: str) -> Flavor:
    """A flavor by name (``generic`` for one the registry does not hold)."""
    return FLAVORS.get(name, GENERIC)
