"""The Gemini API (``generateContent``) as an upstream: ``thoughtSignature`` on the first call of each step of the
current turn (rule 7), recorded or bypassed, else the step goes as text."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway.dialects.entry import Dialect

if TYPE_CHECKING:
    from gateway.dialects.routing import ModelCaps


class Gemini(Dialect):
    kind = "gemini"
    bare_route = True
    listed_for = "gemini"
    list_key = "models"
    wire = params_column = "gemini"

    def signs_calls(self, caps: ModelCaps) -> bool:
        return True


DIALECT = Gemini()
