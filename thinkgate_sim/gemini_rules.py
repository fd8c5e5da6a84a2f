"""The strict Gemini validator (reference rules 16-18) and the thought-signature minter.

Pure functions over the raw ``generateContent`` body. Rule texts are the reference's,
byte for byte, in the profile's form: ``aistudio`` (generativelanguage) or ``vertex``
(also what Copilot and OpenRouter relay).

- Rule 16: the current turn is every content after the last ``user`` content with a
  part that is not a ``functionResponse``. In it, the first ``functionCall`` part of
  every ``model`` content must carry a non-empty ``thoughtSignature`` (or
  ``thought_signature``): one this simulator minted for exactly that call, or a bypass
  value (both on AI Studio, only ``skip_thought_signature_validator`` on Vertex).
  Later parallel calls need none; earlier turns are not checked. Only Gemini 3 models
  enforce it (2.5 signatures are optional).
- Rule 17: a signature present on a current-turn ``functionCall`` part that was not
  minted for that call (edited, copied to another call, from another model) and is
  not a bypass value: the same 400 as rule 16.
- Rule 18: ``thinkingConfig`` with both ``thinkingLevel`` and ``thinkingBudget``.
- Shape: ``contents`` present and non-empty, valid roles, non-empty ``parts``; the
  content after a ``model`` content with N function calls answers them with exactly N
  ``functionResponse`` parts of the same names (``RULE_RESPONSES``).

A signature is an HMAC-SHA256 (simulator secret) over the model family, the response
id, the part's index and the exact call (name and canonical arguments) or text;
the wire form is base64 of ``"tgs1" | len | response id | index | mac``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections import Counter
from dataclasses import dataclass
from typing import Any

import orjson

from thinkgate_sim.signing import model_family

AISTUDIO, VERTEX = "aistudio", "vertex"
BYPASS = {AISTUDIO: frozenset({"skip_thought_signature_validator", "context_engineering_is_the_way_to_go"}),
          VERTEX: frozenset({"skip_thought_signature_validator"})}
SHAPE, RULE_RESPONSES = 0, 101
_MSG_16 = {
    AISTUDIO: ("Function call is missing a thought_signature in functionCall parts. This is required for tools to "
               "work correctly, and missing thought_signature may lead to degraded model performance. Additional "
               "data, function call `default_api:{name}` , position {k}. Please refer to "
               "https://ai.google.dev/gemini-api/docs/thought-signatures for more details."),
    VERTEX: ("Unable to submit request because function call `default_api:{name}` in the {k}. content block is "
             "missing a `thought_signature`. Learn more: "
             "https://docs.cloud.google.com/vertex-ai/generative-ai/docs/thought-signatures"),
}
_MSG_18 = ("Unable to submit request because thinking_budget and thinking_level are not supported together. "
           "Set only one of them.")
_MSG_RESPONSES = ("Please ensure that the number of function response parts is equal to the number of function "
                  "call parts of the function call turn.")


@dataclass(frozen=True, slots=True)
class GeminiViolation:
    rule: int
    message: str
    status: int = 400


def rule16_message(profile: str, name: str, k: int) -> str:
    return _MSG_16[profile].format(name=name, k=k)


class ThoughtSigner:
    __slots__ = ("_key",)

    def __init__(self, secret: bytes) -> None:
        self._key = hashlib.sha256(b"thinkgate-sim-gemini\0" + secret).digest()

    def __repr__(self) -> str:
        return "ThoughtSigner(<secret>)"

    def _mac(self, model: str, rid: str, index: int, payload: bytes) -> bytes:
        msg = b"\0".join((b"tgs1", model_family(model).encode(), rid.encode(), b"%d" % index, payload))
        return hmac.new(self._key, msg, hashlib.sha256).digest()

    def mint(self, model: str, rid: str, index: int, part: dict[str, Any]) -> str:
        rb = rid.encode()
        body = b"tgs1" + bytes([len(rb)]) + rb + index.to_bytes(2, "big") + self._mac(model, rid, index, _payload(part))
        return base64.b64encode(body).decode()

    def verify(self, model: str, part: dict[str, Any], sig: object) -> bool:
        if not isinstance(sig, str) or len(sig) > 2048:
            return False
        try:
            raw = base64.b64decode(sig, validate=True)
        except (binascii.Error, ValueError):
            return False
        if len(raw) < 5 or raw[:4] != b"tgs1" or len(raw) != 5 + raw[4] + 2 + 32:
            return False
        n = raw[4]
        try:
            rid = raw[5:5 + n].decode()
        except UnicodeDecodeError:
            return False
        index = int.from_bytes(raw[5 + n:7 + n], "big")
        return hmac.compare_digest(raw[7 + n:], self._mac(model, rid, index, _payload(part)))


def _payload(part: dict[str, Any]) -> bytes:
    fc = part.get("functionCall")
    if isinstance(fc, dict):
        return b"call\0" + str(fc.get("name")).encode() + b"\0" + orjson.dumps(fc.get("args") or {},
                                                                              option=orjson.OPT_SORT_KEYS)
    return b"text\0" + str(part.get("text", "")).encode("utf-8", "surrogatepass")


def signature_of(part: dict[str, Any]) -> Any:
    return part.get("thoughtSignature", part.get("thought_signature"))


def is_gemini3(model: str) -> bool:
    return model.startswith("gemini-3")


def opens_turn(c: dict[str, Any]) -> bool:
    """A user content with a part that is not a functionResponse: a turn starts after it."""
    return c.get("role", "user") == "user" and any(
        not (isinstance(p, dict) and "functionResponse" in p) for p in c.get("parts") or ())


def turn_start(contents: list[dict[str, Any]]) -> int:
    """Index just after the last user content with a part that is not a functionResponse."""
    return next((i + 1 for i in range(len(contents) - 1, -1, -1) if opens_turn(contents[i])), 0)


def calls_of(content: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in content.get("parts") or () if isinstance(p, dict) and isinstance(p.get("functionCall"), dict)]



def thinking_config(body: dict[str, Any]) -> dict[str, Any] | None:
    """``generationConfig.thinkingConfig`` (either JSON name form)."""
    gen = body.get("generationConfig") or body.get("generation_config")
    cfg = (gen.get("thinkingConfig") or gen.get("thinking_config")) if isinstance(gen, dict) else None
    return cfg if isinstance(cfg, dict) else None


def check_shape(body: Any) -> GeminiViolation | None:
    if not isinstance(body, dict):
        return GeminiViolation(SHAPE, "Invalid JSON payload received. Expected an object.")
    contents = body.get("contents")
    if not isinstance(contents, list) or not contents:
        return GeminiViolation(SHAPE, "* GenerateContentRequest.contents: contents is not specified\n")
    for i, c in enumerate(contents):
        if not isinstance(c, dict) or c.get("role", "user") not in ("user", "model"):
            return GeminiViolation(SHAPE, f"Please use a valid role: user, model. (contents[{i}])")
        parts = c.get("parts")
        if not isinstance(parts, list) or not parts or not all(isinstance(p, dict) and p for p in parts):
            return GeminiViolation(SHAPE, f"* GenerateContentRequest.contents[{i}].parts: contents.parts must "
                                          "not be empty.\n")
    cfg = thinking_config(body)
    if isinstance(cfg, dict) and {"thinkingLevel", "thinking_level"} & set(cfg) \
            and {"thinkingBudget", "thinking_budget"} & set(cfg):
        return GeminiViolation(18, _MSG_18)
    for i, c in enumerate(contents[:-1]):
        calls = calls_of(c) if c.get("role") == "model" else []
        if not calls:
            continue
        nxt = contents[i + 1]
        responses = [p["functionResponse"] for p in nxt.get("parts") or ()
                     if isinstance(p.get("functionResponse"), dict)]
        if Counter(str(fc["functionCall"].get("name")) for fc in calls) != Counter(
                str(r.get("name")) for r in responses) or nxt.get("role", "user") != "user":
            return GeminiViolation(RULE_RESPONSES, _MSG_RESPONSES)
    return None


def check_signatures(contents: list[dict[str, Any]], model: str, signer: ThoughtSigner,
                     profile: str) -> GeminiViolation | None:
    """Rules 16 and 17 over the current turn (``k`` in the message is 1-based)."""
    if not is_gemini3(model):
        return None
    bypass = BYPASS[profile]
    for i in range(turn_start(contents), len(contents)):
        c = contents[i]
        if c.get("role") != "model":
            continue
        for n, part in enumerate(calls_of(c)):
            sig = signature_of(part)
            name = str(part["functionCall"].get("name"))
            if n == 0 and not sig:
                return GeminiViolation(16, rule16_message(profile, name, i + 1))
            if sig and sig not in bypass and not signer.verify(model, part, sig):
                return GeminiViolation(17, rule16_message(profile, name, i + 1))
    return None


def check_request(body: Any, model: str, signer: ThoughtSigner, profile: str) -> GeminiViolation | None:
    return check_shape(body) or check_signatures(body["contents"], model, signer, profile)
