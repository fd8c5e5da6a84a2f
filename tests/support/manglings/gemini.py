"""How Gemini-native clients mangle replayed history, as functions over ``contents`` (parts with
``thought``, ``thoughtSignature``, ``functionCall``, ``functionResponse``). Each returns a mangled deep
copy. (OpenAI-surface clients of a Gemini conversation: ``tests.support.manglings.openai``.)"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

Contents = list[dict[str, Any]]


def _parts(fn: Callable[[dict[str, Any]], list[dict[str, Any]]]) -> Callable[[Contents], Contents]:
    def apply(contents: Contents) -> Contents:
        out = copy.deepcopy(contents)
        for c in out:
            c["parts"] = fn(c)
        return out
    return apply


def _drop_signatures(c: dict[str, Any]) -> list[dict[str, Any]]:
    return [{k: v for k, v in p.items() if k != "thoughtSignature"} for p in c["parts"]]


def _copy_first_signature(c: dict[str, Any]) -> list[dict[str, Any]]:
    sig = next((p.get("thoughtSignature") for p in c["parts"] if "functionCall" in p), None)
    return [{**p, "thoughtSignature": sig} if "functionCall" in p and sig else p for p in c["parts"]]


def _drop_thoughts(c: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in c["parts"] if not p.get("thought")] or c["parts"]


def _reverse_responses(c: dict[str, Any]) -> list[dict[str, Any]]:
    if all("functionResponse" in p for p in c["parts"]):
        return list(reversed(c["parts"]))
    return c["parts"]


def _snake(c: dict[str, Any]) -> list[dict[str, Any]]:
    names = {"thoughtSignature": "thought_signature", "functionCall": "function_call",
             "functionResponse": "function_response"}
    return [{names.get(k, k): v for k, v in p.items()} for p in c["parts"]]


MANGLINGS: dict[str, Callable[[Contents], Contents]] = {
    "faithful": copy.deepcopy,
    "drop_signatures": _parts(_drop_signatures),
    "copy_signature_to_parallel_calls": _parts(_copy_first_signature),
    "drop_thoughts_and_signatures": _parts(lambda c: _drop_signatures({"parts": _drop_thoughts(c)})),
    "responses_reordered": _parts(_reverse_responses),
    "snake_case_fields": _parts(_snake),
}
