"""An OpenAI-compatible chat completions API as an upstream (``OpenAICompat``): its flavors (``Flavor``: the
message-level reasoning fields each returns and wants back, whether they are whole, the reasoning parameters it
reads, and how a loop whose fields are not whole is degraded; the base is the ``generic`` flavor, each other flavor
is a subpackage of ``gateway.dialects`` listed in the registry), Gemini's signatures where the flavor wants them, and
the seals over the provider values a chat client carries back (``Seals``, below).

Sanitize for such an upstream judges each flavor's message-level reasoning fields, with or without a record
(``judge_fields``, called through ``OpenAICompat.sanitize_fields`` after the per-message rules and the tool-chain
repair).

A message whose fields are the target's own (restored from its record, ``ProviderFields.origin`` the target) is
verified and kept. A client's own fields (origin ``CLIENT``: no record, because the state machine is off, the records
expired or the store is down) are opaque values only the upstream reads, except for the seal thinkgate put beside
each when it relayed them (``openai_compat.Seals``): they are kept when they are *whole* for the flavor (the value the
upstream checks is there) and every opaque value among them opens for the target (exactly as relayed, to this
tenant), and degraded otherwise: the flavor's fields are removed from the message and their
reasoning text follows ``GATEWAY_UNVERIFIABLE_THINKING`` (``dropped``, or ``downgraded_text`` before the message's
content). Whole, per flavor (reference 3.4, 4, 5.2):

- ``openrouter``: for a Gemini or an Anthropic model, ``reasoning_details`` with at least one entry that carries an
  opaque value (a ``reasoning.encrypted`` ``data`` or a ``reasoning.text`` ``signature``); for an Anthropic model (or
  an entry in Anthropic's format) no ``reasoning.text`` entry without its signature (Anthropic rule 5 behind
  OpenRouter's translation); another family's entries (plain reasoning text) as sent;
- ``copilot``: ``reasoning_opaque``;
- ``deepseek``: ``reasoning_content``;
- ``generic``: nothing is known to be required; the client's fields pass as sent.

Where the upstream requires the field back, a message without it is degraded the way that upstream accepts:

- a Gemini model on OpenRouter or Copilot (reference rules 21, 22: the first call of each step of the current turn,
  rule 16): such a step's calls and their results go as text (``tool_loop_textualized``), as ``sanitize`` does for an
  unsigned Gemini step with the bypass off; Gemini 3 cannot disable thinking, so the reasoning parameter stays as the
  client sent it (also when the client stops sending one mid-loop: the model thinks all the same).
- DeepSeek in thinking mode (rule 23; ``docs/upstream-rules.md``: every assistant message between two user messages
  where the model called tools needs its ``reasoning_content``): in such a span, the steps up to the last message
  without it go as text, which leaves no tool call in a span that lacks reasoning. Thinking mode is on unless the
  request sets ``thinking.type`` ``disabled`` (DeepSeek's default is on); when it is off no ``reasoning_content`` is
  sent.
- an Anthropic model on OpenRouter (Anthropic's rules 9 and 10 behind OpenRouter's translation): thinking stays on
  only if the first assistant message of the trailing tool loop has whole, verified or client, reasoning; otherwise
  thinking is disabled for the request (``thinking_disabled``: the flavor's reasoning parameter is then left out,
  ``openai_compat.same_dialect``) and, with thinking off (repair's choice or the client's, mid-loop too), no
  ``reasoning_details`` are sent.

Every degrade is an ``Action`` (the ``gateway_sanitize_actions_total`` vocabulary).

**Seals** on the opaque reasoning values thinkgate relays to OpenAI chat clients.

An OpenAI-compatible upstream hands its client values it must get back untouched: OpenRouter's ``reasoning_details``
(a ``reasoning.text`` entry's ``signature`` over its exact text, a ``reasoning.encrypted`` entry's ``data``),
Copilot's ``reasoning_opaque``. With a record of the turn, repair restores them as relayed. Without one (the state
machine off, the records expired, the store down) thinkgate cannot tell an intact value from one a client trimmed,
re-encoded, truncated, blanked or moved to another turn, and a changed one is the upstream's 400 (``Invalid
signature in thinking block``). So every such value thinkgate relays is sealed for the tenant that received it: a
MAC over the exact value (an entry whole: a signature with the text it signs) and the origin that minted it, in an
extra key of the object the client returns (``thinkgate_seal``: in each opaque ``reasoning_details`` entry; beside
``reasoning_opaque`` in the message). The upstream's own values are never altered. Without a record, what opens is
as good as a record (``sanitize_compat``); what does not is degraded per ``GATEWAY_UNVERIFIABLE_THINKING``. The seal
never goes upstream (``unsealed``).

The key is derived from ``GATEWAY_SECRET`` (and ``GATEWAY_PREVIOUS_SECRET`` during a rotation: what it sealed still
opens); the tenant is in the MAC, so a value one tenant received does not open for another.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import orjson

from gateway.actions import Action, ActionKind
from gateway.dialects.canonical import JSON, Message, ProviderFields, Request, TextBlock, ToolUseBlock
from gateway.dialects.entry import Dialect, ErrorPatterns, FieldsContext
from gateway.dialects.toolchain import current_turn_start, textualize

if TYPE_CHECKING:
    from gateway.dialects.routing import ModelCaps


# --- judging the messages' reasoning fields ---

UNVERIFIABLE = "unverifiable_reasoning"
MISSING = "reasoning_missing"


def judge_fields(req: Request, flavor: Flavor, ctx: FieldsContext, actions: list[Action]) -> None:
    """The flavor's rules over ``req`` in place (see the module docstring): each assistant message's fields are
    kept when they are the target's own (a record's) or whole and, as a client's, open under the tenant's seals
    (``openai_compat.Seals``); else degraded; then the flavor's loop rule (``Flavor.degrade``)."""
    own = flavor.own_fields
    if not own:
        return
    msgs = req.messages
    kept = [False] * len(msgs)
    repeated = _repeated(msgs)
    target, seals = ctx.target, ctx.seals
    for i, m in enumerate(msgs):
        if m.role != "assistant":
            continue
        p = m.provider
        if i in repeated:  # one turn's reasoning on several messages (a client split its calls): no one message's
            _degrade_fields(m, i, own, ctx.unverifiable, actions)
        elif (p is not None and p.origin == target) or (
                flavor.whole(ctx.caps.family, p.fields if p else {})
                and (seals is None or p is None or seals.opens(target, p.fields))):
            kept[i] = True
        else:
            _degrade_fields(m, i, own, ctx.unverifiable, actions)
    flavor.degrade(req, ctx, kept, actions)


def text_value(v: JSON) -> bool:
    """A non-empty string (what an opaque reasoning field must be to count)."""
    return isinstance(v, str) and bool(v)


def _repeated(msgs: list[Message]) -> set[int]:
    """The assistant messages carrying an opaque value another assistant message carries too: an upstream mints one
    per turn, so such messages are pieces of one turn (a client that split a turn's parallel calls into a message
    each, repeating its reasoning), and none of them is that turn as the upstream produced it."""
    seen: dict[str, list[int]] = {}
    for i, m in enumerate(msgs):
        if m.role == "assistant" and m.provider is not None:
            for v in set(opaque_values(m.provider.fields)):
                seen.setdefault(v, []).append(i)
    return {i for where in seen.values() if len(where) > 1 for i in where}


def calls(m: Message) -> bool:
    """Whether the message calls tools."""
    return any(isinstance(b, ToolUseBlock) for b in m.content)


def _reasoning_text(fields: dict[str, JSON]) -> str:
    for key in ("reasoning_text", "reasoning_content"):
        if text_value(v := fields.get(key)):
            assert isinstance(v, str)
            return v
    details = fields.get("reasoning_details")
    texts = [d["text"] for d in details if isinstance(d, dict) and isinstance(d.get("text"), str)] \
        if isinstance(details, list) else []
    return "".join(texts)


def _degrade_fields(m: Message, i: int, own: tuple[str, ...], unverifiable: str, actions: list[Action]) -> None:
    """A message whose flavor fields are not whole: they go; their reasoning text as the policy says."""
    p = m.provider
    if p is None or not any(k in p.fields for k in own):
        return
    gone = {k: v for k, v in p.fields.items() if k in own}
    rest = {k: v for k, v in p.fields.items() if k not in own}
    m.provider = ProviderFields(p.origin, rest) if rest else None
    text = _reasoning_text(gone)
    if unverifiable == "text" and text.strip():
        m.content = [TextBlock(text), *m.content]
        m.content_was_string = False
        actions.append(Action(ActionKind.DOWNGRADED_TEXT, i))
    else:
        actions.append(Action(ActionKind.DROPPED, i, UNVERIFIABLE))


def strip(msgs: list[Message], own: tuple[str, ...], actions: list[Action]) -> None:
    """Thinking off: no reasoning field of the flavor's goes upstream."""
    for i, m in enumerate(msgs):
        p = m.provider
        if m.role == "assistant" and p is not None and any(k in p.fields for k in own):
            rest = {k: v for k, v in p.fields.items() if k not in own}
            m.provider = ProviderFields(p.origin, rest) if rest else None
            actions.append(Action(ActionKind.DROPPED, i, "thinking_disabled"))


def textualize_step(msgs: list[Message], i: int) -> None:
    """Assistant message ``i``'s calls, and the results answering them in the next message, as text."""
    textualize(msgs[i])
    if i + 1 < len(msgs) and msgs[i + 1].role == "user":
        textualize(msgs[i + 1])


def gemini_steps(msgs: list[Message], kept: list[bool], actions: list[Action]) -> None:
    """Rules 21/22: every step of the current turn whose reasoning is not whole goes as text."""
    for i in range(current_turn_start(msgs), len(msgs)):
        if msgs[i].role == "assistant" and not kept[i] and calls(msgs[i]):
            textualize_step(msgs, i)
            actions.append(Action(ActionKind.TOOL_LOOP_TEXTUALIZED, i, MISSING))


# --- the flavor and the dialect entry ---


class Flavor:
    """The ``generic`` flavor: nothing is known to be required; the client's fields pass as sent."""

    name = "generic"
    own_fields: tuple[str, ...] = ()   # (): the messages' fields are not judged (``judge_fields`` returns at once)
    reads: tuple[str, ...] = ("reasoning_effort",)  # the reasoning parameters the upstream reads from a client
    errors: ErrorPatterns = ()  # its own error texts, classified before the shared table
    # (``gateway.dialects.classify``)

    def whole(self, family: str, values: dict[str, JSON]) -> bool:
        """Whether a message's fields hold what the upstream checks."""
        return True

    def signs_calls(self, family: str) -> bool:
        """Whether the current turn's calls need Gemini's signature as Gemini's own API wants them (rule 7): a
        Gemini model behind Google's compatibility layer."""
        return family == "gemini"

    def reasoning(self, thinking: dict[str, JSON], body: dict[str, JSON]) -> None:
        """The request's (enabled) thinking configuration as the upstream's reasoning parameter in ``body``."""
        budget = thinking.get("budget_tokens")
        if isinstance(budget, int):
            body["reasoning_effort"] = "low" if budget <= 2048 else "medium" if budget <= 8192 else "high"
        else:
            body["reasoning_effort"] = "medium"

    def degrade(self, req: Request, ctx: FieldsContext, kept: list[bool], actions: list[Action]) -> None:
        """After each message's fields were judged (``kept``): a Gemini model's current-turn steps without whole
        reasoning go as text (reference rules 21/22)."""
        if ctx.caps.family == "gemini":
            gemini_steps(req.messages, kept, actions)


GENERIC = Flavor()


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
        judge_fields(req, self.flavor(ctx.caps), ctx, actions)


SEAL_KEY = "thinkgate_seal"
# (origin, a turn's message-level provider fields) -> the fields sealed for the client
Seal = Callable[[str, dict[str, JSON]], dict[str, JSON]]
_LABEL = b"thinkgate/chat/provider-seal/v1"


def _key(secret: str) -> bytes:
    return hmac.new(secret.encode(), _LABEL, hashlib.sha256).digest()


def opaque_entry(d: JSON) -> bool:
    """A ``reasoning_details`` entry carrying a value only its upstream can check (the one definition: the seals and
    ``sanitize_compat`` ask it)."""
    return isinstance(d, dict) and (
        (d.get("type") == "reasoning.text" and isinstance(d.get("signature"), str) and bool(d["signature"]))
        or (d.get("type") == "reasoning.encrypted" and isinstance(d.get("data"), str) and bool(d["data"])))


def opaque_values(fields: dict[str, JSON]) -> list[str]:
    """The opaque values among a message's provider fields: each opaque entry's signature or data, and
    ``reasoning_opaque``."""
    out = [v] if isinstance(v := fields.get("reasoning_opaque"), str) and v else []
    details = fields.get("reasoning_details")
    for d in details if isinstance(details, list) else ():
        if opaque_entry(d) and isinstance(d, dict):
            out.append(str(d.get("signature") or d.get("data")))
    return out


def _without_seal(d: dict[str, JSON]) -> dict[str, JSON]:
    return {k: v for k, v in d.items() if k != SEAL_KEY}


@dataclass(frozen=True, slots=True)
class Seals:
    """One gateway's sealing keys (the current secret's first) for one tenant."""

    keys: tuple[bytes, ...]
    tenant: str

    def _mac(self, key: bytes, origin: str, bound: JSON) -> str:
        payload = orjson.dumps(bound, option=orjson.OPT_SORT_KEYS)
        raw = hmac.new(key, self.tenant.encode() + b"\0" + origin.encode() + b"\0" + payload,
                       hashlib.sha256).digest()[:16]
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    def _opens(self, seal: JSON, origin: str, bound: JSON) -> bool:
        return isinstance(seal, str) and any(hmac.compare_digest(seal, self._mac(k, origin, bound)) for k in self.keys)

    def seal(self, origin: str, fields: dict[str, JSON]) -> dict[str, JSON]:
        """``fields`` (a turn's message-level provider fields, as the upstream gave them) with each opaque value
        sealed, for the client."""
        out = dict(fields)
        details = fields.get("reasoning_details")
        if isinstance(details, list):
            out["reasoning_details"] = [
                {**d, SEAL_KEY: self._mac(self.keys[0], origin, {"entry": _without_seal(d)})}
                if opaque_entry(d) and isinstance(d, dict) else d for d in details]
        opaque = fields.get("reasoning_opaque")
        if isinstance(opaque, str) and opaque:
            out[SEAL_KEY] = self._mac(self.keys[0], origin, {"opaque": opaque})
        return out

    def opens(self, origin: str, fields: dict[str, JSON]) -> bool:
        """Whether every opaque value among a client's ``fields`` is one this gateway relayed to this tenant, from
        ``origin``, exactly as relayed."""
        details = fields.get("reasoning_details")
        for d in details if isinstance(details, list) else ():
            if opaque_entry(d) and isinstance(d, dict) and not self._opens(
                    d.get(SEAL_KEY), origin, {"entry": _without_seal(d)}):
                return False
        opaque = fields.get("reasoning_opaque")
        if isinstance(opaque, str) and opaque and not self._opens(
                fields.get(SEAL_KEY), origin, {"opaque": opaque}):
            return False
        return True


NO_SEALS = Seals((), "")  # no value opens: every client opaque value is unverifiable (``sanitize.distrust``)


def seals_for(secret: str, previous: str | None, tenant: str) -> Seals:
    return Seals(tuple(_key(s) for s in (secret, previous) if s), tenant)


class Secrets(Protocol):
    @property
    def secret(self) -> str: ...
    @property
    def previous_secret(self) -> str | None: ...


def sealer(settings: Secrets, tenant: str | None) -> Seal | None:
    """What seals the values a tenant's client is handed (None: no tenant, nothing sealed)."""
    return seals_for(settings.secret, settings.previous_secret, tenant).seal if tenant is not None else None


def unsealed(fields: dict[str, JSON]) -> dict[str, JSON]:
    """``fields`` as the upstream gave them: thinkgate's seals taken out (they never go upstream)."""
    if SEAL_KEY not in fields and not any(isinstance(d, dict) and SEAL_KEY in d
                                          for d in fields.get("reasoning_details") or () if isinstance(d, dict)):
        return fields
    out = _without_seal(fields)
    details = fields.get("reasoning_details")
    if isinstance(details, list):
        out["reasoning_details"] = [_without_seal(d) if isinstance(d, dict) else d for d in details]
    return out
