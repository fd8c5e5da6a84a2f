"""The records as repair sees them, and the one translation between stored turn records (``state``) and them.

- A recorded turn (``RecordedTurn``: where it sits and its exact content), the identified conversation's turns by
  position with their finders by replay digest, tool id, signed thinking and path (``ConversationView``: the lazy
  view over stored records, ``_LazyConversation``; ``TurnsConversation`` one held in memory), and everything the
  load stage found for one request (``Records``). Pure.
- The store keeps Anthropic-shaped block dicts; repair works on canonical blocks. This module is the only place
  that converts between the two. Provider data rides in the same dicts under the reserved key ``"_provider"``,
  which no upstream encoder ever emits: ``{"origin", "value"}`` on a text or tool_use block (a Gemini
  ``thoughtSignature``), and thought blocks (``ThoughtBlock``) are
  ``{"type": "thought", "thinking": text, "_provider": {"origin"[, "value"]}}``. Message-level fields
  (``ProviderFields``) are ``TurnRecord.provider`` = ``{"origin", "fields"}``. (A translated stream's events carry
  the same data typed, under the same key: ``canonical.PROVIDER``; the accumulated turn has it in its typed
  fields.)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from gateway.dialects.anthropic import codec as anthropic
from gateway.dialects.canonical import (
    CLIENT,
    JSON,
    PROVIDER,
    Block,
    Message,
    ProviderFields,
    ProviderSig,
    TextBlock,
    ThinkingBlock,
    ThoughtBlock,
    ToolUseBlock,
    Turn,
)
from gateway.pipeline import identify
from gateway.pipeline.identify import PathHash
from state import records
from state.coherence import ObjectLru
from state.keys import exact_hash, replay_digest
from state.records import ConversationState, Location, TurnRecord
from state.store import LoadResult

# --- the records as repair sees them ---


class RecordedTurn:
    """A turn record as repair sees it: where it sits and its exact content.

    ``content`` holds canonical blocks and ``prompt`` the request-side messages this turn answered
    (after the previous turn; only a history rebuild needs them). ``gateway.pipeline.repair.records`` subclasses it to
    decode both on first use: a turn matched by its replay digest is never decoded.
    ``replay_digest`` is the recorded ``keys.replay_digest`` of the content as the client received
    it (b"" when none was recorded); ``path``: the recorded path fingerprint (None when none was recorded);
    ``model``: the model that produced it.
    """

    __slots__ = ("_content", "model", "path", "position", "prompt_loader", "provider", "replay_digest", "scid")

    def __init__(self, scid: str, position: int, content: tuple[Block, ...] = (),
                 prompt_loader: Callable[[], tuple[Message, ...]] | None = None,
                 provider: ProviderFields | None = None, *, replay_digest: bytes = b"",
                 path: str | None = None, model: str = "") -> None:
        self.scid = scid
        self.position = position
        self._content: tuple[Block, ...] | None = content
        self.prompt_loader = prompt_loader
        self.provider = provider  # message-level provider fields as relayed
        self.replay_digest = replay_digest
        self.path = path  # the path fingerprint of what it answered (``TurnRecord.prefix_fingerprint``)
        self.model = model  # the model that produced it ("" when not recorded):
        # ``gateway.pipeline.repair.edits``

    @property
    def content(self) -> tuple[Block, ...]:
        assert self._content is not None
        return self._content

    @property
    def prompt(self) -> tuple[Message, ...]:
        return self.prompt_loader() if self.prompt_loader is not None else ()

    @property
    def wire(self) -> list[dict[str, JSON]] | None:
        """The content as the client received it, as recorded JSON (Anthropic blocks), where that is exactly
        ``content`` encoded: a turn with a replay digest. None: restore it from ``content``."""
        return None

    def __repr__(self) -> str:
        return f"RecordedTurn(scid={self.scid!r}, position={self.position})"


class ConversationView(Mapping[int, RecordedTurn]):
    """The identified conversation's turns by position, with finders by replay digest, tool id and path.

    The base class is an empty conversation; ``gateway.pipeline.repair.records`` provides the lazy view over
    stored records.
    """

    _paths: dict[str, int] | None = None  # ``path_index``, built on first use
    _thinking: dict[str, int] | None = None  # ``find_thinking``'s, built on first use
    _walked: tuple[list[Message], int, PathHash] | None = None  # ``find_path``'s running hash: list, upto, hash

    def __getitem__(self, pos: int) -> RecordedTurn:
        raise KeyError(pos)

    def __iter__(self) -> Iterator[int]:
        return iter(())

    def __len__(self) -> int:
        return 0

    def find_tool(self, tool_id: str) -> RecordedTurn | None:
        return None

    def find_digest(self, digest: bytes) -> RecordedTurn | None:
        """The turn whose recorded replay digest this is (the client replayed it verbatim)."""
        return None

    def find_thinking(self, exact: str) -> RecordedTurn | None:
        """The one turn with a signed thinking block of this exact text (``keys.exact_hash``): the model's
        own words, unique to the turn that produced them (unlike visible text). None when none or several."""
        if self._thinking is None:
            self._thinking = one_each((exact_hash(b.thinking), pos) for pos, t in self.items() for b in t.content
                                      if isinstance(b, ThinkingBlock) and b.thinking and b.signature)
        pos = self._thinking.get(exact)
        return self[pos] if pos is not None and pos >= 0 else None

    def path_index(self) -> dict[str, int]:
        """Path fingerprint -> the position of the one turn that answered it (-1: several did, e.g. a prefill
        continued: that path names no turn)."""
        return one_each((t.path, pos) for pos, t in self.items())

    def find_path(self, msgs: list[Message], i: int) -> RecordedTurn | None:
        """The one turn that answered the user side of ``msgs[:i]`` (``paths.path_fingerprint``); None when
        no turn did or several did. Asked for increasing ``i`` of one list, its hash runs on from the last."""
        if self._paths is None:
            self._paths = self.path_index()
        if not self._paths:
            return None
        walked = self._walked
        if walked is None or walked[0] is not msgs or walked[1] > i:
            walked = (msgs, 0, PathHash())
        path = walked[2].update(msgs[walked[1]:i])
        self._walked = (msgs, i, path)
        fp = path.hexdigest()
        pos = self._paths.get(fp) if fp else None
        return self[pos] if pos is not None and pos >= 0 else None

    def held(self, digests: list[bytes]) -> list[object]:
        """What the conversation holds for each replay digest, as objects compared by identity: the same
        objects mean the same turns (``Repaired``); None where it holds none."""
        return [self.find_digest(d) for d in digests]


def one_each(pairs: Iterable[tuple[str | None, int]]) -> dict[str, int]:
    """Each key with its one position, or -1 where several positions have it (``ConversationView.path_index``)."""
    out: dict[str, int] = {}
    for key, pos in pairs:
        if key:
            out[key] = -1 if key in out else pos
    return out


class TurnsConversation(ConversationView):
    """A conversation held as canonical turns in memory (tests, rebuilt histories)."""

    def __init__(self, turns: dict[int, RecordedTurn] | None = None) -> None:
        self.turns = turns if turns is not None else {}

    def __getitem__(self, pos: int) -> RecordedTurn:
        return self.turns[pos]

    def __setitem__(self, pos: int, turn: RecordedTurn) -> None:
        self.turns[pos] = turn

    def __iter__(self) -> Iterator[int]:
        return iter(self.turns)

    def __len__(self) -> int:
        return len(self.turns)

    def find_tool(self, tool_id: str) -> RecordedTurn | None:
        return next((t for t in self.turns.values() if tool_id in tool_ids(t.content)), None)


@dataclass(slots=True)
class Records:
    """Everything the load stage found for one request (all scoped to one tenant).

    ``by_tool_id`` holds the index hits of the load query (the most recent replayed turns' tool ids):
    they tell a continued repair where to look again (``repair_state.resume_cut``), never which turn a message is:
    turns are matched in ``conversation``, the identified conversation loaded in the same round trip.
    """

    by_tool_id: dict[str, RecordedTurn] = field(default_factory=dict)
    signatures: dict[str, str] = field(default_factory=dict)  # exact hash of a thinking text -> its signature
    conversation: ConversationView = field(default_factory=ConversationView)
    scid: str | None = None


def tool_ids(content: Iterable[Block]) -> list[str]:
    """The ids of the tool calls among ``content``, in order."""
    return [b.id for b in content if isinstance(b, ToolUseBlock)]


# --- stored records <-> canonical blocks ---


class _LazyConversation(ConversationView):
    """A conversation's stored turns, decoded (and indexed by path) only when repair asks: most requests
    match their turns by replay digest or tool id."""

    def __init__(self, conv: ConversationState, decode: Callable[[str, TurnRecord], RecordedTurn]) -> None:
        self._conv = conv
        self._by_pos = conv.by_position
        self._scid = conv.scid
        self._decode = decode

    def __getitem__(self, pos: int) -> RecordedTurn:
        return self._decode(self._scid, self._by_pos[pos])

    def __iter__(self) -> Iterator[int]:
        return iter(self._by_pos)

    def __len__(self) -> int:
        return len(self._by_pos)

    def find_tool(self, tool_id: str) -> RecordedTurn | None:
        rec = self._conv.turn_by_tool_id(tool_id)
        return self._decode(self._scid, rec) if rec is not None else None

    def find_thinking(self, exact: str) -> RecordedTurn | None:
        rec = self._conv.turn_by_thinking(exact)
        return self._decode(self._scid, rec) if rec is not None else None

    def find_digest(self, digest: bytes) -> RecordedTurn | None:
        rec = self._conv.turn_by_digest(digest)
        return self._decode(self._scid, rec) if rec is not None else None

    def held(self, digests: list[bytes]) -> list[object]:
        return self._conv.turns_by_digest(digests)  # type: ignore[return-value]

    def path_index(self) -> dict[str, int]:
        return one_each((rec.prefix_fingerprint, pos) for pos, rec in self._by_pos.items())




def store_block(b: Block) -> dict[str, JSON]:
    """A canonical block as a stored (Anthropic-shaped) dict, provider data under ``_provider``."""
    if isinstance(b, ThoughtBlock):
        prov: dict[str, JSON] = {"origin": b.origin}
        if b.sig is not None:
            prov["value"] = b.sig.value
        return {"type": "thought", "thinking": b.text, **b.extra, PROVIDER: prov}
    out = anthropic.encode_block(b)
    if isinstance(b, TextBlock | ToolUseBlock) and b.sig is not None:
        out = {**out, PROVIDER: {"origin": b.sig.origin, "value": b.sig.value}}
    return out


def load_block(d: dict[str, JSON]) -> Block:
    """The inverse of ``store_block`` (for records and translated streams only: never for what a
    client sent, whose ``_provider`` keys are not trusted)."""
    prov = d.get(PROVIDER)
    if not isinstance(prov, dict):
        return anthropic.decode_block(d, "record")
    rest = {k: v for k, v in d.items() if k != PROVIDER}
    origin = named if isinstance(named := prov.get("origin"), str) else CLIENT
    sig = ProviderSig(origin, prov["value"]) if "value" in prov else None
    if rest.get("type") == "thought":
        text = rest.get("thinking")
        extra = {k: v for k, v in rest.items() if k not in ("type", "thinking")}
        return ThoughtBlock(text if isinstance(text, str) else "", origin, sig, extra)
    b = anthropic.decode_block(rest, "record")
    if isinstance(b, TextBlock | ToolUseBlock):
        b.sig = sig
    return b


def _carries_provider_data(b: Block) -> bool:
    return isinstance(b, ThoughtBlock) or (isinstance(b, TextBlock | ToolUseBlock) and b.sig is not None)


def store_message(m: Message) -> dict[str, JSON]:
    """A request-side message as stored in a record's prompt: Anthropic-shaped; a message with provider
    blocks (a Gemini client's ``thought`` parts, signatures on parts) in ``store_block`` form, marked
    ``"_provider": true``. The reserved key is ours: the client's own ``_provider`` keys are dropped (a
    message) or can never be read as provider data (``load_message`` trusts only the marked form)."""
    if m.raw_blocks is None and any(_carries_provider_data(b) for b in m.content):
        content = []
        for b in m.content:
            d = store_block(b)
            if not _carries_provider_data(b) and PROVIDER in d:
                d = {k: v for k, v in d.items() if k != PROVIDER}
            content.append(d)
        extra = {k: v for k, v in m.extra.items() if k != PROVIDER}
        return {"role": m.role, "content": content, **extra, PROVIDER: True}
    out = anthropic.encode_message(m)
    out.pop(PROVIDER, None)
    return out


def load_message(d: dict[str, JSON], i: int) -> Message:
    """The inverse of ``store_message``."""
    content = d.get("content")
    if d.get(PROVIDER) is True and isinstance(content, list):
        extra = {k: v for k, v in d.items() if k not in ("role", "content", PROVIDER)}
        return Message(str(d.get("role")), [load_block(b) for b in content if isinstance(b, dict)], extra=extra)
    return anthropic.decode_message(d, i)


def load_fields(raw: object) -> ProviderFields | None:
    if isinstance(raw, dict) and isinstance(raw.get("fields"), dict) and raw["fields"]:
        origin = raw.get("origin")
        return ProviderFields(origin if isinstance(origin, str) else CLIENT, dict(raw["fields"]))
    return None


def store_fields(p: ProviderFields | None) -> dict[str, JSON]:
    return {"origin": p.origin, "fields": p.fields} if p is not None else {}


# the memory a record's canonical blocks add to the record they are built from (whose strings and dicts they
# share): the block objects and their tuple; an allowance, not yet checked against tracemalloc
BLOCK_COST = 256
BLOCKS_BYTES = 8 << 20  # the most a worker's record blocks hold (with ``GATEWAY_DECODED_TURN_CACHE`` entries)


def _blocks_cost(rec: TurnRecord, blocks: tuple[Block, ...]) -> int:
    return 64 + BLOCK_COST * len(blocks)


class RecordCaches:
    """A worker's stored records as repair sees them (one object the app owns: ``deps.WorkerCaches``).

    - ``blocks``: a record's content as canonical blocks, by record object. A conversation's records come back
      as the same objects on every load (the store's decoded-turn cache), and a mangled replay restores each of
      its turns from them on every request: decoding their blocks again (``load_block``: build and check each
      one) was most of that restore. Blocks built from a record are never changed in place (repair emits them
      as they are; a stage that changes a block replaces it, and the lists holding them are the request's own),
      so every request may share them. An entry holds its record, so no other object takes its ``id`` while
      the entry lives.
    - ``turns``: the ``_StoredTurn`` of a record in a conversation: a long conversation's replay matches hundreds
      of turns on every request, the same records each time; a ``_StoredTurn`` never changes after it is made.
    ``entries`` bounds each (``GATEWAY_DECODED_TURN_CACHE``, as the store's decoded-turn cache whose records it
    follows; a ``_StoredTurn`` is a fixed ~200 bytes); ``max_bytes`` also bounds the blocks (``BLOCK_COST``);
    0 entries turns them off.
    """

    __slots__ = ("blocks", "turns")

    def __init__(self, entries: int = records.DEFAULT_TURN_CACHE_ENTRIES, max_bytes: int = BLOCKS_BYTES) -> None:
        self.blocks: ObjectLru[TurnRecord, tuple[Block, ...]] = ObjectLru(entries, max_bytes, _blocks_cost)
        self.turns: ObjectLru[TurnRecord, _StoredTurn] = ObjectLru(entries)

    def record_blocks(self, rec: TurnRecord) -> tuple[Block, ...]:
        """A stored record's content as canonical blocks (shared: nobody may change them)."""
        blocks = self.blocks.get(rec)
        if blocks is None:
            blocks = tuple(load_block(b) for b in rec.content)
            self.blocks.put(rec, blocks)
        return blocks

    def stored_turn(self, scid: str, rec: TurnRecord) -> _StoredTurn:
        turn = self.turns.get(rec)
        if turn is None or turn.scid != scid:
            turn = _StoredTurn(scid, rec, self)
            self.turns.put(rec, turn)
        return turn

    def shared(self) -> list[tuple[TurnRecord, tuple[Block, ...]]]:
        """The records whose blocks this worker shares, with those blocks (oldest first)."""
        return self.blocks.items()


class _StoredTurn(RecordedTurn):
    """A stored record as repair sees it: its content and prompt decoded on first use (one object per
    matched turn, no loader closures: a long conversation's replay matches hundreds by digest)."""

    __slots__ = ("_caches", "_record")

    def __init__(self, scid: str, rec: TurnRecord, caches: RecordCaches) -> None:
        super().__init__(scid, rec.position if rec.position is not None else -1,
                         provider=load_fields(rec.provider) if rec.provider else None,
                         replay_digest=rec.replay_digest, path=rec.prefix_fingerprint, model=rec.model)
        self._content = None
        self._record = rec
        self._caches = caches

    @property
    def content(self) -> tuple[Block, ...]:
        if self._content is None:
            self._content = self._caches.record_blocks(self._record)
        return self._content

    @property
    def prompt(self) -> tuple[Message, ...]:
        return tuple(load_message(m, i) for i, m in enumerate(self._record.prompt))

    @property
    def wire(self) -> list[dict[str, JSON]] | None:
        # a replay digest is recorded only where the stored blocks are exactly what the client received
        # (``turn_record``: no provider data), i.e. ``store_block`` = ``anthropic.encode_block`` of each
        return self._record.content if self._record.replay_digest else None


def records_from(result: LoadResult, scid: str | None, caches: RecordCaches | None = None) -> Records:
    """What repair works on of a load (``caches``: the worker's, shared between its requests; None: none)."""
    caches = caches if caches is not None else RecordCaches(0)
    cache: dict[tuple[str, str], RecordedTurn] = {}

    def recorded(loc_scid: str, rec: TurnRecord) -> RecordedTurn:
        key = (loc_scid, rec.turn_id)
        hit = cache.get(key)
        if hit is None:
            hit = cache[key] = caches.stored_turn(loc_scid, rec)
        return hit

    def resolve(hits: dict[str, Location]) -> dict[str, RecordedTurn]:
        out = {}
        for key, loc in hits.items():
            rec = result.record(loc)
            if rec is not None:
                out[key] = recorded(loc.scid, rec)
        return out

    recs = Records(
        by_tool_id=resolve(dict(result.tool_hits)),
        signatures=dict(result.exact_hits),
        scid=scid,
    )
    conv = result.conversations.get(scid) if scid else None
    if conv is not None:
        recs.conversation = _LazyConversation(conv, recorded)
    return recs


def turn_record(turn: Turn, request_messages: list[Message], *, upstream: str, dialect: str,
                path: identify.PathHash | None = None, prefix: dict[str, JSON] | None = None) -> TurnRecord:
    """``path``: the running path hash over ``request_messages`` when the caller has it; ``prefix``: the prefix the
    turn was produced under (``gateway.pipeline.repair.prefix``)."""
    fp = path.hexdigest() if path is not None else identify.path_fingerprint(request_messages)
    last = next((i for i in range(len(request_messages) - 1, -1, -1) if request_messages[i].role == "assistant"), -1)
    content = [store_block(b) for b in turn.content]
    provider = store_fields(turn.provider)
    # The client receives exactly the stored blocks unless provider data rides along (then its form differs)
    plain = not provider and not any(PROVIDER in b for b in content)
    return TurnRecord(
        content=content,
        provider=provider,
        replay_digest=(replay_digest(content) or b"") if plain else b"",
        model=turn.model,
        upstream=upstream,
        dialect=dialect,
        prefix_fingerprint=fp,
        prompt=[store_message(m) for m in request_messages[last + 1:]],
        prefix=prefix or {},
    )
