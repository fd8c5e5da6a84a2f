"""OpenRouter (an OpenAI-compatible flavor): ``reasoning_details`` back on every assistant message, the ``reasoning``
parameter (``reasoning_effort`` its shorthand). Reference 3.4 and rules 9, 10, 21."""

from __future__ import annotations

import re

from gateway.actions import Action, ActionKind
from gateway.dialects import openai_compat
from gateway.dialects.canonical import JSON, Request
from gateway.dialects.entry import FieldsContext
from gateway.dialects.openai_compat import Flavor, opaque_entry

ANTHROPIC_FORMAT = "anthropic-claude-v1"


class OpenRouter(Flavor):
    name = "openrouter"
    own_fields = ("reasoning_details",)
    reads = ("reasoning", "reasoning_effort")
    # its own wording (Gemini through OpenRouter), before the Vertex text it quotes after it
    errors = (("reasoning_not_preserved", re.compile(r"reasoning details to be preserved", re.I)),)

    def whole(self, family: str, values: dict[str, JSON]) -> bool:
        """For a Gemini or an Anthropic model, at least one entry with an opaque value (a ``reasoning.encrypted``
        ``data`` or a ``reasoning.text`` ``signature``); for an Anthropic model (or an entry in Anthropic's format) no
        ``reasoning.text`` entry without its signature; another family's reasoning (plain text entries) is its own
        content: no opaque value is due."""
        details = values.get("reasoning_details")
        entries = [d for d in details if isinstance(d, dict)] if isinstance(details, list) else []
        opaque = any(map(opaque_entry, entries))
        unsigned = any(d.get("type") == "reasoning.text" and not openai_compat.text_value(d.get("signature"))
                       and (family == "anthropic" or d.get("format") == ANTHROPIC_FORMAT) for d in entries)
        return (opaque or family not in ("gemini", "anthropic")) and not unsigned

    def signs_calls(self, family: str) -> bool:
        return False  # OpenRouter carries Gemini's signatures in ``reasoning_details``

    def reasoning(self, thinking: dict[str, JSON], body: dict[str, JSON]) -> None:
        budget = thinking.get("budget_tokens")
        body["reasoning"] = {"max_tokens": budget} if isinstance(budget, int) else {"effort": "medium"}

    def degrade(self, req: Request, ctx: FieldsContext, kept: list[bool], actions: list[Action]) -> None:
        """A Gemini model: as the base. An Anthropic model (Anthropic's rules 9 and 10 behind OpenRouter's
        translation): thinking stays on only if the trailing loop's first assistant message has whole reasoning;
        with thinking off no ``reasoning_details`` are sent."""
        if ctx.caps.family != "anthropic":
            super().degrade(req, ctx, kept, actions)
            return
        if req.thinking_enabled():
            first = ctx.loop_start(req.messages)
            if first is not None and not kept[first]:
                req.thinking = None
                actions.append(Action(ActionKind.THINKING_DISABLED, first, "loop_start_unverified"))
        if not req.thinking_enabled():
            openai_compat.strip(req.messages, self.own_fields, actions)


FLAVOR = OpenRouter()
