"""The seals on the opaque reasoning values relayed to OpenAI chat clients (``gateway.dialects.openai_compat``)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gateway.dialects.openai_compat import SEAL_KEY, seals_for, unsealed

ORIGIN = "openrouter/anthropic"
FIELDS: dict[str, Any] = {"reasoning_details": [
    {"type": "reasoning.text", "text": "think\r\n", "signature": "EqQB-sig", "format": "anthropic-claude-v1",
     "index": 0},
    {"type": "reasoning.encrypted", "data": "b3BhcXVl", "format": "anthropic-claude-v1", "index": 1},
    {"type": "reasoning.text", "text": "unsigned summary", "index": 2}]}
COPILOT: dict[str, Any] = {"reasoning_opaque": "dGdvMQ==", "reasoning_text": "thoughts"}


def test_what_is_sealed_opens_for_its_tenant_and_origin_only() -> None:
    seals = seals_for("s" * 32, None, "tenant-a")
    sealed = seals.seal(ORIGIN, FIELDS)
    assert [SEAL_KEY in d for d in sealed["reasoning_details"]] == [True, True, False]  # opaque entries only
    assert seals.opens(ORIGIN, sealed)
    assert not seals_for("s" * 32, None, "tenant-b").opens(ORIGIN, sealed)  # another tenant
    assert not seals.opens("openrouter/google", sealed)  # another origin
    assert not seals_for("t" * 32, None, "tenant-a").opens(ORIGIN, sealed)  # another gateway's secret
    assert unsealed(sealed) == FIELDS and FIELDS["reasoning_details"][0].get(SEAL_KEY) is None


@pytest.mark.parametrize("change", ["text trimmed", "crlf to lf", "blank", "signature swapped", "data altered",
                                    "seal dropped", "seal of another entry"])
def test_a_changed_value_does_not_open(change: str) -> None:
    seals = seals_for("s" * 32, None, "tenant-a")
    sealed = copy.deepcopy(seals.seal(ORIGIN, FIELDS))
    text, enc = sealed["reasoning_details"][0], sealed["reasoning_details"][1]
    if change == "text trimmed":
        text["text"] = text["text"].strip()
    elif change == "crlf to lf":
        text["text"] = text["text"].replace("\r\n", "\n")
    elif change == "blank":
        text["text"] = ""
    elif change == "signature swapped":
        text["signature"] = "EqQB-other"
    elif change == "data altered":
        enc["data"] = "YWx0ZXJlZA=="
    elif change == "seal dropped":
        del text[SEAL_KEY]
    else:
        text[SEAL_KEY] = enc[SEAL_KEY]
    assert not seals.opens(ORIGIN, sealed)


def test_reasoning_opaque_is_sealed_beside_it_and_the_previous_secret_still_opens() -> None:
    old = seals_for("o" * 32, None, "tenant-a")
    sealed = old.seal("copilot/gemini", COPILOT)
    assert SEAL_KEY in sealed and unsealed(sealed) == COPILOT
    rotated = seals_for("n" * 32, "o" * 32, "tenant-a")
    assert rotated.opens("copilot/gemini", sealed)
    assert not rotated.opens("copilot/gemini", {**sealed, "reasoning_opaque": "b3RoZXI="})
    assert rotated.opens("copilot/gemini", {"reasoning_content": "plain"})  # nothing opaque: nothing to open
