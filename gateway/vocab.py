"""The gateway's closed vocabularies, as types: a bottom module that imports nothing of the gateway (like
starlette's ``types.py``), so every layer may name them."""

from __future__ import annotations

from typing import Literal

# a client surface's protocol (``surfaces``)
ClientDialect = Literal["anthropic", "openai", "gemini", "augment", "responses"]
# a surface's label (``surfaces``; the metrics' endpoint label)
Endpoint = Literal["messages", "count_tokens", "chat_completions", "generate_content", "chat_stream",
                   "conversation_export", "models", "responses", "response_get"]
Via = Literal["header", "tool_id", "fingerprint", "none"]  # how the conversation was found (``identity``)
