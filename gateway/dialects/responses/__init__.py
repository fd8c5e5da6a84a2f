"""The OpenAI Responses API as an upstream (``PREFIX=responses@BASE_URL``): reasoning items go back paired with what
followed them (rule 8); a chat client's message-level reasoning is the summary of such an item."""

from __future__ import annotations

from gateway.dialects.entry import Dialect


class Responses(Dialect):
    kind = "responses"
    provider_fields = True
    paired_reasoning = True
    wire = params_column = "responses"


DIALECT = Responses()
