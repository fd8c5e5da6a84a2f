"""DeepSeek (an OpenAI-compatible flavor): ``reasoning_content`` back on the assistant messages of a tool-calling
span in thinking mode (rule 23; ``docs/upstream-rules.md``, "DeepSeek"); ``reasoning_effort`` and ``thinking`` are
the parameters it reads. This subpackage and its registry entry are all of DeepSeek in the gateway."""

from __future__ import annotations

import re

from gateway.actions import Action, ActionKind
from gateway.dialects import openai_compat
from gateway.dialects.canonical import JSON, Message, Request
from gateway.dialects.entry import FieldsContext
from gateway.dialects.openai_compat import Flavor
from gateway.dialects.toolchain import opens_turn


class DeepSeek(Flavor):
    name = "deepseek"
    own_fields = ("reasoning_content",)
    reads = ("reasoning_effort", "thinking")
    # DeepSeek chat completions and its Anthropic-format endpoint (and Xiaomi MiMo)
    errors = (("reasoning_not_preserved", re.compile(
        r"`?(reasoning_content|content\[\]\.thinking)`? in the thinking mode must be passed back", re.I)),)

    def whole(self, family: str, values: dict[str, JSON]) -> bool:
        return openai_compat.text_value(values.get("reasoning_content"))

    def signs_calls(self, family: str) -> bool:
        return False

    def reasoning(self, thinking: dict[str, JSON], body: dict[str, JSON]) -> None:
        return  # the model decides (deepseek-reasoner always thinks); no documented parameter to send

    def degrade(self, req: Request, ctx: FieldsContext, kept: list[bool], actions: list[Action]) -> None:
        """Thinking mode is on unless the request sets ``thinking.type`` ``disabled`` (DeepSeek's default is on);
        when it is off no ``reasoning_content`` is sent."""
        t = req.thinking
        if isinstance(t, dict) and t.get("type") == "disabled":
            openai_compat.strip(req.messages, self.own_fields, actions)
        else:
            _spans(req.messages, kept, actions)


def _spans(msgs: list[Message], kept: list[bool], actions: list[Action]) -> None:
    """In a span between two user messages where the model called tools, every assistant message needs its
    reasoning; the steps up to the last one without it go as text (each textualized result is a user message, so
    what is left of the span after it holds only messages with reasoning)."""
    start = 0
    for end in [*(i for i, m in enumerate(msgs) if m.role == "user" and opens_turn(m)), len(msgs)]:
        span = [i for i in range(start, end) if msgs[i].role == "assistant"]
        lacking = [i for i in span if not kept[i]]
        if lacking and any(openai_compat.calls(msgs[i]) for i in span):
            last = lacking[-1]
            for i in span:
                if i > last:
                    break
                if openai_compat.calls(msgs[i]):
                    openai_compat.textualize_step(msgs, i)
            actions.append(Action(ActionKind.TOOL_LOOP_TEXTUALIZED, span[0], openai_compat.MISSING))
        start = end + 1


FLAVOR = DeepSeek()
