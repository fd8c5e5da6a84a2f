"""An OpenAI-compatible chat completions API as an upstream: message-level reasoning fields judged per flavor
(``flavor.Flavor``, one subpackage of ``gateway.dialects`` each; ``fields``), and Gemini's signatures where the
flavor wants them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway.actions import Action
from gateway.dialects.canonical import Request
from gateway.dialects.entry import Dialect, FieldsContext
from gateway.dialects.openai_compat import fields

if TYPE_CHECKING:
    from gateway.dialects.openai_compat.flavor import Flavor
    from gateway.dialects.routing import ModelCaps


class OpenAICompat(Dialect):
    kind = "openai"
    bare_route = True
    provider_fields = True
    judges_client_fields = True

    def __init__(self, flavors: dict[str, Flavor]) -> None:
        self.flavors = flavors

    def flavor(self, caps: ModelCaps) -> Flavor:
        return self.flavors[caps.flavor] if caps.flavor in self.flavors else self.flavors["generic"]

    def signs_calls(self, caps: ModelCaps) -> bool:
        return self.flavor(caps).signs_calls(caps.family)

    def sanitize_fields(self, req: Request, ctx: FieldsContext, actions: list[Action]) -> None:
        fields.run(req, self.flavor(ctx.caps), ctx, actions)
