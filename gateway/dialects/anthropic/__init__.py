"""The Anthropic Messages API as an upstream: signed thinking blocks (the Messages thinking rules, model switches),
models that bind thinking to their prefix, the binding 400 retried once without the bound blocks, and a Messages
client's untouched request forwarded byte for byte."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway.dialects.entry import Dialect

if TYPE_CHECKING:
    from gateway.dialects.routing import ModelCaps


class Anthropic(Dialect):
    kind = "anthropic"
    bare_route = True
    listed_for = "anthropic"
    thinking_blocks = True
    binding_retry = True
    passthrough_from = "anthropic"
    wire = params_column = "anthropic"

    def keeps_prefix(self, caps: ModelCaps) -> bool:
        return caps.prefix_bound


DIALECT = Anthropic()
