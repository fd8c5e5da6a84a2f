"""The internal turn/block model every dialect translates to and from.

Design rules:
- Blocks are a discriminated union on ``type``. Each block keeps the fields a
  dialect did not model in ``extra`` (a dict, original key order), so unknown
  fields travel through unchanged. Unknown block types become ``OpaqueBlock``,
  which keeps the whole raw dict.
- Thinking text and signatures are ``str`` values taken verbatim from the
  decoded JSON. Nothing here normalises, strips or re-encodes them; a missing key
  is ``None``, distinct from an empty string (``display: omitted`` yields
  ``thinking == ""`` with a valid signature).
- Pure data: no I/O, no dialect knowledge. Dialect modules own the wire shapes.
- Provider-specific reasoning travels in typed fields, never in ``extra`` (which is
  forwarded verbatim): ``ProviderSig`` on text, tool-use and thought blocks (Gemini
  ``thoughtSignature``), ``ThoughtBlock`` for another family's reasoning text (Gemini
  thought summaries, OpenAI-compatible ``reasoning_content``), ``ProviderFields`` on
  messages and turns (OpenRouter ``reasoning_details``, Copilot ``reasoning_opaque`` /
  ``reasoning_text``, DeepSeek ``reasoning_content``). Each carries its ``origin``: the
  model family that minted it (``routing.origin_of``), or ``CLIENT`` when a client sent
  it and no record vouches for it. Upstream encoders emit only what sanitize left for
  their own family.

Token usage (``from_openai``, ``from_gemini``, ``token_counts``): each upstream dialect's report into the canonical
usage, and out again as the token counts the metrics count. Canonical usage has Anthropic's meaning (the Messages
API's ``usage``, https://docs.claude.com/en/api/messages; what each upstream reports: docs/upstream-rules.md,
"Usage"): ``input_tokens`` are the prompt tokens that were neither read from nor written to the cache,
``cache_read_input_tokens`` and ``cache_creation_input_tokens`` the cached ones, ``output_tokens`` everything
generated (thinking included). The reasoning share of the output, which Anthropic does not report and
OpenAI-compatible and Gemini upstreams do, rides under the reserved key ``REASONING`` (a gateway key, like
``_provider``: no client encoder copies it).

- OpenAI chat completions ``usage``: ``prompt_tokens`` include ``prompt_tokens_details.cached_tokens``;
  ``completion_tokens`` include ``completion_tokens_details.reasoning_tokens``.
- Gemini ``usageMetadata``: ``promptTokenCount`` includes ``cachedContentTokenCount``; ``candidatesTokenCount``
  excludes ``thoughtsTokenCount``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias, TypeVar

JSON: TypeAlias = Any
Role: TypeAlias = Literal["user", "assistant", "system"]
CLIENT = "client"  # origin of provider data a client sent that no record vouches for


T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ProviderSig:
    """An opaque per-part signature (Gemini ``thoughtSignature``) and the family that minted it."""

    origin: str
    value: JSON


@dataclass(frozen=True, slots=True)
class ProviderFields:
    """Message-level opaque reasoning fields, exactly as received, keyed by their wire name."""

    origin: str
    fields: dict[str, JSON]


# The reserved key under which a translated stream's events carry provider data, typed: a ``BlockProvider`` on a
# block (``content_block_start``'s block; a ``provider_delta`` completes it), ``ProviderFields`` on the
# ``message_delta``'s delta. Values parsed from JSON are never these types, so an upstream's or a client's own
# ``_provider`` key is never read as provider data. (Records keep provider data in their stored form under the same
# key: ``gateway.pipeline.repair.records``.)
PROVIDER = "_provider"
# A translated stream's event that carries one upstream event's data as it came (``{"type": UPSTREAM_EVENT, "data":
# <the data string>}``), for encoders that relay the upstream's own dialect; the accumulator and the others ignore it.
UPSTREAM_EVENT = "upstream_event"


@dataclass(frozen=True, slots=True)
class BlockProvider:
    """Provider data on a block of a translated stream: the family that minted the block (a ``thought`` block's
    ``ThoughtBlock.origin``) and its per-part signature, if it has one (the block's ``sig``)."""

    origin: str
    sig: ProviderSig | None = None


@dataclass(slots=True)
class TextBlock:
    text: str
    extra: dict[str, JSON] = field(default_factory=dict)
    type: Literal["text"] = "text"
    sig: ProviderSig | None = None


@dataclass(slots=True)
class ThinkingBlock:
    """``thinking`` / ``signature`` are ``None`` when the client dropped the key."""

    thinking: str | None
    signature: str | None
    extra: dict[str, JSON] = field(default_factory=dict)
    type: Literal["thinking"] = "thinking"


@dataclass(slots=True)
class RedactedThinkingBlock:
    data: str
    extra: dict[str, JSON] = field(default_factory=dict)
    type: Literal["redacted_thinking"] = "redacted_thinking"


@dataclass(slots=True)
class ToolUseBlock:
    id: str
    name: str
    input: JSON
    extra: dict[str, JSON] = field(default_factory=dict)
    type: Literal["tool_use"] = "tool_use"
    sig: ProviderSig | None = None


@dataclass(slots=True)
class ThoughtBlock:
    """Reasoning text of a non-Anthropic family (a Gemini ``thought: true`` part, OpenAI-compatible
    reasoning text): never sent to another family, never an Anthropic ``thinking`` block."""

    text: str
    origin: str
    sig: ProviderSig | None = None
    extra: dict[str, JSON] = field(default_factory=dict)
    type: Literal["thought"] = "thought"


@dataclass(slots=True)
class ToolResultBlock:
    tool_use_id: str
    content: JSON = None  # str, list of raw content blocks, or None (key absent)
    is_error: bool | None = None
    extra: dict[str, JSON] = field(default_factory=dict)
    type: Literal["tool_result"] = "tool_result"


@dataclass(slots=True)
class OpaqueBlock:
    """Any block type thinkgate does not model (image, document, server tools...)."""

    raw: dict[str, JSON]

    @property
    def type(self) -> str:
        t = self.raw.get("type")
        return t if isinstance(t, str) else ""


Block: TypeAlias = (
    TextBlock | ThinkingBlock | RedactedThinkingBlock | ToolUseBlock | ToolResultBlock | ThoughtBlock | OpaqueBlock
)
THINKING_TYPES = frozenset({"thinking", "redacted_thinking"})
# Anthropic server-side compaction: an opaque, signed summary block that leads the answer it opens and must come
# back byte-exact (``gateway.pipeline.repair.edits``); the thinking rules read past a leading one
COMPACTION = "compaction"


@dataclass(frozen=True, slots=True)
class ResultShape:
    """What the tool-chain and loop rules read of a message's blocks (``Message.result_shape``)."""

    result_ids: tuple[str, ...]  # the tool_use_id of each tool_result block, in order
    results_lead: bool           # no tool_result block after a block of another type
    blank_text: bool             # an unsigned text block that is empty or whitespace only

    @staticmethod
    def of(blocks: list[Block]) -> ResultShape:
        ids: list[str] = []
        lead = True
        other = blank = False
        for b in blocks:
            if isinstance(b, ToolResultBlock):
                ids.append(b.tool_use_id)
                lead = lead and not other
            else:
                other = True
                blank = blank or is_blank_text(b)
        return ResultShape(tuple(ids), lead, blank)


def is_blank_text(b: Block) -> bool:
    """An unsigned text block that is empty or whitespace only (the upstream rejects those)."""
    return isinstance(b, TextBlock) and b.sig is None and not b.text.strip()


class Message:
    """One message. ``content`` is a list of canonical blocks.

    A decoder may leave ``content`` undecoded: ``lazy`` holds the client's block dicts and the function
    that decodes them, run on first access of ``content``. Until then ``raw_blocks`` is that client JSON,
    which encoders splice through unchanged, and ``tool_use_ids``/``has_thinking``/``is_empty`` answer from
    it. A message repair finds exactly a recorded turn (its replay digest) is never decoded unless a later stage
    needs its blocks.

    Pure data: what the stages find of a message for one request (repair's verbatim set, a restoration, the JSON
    ``splice`` encoded it to) is not kept here but in their outcomes and priors
    (``gateway.continuation.replay_memo``). What is kept besides the fields is the message's representation and
    views of it that depend on nothing else: the undecoded JSON with its decoder (``_lazy``), the blocks built
    from it without decoding in place
    (``_peeked``), values computed from it once (``_raw_derived``), and the decoded blocks' ``ResultShape``
    (``_shape``, per content list). Each is a function of the message's own content, whatever the request, the
    records or a stage's decisions, computed at most once, like a cached property.
    """

    __slots__ = ("_content", "_lazy", "_peeked", "_raw_derived", "_shape", "content_was_string", "extra",
                 "provider", "replay_digest", "role")

    def __init__(self, role: str, content: list[Block] | None = None, content_was_string: bool = False,
                 extra: dict[str, JSON] | None = None, provider: ProviderFields | None = None,
                 replay_digest: bytes | None = None, *,
                 lazy: tuple[list[dict[str, JSON]], Callable[[], list[Block]]] | None = None) -> None:
        self.role = role
        self._content = content if content is not None or lazy is not None else []
        self._lazy = lazy if content is None else None
        self._peeked: list[Block] | None = None  # ``peek_content`` of the undecoded blocks, once
        self._raw_derived: dict[Callable[[Message], Any], Any] | None = None  # ``raw_derived``, once each
        self._shape: tuple[list[Block], int, ResultShape] | None = None  # ``result_shape``, per content list
        # True when the client sent ``content`` as a plain string; re-encoded the same way
        # when the content is still a single text block.
        self.content_was_string = content_was_string
        self.extra: dict[str, JSON] = extra if extra is not None else {}
        self.provider = provider
        # ``state.keys.replay_digest`` of an assistant message's content as the client sent it (set by
        # the Anthropic decoder); repair accepts a replay matching a recorded turn's digest as is
        self.replay_digest = replay_digest

    @property
    def content(self) -> list[Block]:
        if self._lazy is not None:
            self._content = self._lazy[1]()
            self._lazy = self._peeked = None
        assert self._content is not None
        return self._content

    @content.setter
    def content(self, blocks: list[Block]) -> None:
        self._content = blocks
        self._lazy = self._peeked = None

    def peek_content(self) -> list[Block]:
        """The blocks (a list callers must not modify, of blocks they must not change), without decoding the
        message in place: a lazy message's are built once, apart from ``content``, so it stays undecoded
        (``replay_memo`` hands an undecoded message to the next request as it is, which peeks again)."""
        if self._lazy is None:
            return self.content
        if self._peeked is None:
            self._peeked = self._lazy[1]()
        return self._peeked

    def restore_raw(self, raw: list[dict[str, JSON]], blocks: Callable[[], list[Block]], digest: bytes) -> None:
        """Make this message a recorded turn's content as JSON, undecoded (``raw``: the recorded blocks,
        which nobody may change; ``blocks``: builds them; ``digest``: their replay digest)."""
        self._content = None
        self._lazy = (raw, blocks)
        self._peeked = self._raw_derived = None
        self.replay_digest = digest

    @property
    def raw_blocks(self) -> list[dict[str, JSON]] | None:
        """The client's block dicts while ``content`` was not decoded (None once it was)."""
        return self._lazy[0] if self._lazy is not None else None

    @property
    def source(self) -> list[Any]:
        """What the message is as it stands: its undecoded JSON while undecoded, else its content list (the
        object ``holds`` is later asked about, and ``gateway.continuation.splice`` keeps JSON by)."""
        lazy = self._lazy
        return lazy[0] if lazy is not None else self.content

    def holds(self, content: list[Any]) -> bool:
        """As a fresh decode left it with ``content`` (its ``raw_blocks`` or content list then): a lazy message
        still undecoded on that JSON, an eager one still holding that content list (``replay_memo``)."""
        lazy = self._lazy
        return lazy[0] is content if lazy is not None else self._content is content

    def raw_derived(self, compute: Callable[[Message], T]) -> T | None:
        """``compute(self)``, computed once per undecoded JSON (``compute`` keys it; it reads ``raw_blocks``
        or ``peek_content``); None once decoded. For what a stage reads from the JSON on every request of a
        replayed history."""
        if self._lazy is None:
            return None
        memo = self._raw_derived
        if memo is None:
            memo = self._raw_derived = {}
        if compute not in memo:
            memo[compute] = compute(self)
        value: T = memo[compute]
        return value

    def has_thinking(self) -> bool:
        raw = self.raw_blocks
        if raw is not None:
            return any(type(b) is dict and b.get("type") in THINKING_TYPES for b in raw)
        return any(b.type in THINKING_TYPES for b in self.content)

    def first_type(self) -> str | None:
        """The first block's type (None: no blocks), from the client's JSON while undecoded."""
        raw = self.raw_blocks
        if raw is not None:
            t = raw[0].get("type") if raw and type(raw[0]) is dict else None
            return t if isinstance(t, str) else None
        return self.content[0].type if self.content else None

    def is_empty(self) -> bool:
        raw = self.raw_blocks
        return not raw if raw is not None else not self.content

    def tool_use_ids(self) -> list[str]:
        """The ids of the tool_use blocks, in order (a list callers must not modify). Read once while the
        blocks are undecoded (the client's JSON does not change); from the canonical blocks, which stages
        edit, on every call."""
        ids = self.raw_derived(_raw_tool_use_ids)
        return ids if ids is not None else [b.id for b in self.content if isinstance(b, ToolUseBlock)]

    def result_shape(self) -> ResultShape:
        """The decoded blocks' ``ResultShape``, computed once per content list: a replayed history's
        messages are the same objects on every request (``replay_memo``), and the tool-chain and loop rules
        read every message of it. A stage that changes what it reads in place (a tool_result's id, a text
        block's text or signature) must give the message a new list (``content = [...]``), as repair's tool-id
        mapping does."""
        content = self.content
        shape = self._shape
        if shape is not None and shape[0] is content and shape[1] == len(content):
            return shape[2]
        value = ResultShape.of(content)
        self._shape = (content, len(content), value)
        return value

    def tool_result_ids(self) -> list[str]:
        return list(self.result_shape().result_ids)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Message):
            return NotImplemented
        return (self.role, self.content, self.content_was_string, self.extra, self.provider,
                self.replay_digest) == (other.role, other.content, other.content_was_string, other.extra,
                                        other.provider, other.replay_digest)

    __hash__ = None  # type: ignore[assignment]  # mutable, like the dataclass it replaces

    def __repr__(self) -> str:
        content = f"<{len(self._lazy[0])} undecoded>" if self._lazy is not None else repr(self._content)
        return f"Message(role={self.role!r}, content={content})"


def assistant_indexes(msgs: list[Message], limit: int, *, from_end: bool = False) -> list[int]:
    """The indexes of the first ``limit`` assistant messages (the last ones, ``from_end``), in message order;
    looked for from that end only, so a history's length does not count."""
    order = range(len(msgs) - 1, -1, -1) if from_end else range(len(msgs))
    out: list[int] = []
    for i in order:
        if msgs[i].role == "assistant":
            out.append(i)
            if len(out) == limit:
                break
    return out[::-1] if from_end else out


def _raw_tool_use_ids(m: Message) -> list[str]:
    return [b["id"] for b in m.raw_blocks or () if b.get("type") == "tool_use" and isinstance(b.get("id"), str)]


@dataclass(slots=True)
class SurfaceOptions:
    """What a client's dialect says of a request besides what goes upstream, typed: options that shape the answer
    (OpenAI ``stream_options.include_usage``, ``reasoning.exclude``), what ``GATEWAY_DROP_UNSUPPORTED_PARAMS``
    dropped, and the blocks the gateway sealed itself. (The client's own top-level fields are what it sent:
    ``ClientRequest.fields``, read by an upstream of the client's dialect only.)"""

    include_usage: bool = False
    exclude_reasoning: bool = False
    dropped_params: tuple[str, ...] = ()
    # the ``id()`` of the blocks a surface decoded from content the gateway itself sealed for this tenant (a
    # Responses reasoning item's ``encrypted_content``: authenticated, byte-exact as relayed). Repair's verdict
    # aside, sanitize takes them as verified, as it takes a record's.
    sealed: frozenset[int] = frozenset()

    def kept(self, fields: dict[str, JSON]) -> dict[str, JSON]:
        """A client's top-level ``fields`` but those ``GATEWAY_DROP_UNSUPPORTED_PARAMS`` dropped (the same
        objects, in the client's order)."""
        dropped = self.dropped_params
        return {k: v for k, v in fields.items() if k not in dropped} if dropped else fields


@dataclass(slots=True)
class Request:
    """A client request in canonical form.

    ``params`` holds every top-level field other than ``model``, ``messages``,
    ``stream`` and ``thinking`` in original order (system, tools, tool_choice,
    max_tokens, temperature, metadata, context_management, output_config, ...),
    so they are forwarded exactly as received.

    ``surface`` holds what the client's dialect says of the request besides what goes upstream
    (``SurfaceOptions``).
    """

    model: str
    messages: list[Message]
    thinking: dict[str, JSON] | None = None
    stream: bool | None = None  # None: the client sent no ``stream`` key
    params: dict[str, JSON] = field(default_factory=dict)
    surface: SurfaceOptions = field(default_factory=SurfaceOptions)

    @property
    def is_stream(self) -> bool:
        return bool(self.stream)

    def thinking_enabled(self) -> bool:
        t = self.thinking
        return isinstance(t, dict) and t.get("type") in ("enabled", "adaptive")


@dataclass(slots=True)
class Turn:
    """One assistant answer as relayed (non-stream body or accumulated stream)."""

    id: str
    model: str
    content: list[Block]
    stop_reason: str | None = None
    stop_sequence: str | None = None
    usage: dict[str, JSON] = field(default_factory=dict)
    extra: dict[str, JSON] = field(default_factory=dict)
    provider: ProviderFields | None = None


# --- token usage ---

REASONING = "_reasoning_tokens"
# the token kinds counted (``gateway_tokens_total{type}``) and the canonical usage key each is read from
TOKEN_KEYS = {"input": "input_tokens", "output": "output_tokens", "cache_read": "cache_read_input_tokens",
              "cache_write": "cache_creation_input_tokens", "reasoning": REASONING}


def _n(obj: Any, key: str) -> int:
    v = obj.get(key) if isinstance(obj, dict) else None
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else 0


def from_openai(u: Any) -> dict[str, Any]:
    """An OpenAI-compatible ``usage`` object -> canonical usage."""
    cached = _n(u.get("prompt_tokens_details") if isinstance(u, dict) else None, "cached_tokens")
    out: dict[str, Any] = {"input_tokens": max(0, _n(u, "prompt_tokens") - cached),
                           "output_tokens": _n(u, "completion_tokens")}
    if cached:
        out["cache_read_input_tokens"] = cached
    details = u.get("completion_tokens_details") if isinstance(u, dict) else None
    if isinstance(details, dict) and "reasoning_tokens" in details:
        out[REASONING] = _n(details, "reasoning_tokens")
    return out


def from_gemini(meta: Any) -> dict[str, Any]:
    """A Gemini ``usageMetadata`` object -> canonical usage."""
    cached, thoughts = _n(meta, "cachedContentTokenCount"), _n(meta, "thoughtsTokenCount")
    out: dict[str, Any] = {"input_tokens": max(0, _n(meta, "promptTokenCount") - cached),
                           "output_tokens": _n(meta, "candidatesTokenCount") + thoughts,
                           "cache_read_input_tokens": cached}
    if isinstance(meta, dict) and "thoughtsTokenCount" in meta:
        out[REASONING] = thoughts
    return out


def token_counts(usage: Any) -> dict[str, int]:
    """Canonical usage -> the token kinds it reports (a kind it does not report is left out, not 0)."""
    if not isinstance(usage, dict):
        return {}
    return {kind: _n(usage, key) for kind, key in TOKEN_KEYS.items() if key in usage}
