"""GitHub Copilot (an OpenAI-compatible flavor): ``reasoning_opaque`` (and its ``reasoning_text``) back on the
assistant message; the model decides how much it thinks (no reasoning parameter is sent). Reference 5.2, rule 22."""

from __future__ import annotations

from gateway.dialects import openai_compat
from gateway.dialects.canonical import JSON
from gateway.dialects.openai_compat import Flavor


class Copilot(Flavor):
    name = "copilot"
    own_fields = ("reasoning_opaque", "reasoning_text")

    def whole(self, family: str, values: dict[str, JSON]) -> bool:
        return openai_compat.text_value(values.get("reasoning_opaque"))

    def signs_calls(self, family: str) -> bool:
        return False  # Copilot carries Gemini's signatures in ``reasoning_opaque``

    def reasoning(self, thinking: dict[str, JSON], body: dict[str, JSON]) -> None:
        return  # no documented parameter to send: the model decides


FLAVOR = Copilot()
