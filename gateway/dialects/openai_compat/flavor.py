"""An OpenAI-compatible upstream's flavor: the message-level reasoning fields it returns and wants back, whether they
are whole, the reasoning parameters it reads, and how a loop whose fields are not whole is degraded. The base is the
``generic`` flavor; each other flavor is a subpackage of ``gateway.dialects`` listed in the registry."""

from __future__ import annotations

from gateway.actions import Action
from gateway.dialects.canonical import JSON, Request
from gateway.dialects.entry import ErrorPatterns, FieldsContext
from gateway.dialects.openai_compat import fields


class Flavor:
    """The ``generic`` flavor: nothing is known to be required; the client's fields pass as sent."""

    name = "generic"
    own_fields: tuple[str, ...] = ()   # (): the messages' fields are not judged (``fields.run`` returns at once)
    reads: tuple[str, ...] = ("reasoning_effort",)  # the reasoning parameters the upstream reads from a client
    errors: ErrorPatterns = ()  # its own error texts, classified before the shared table
    # (``gateway.dialects.classify``)

    def whole(self, family: str, values: dict[str, JSON]) -> bool:
        """Whether a message's fields hold what the upstream checks."""
        return True

    def signs_calls(self, family: str) -> bool:
        """Whether the current turn's calls need Gemini's signature as Gemini's own API wants them (rule 7): a
        Gemini model behind Google's compatibility layer."""
        return family == "gemini"

    def reasoning(self, thinking: dict[str, JSON], body: dict[str, JSON]) -> None:
        """The request's (enabled) thinking configuration as the upstream's reasoning parameter in ``body``."""
        budget = thinking.get("budget_tokens")
        if isinstance(budget, int):
            body["reasoning_effort"] = "low" if budget <= 2048 else "medium" if budget <= 8192 else "high"
        else:
            body["reasoning_effort"] = "medium"

    def degrade(self, req: Request, ctx: FieldsContext, kept: list[bool], actions: list[Action]) -> None:
        """After each message's fields were judged (``kept``): a Gemini model's current-turn steps without whole
        reasoning go as text (reference rules 21/22)."""
        if ctx.caps.family == "gemini":
            fields.gemini_steps(req.messages, kept, actions)


GENERIC = Flavor()
