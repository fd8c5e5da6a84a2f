"""What an upstream dialect is to the shared code: one entry per upstream kind (``Dialect``; an OpenAI-compatible
route's flavor is a ``gateway.dialects.openai_compat.Flavor``), each holding everything that depends on what
that upstream needs.

Shared code (sanitize, model switch, prefix keeping, the binding retry, the surfaces, model listing, metrics) asks
the entry of the request's route (``gateway.dialects.registry``) and never compares a kind or flavor name. Defaults
here are what an upstream that reads no thinking of its own needs; each subpackage (``gateway.dialects.<name>``)
overrides what differs. An entry holds rules only: how a request is sent and an answer read (paths, encoders,
translators) is the dialect's ``wire`` module, found by the same name (``gateway.surfaces.common``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from gateway.actions import Action
from gateway.dialects.canonical import Message, Request

if TYPE_CHECKING:
    from gateway.dialects.openai_compat import Seals
    from gateway.dialects.routing import ModelCaps

Unverifiable = Literal["drop", "text"]
LoopStart = Callable[[list[Message]], "int | None"]
# (error kind, pattern) pairs of an upstream's own error texts, for the classifier (``gateway.dialects.classify``)
ErrorPatterns = tuple[tuple[str, re.Pattern[str]], ...]


@dataclass(frozen=True, slots=True)
class FieldsContext:
    """What a flavor's reasoning-field rules read besides the request: the route, the signing origin of the target,
    the policy for what cannot be verified, the trailing loop's start and the tenant's seals (None: no secret)."""

    caps: ModelCaps
    target: str
    unverifiable: Unverifiable
    loop_start: LoopStart
    seals: Seals | None


class Dialect:
    """An upstream kind's rules (defaults: an upstream that reads no Anthropic thinking blocks and no provider
    fields)."""

    kind = ""
    bare_route = False        # ``GATEWAY_ROUTES`` names it by its kind alone (its built-in upstream of that name)
    listed_for = "openai"     # the client protocol whose model list asks this upstream (``model_listing``)
    list_key = "data"         # the key of its own model list's entries (``models``: Gemini's ``name`` entries)
    thinking_blocks = False   # reads Anthropic's signed thinking blocks: the Messages thinking rules and model switch
    provider_fields = False   # a chat client's message-level reasoning fields are this upstream's provider data
    judges_client_fields = False  # a client's own provider fields pass rule 6 and are judged by the flavor
    paired_reasoning = False  # a thought block goes back only as its recorded reasoning item, in its place (rule 8)
    binding_retry = False     # a binding 400 is answered by one retry without the bound blocks (``pipeline``)
    passthrough_from = ""     # the client protocol whose untouched request bytes this upstream takes as they are
    wire = "openai"           # the request/answer protocol it speaks: anthropic, gemini, openai, responses, converse
    platform = ""             # the cloud that serves the model (aws, gcp; "": the model's own vendor's API)
    params_column = "openai"  # its column of the chat parameters table (``gateway.dialects.routing``)
    errors: ErrorPatterns = ()  # its own error texts, classified before the shared table

    @property
    def messages_platform(self) -> bool:
        """Claude on a cloud platform (the Messages API's form, or Converse's): a Messages client's request goes
        there."""
        return bool(self.platform) and self.thinking_blocks

    def signs_calls(self, caps: ModelCaps) -> bool:
        """Whether the current turn's first call of each step must carry a Gemini signature (rule 7)."""
        return False

    def keeps_prefix(self, caps: ModelCaps) -> bool:
        """Whether the model binds thinking to its prefix (``gateway.pipeline.repair.prefix``)."""
        return False

    def sanitize_fields(self, req: Request, ctx: FieldsContext, actions: list[Action]) -> None:
        """The dialect's rules over message-level provider fields, after the per-message rules."""
