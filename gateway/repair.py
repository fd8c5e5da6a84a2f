"""Repair: restore replayed assistant history to its recorded, authoritative form.

Pure: ``run(messages, records, pinned, prior) -> (RepairResult, RepairPrior)`` (``repair``: without a prior).
The records are what the load
stage fetched in one store round trip (see ``Records``). Each replayed assistant
message is matched to a turn of the identified conversation only (never to another
conversation's), at its place on that conversation's path:

1. its replay digest (the turn replayed byte for byte),
2. its tool_use ids and the exact text of its signed thinking, when they name exactly one turn (Layer 1),
3. the user-side path before it: the one turn that answered that path,
4. else the turn right after the previous assistant message's, when that message was matched
   and the results between answer exactly that turn's calls.

A turn found by 2-4 is taken only when nothing contradicts it (``_agrees``): as many calls with the
same names, the same inputs where the client kept them, and, for a turn found by its place, the client's
text among the turn's (normalized-text hashes, thinking turned into text or ``<think>``-tagged included):
text only ever confirms. A turn already matched earlier in the request, or whose tool ids a kept client
message already carries, is never taken again. Where the evidence singles out no turn the message stays
the client's and its thinking is unverified (sanitize degrades it): never a guess.

A matched message is re-emitted as recorded: thinking and redacted_thinking blocks
with their exact bytes, signatures and order first, then text and tool_use blocks
with the original ids and inputs (and any provider data: per-part signatures, thought
blocks, message-level reasoning fields); tool ids the client regenerated are mapped back
in the tool_results that follow. Unmatched thinking blocks are checked against the
strict exact-text index (Layer 2): a signature is attached only to the exact text it
was issued for, never to other text (seed invariant 4.1.1).

The client's user messages define the path: repair never removes turns. Where the client changed a recorded turn's
message boundaries (dropped it but kept its tool results, merged consecutive turns, split one) and the tool ids name
the turns in the identified conversation, with their calls nowhere else in the request, each goes back whole, as
recorded (``gateway.reshape``: ``turn_reinstated``, ``turns_separated``, ``turn_joined``); any other orphan result
is sanitize's to degrade.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import operator
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from gateway.actions import Action, ActionKind
from gateway.paths import PathHash
from gateway.protocols.canonical import (
    JSON,
    THINKING_TYPES,
    Block,
    Message,
    ProviderFields,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from gateway.reshape import reshape
from state.hashing import exact_hash, norm_hash

_TAGGED = re.compile(r"<(think|thinking)>(.*?)</\1>", re.DOTALL)


class RecordedTurn:
    """A turn record as repair sees it: where it sits and its exact content.

    ``content`` holds canonical blocks and ``prompt`` the request-side messages this turn answered
    (after the previous turn; only a history rebuild needs them). ``gateway.records`` subclasses it to
    decode both on first use: a turn matched by its replay digest is never decoded.
    ``replay_digest`` is the recorded ``hashing.replay_digest`` of the content as the client received
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
        self.model = model  # the model that produced it ("" when not recorded): ``gateway.model_switch``

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

    The base class is an empty conversation; ``gateway.records`` provides the lazy view over
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
        """The one turn with a signed thinking block of this exact text (``hashing.exact_hash``): the model's
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
        return next((t for t in self.turns.values() if tool_id in _tool_ids(t.content)), None)


@dataclass(slots=True)
class Records:
    """Everything the load stage found for one request (all scoped to one tenant).

    ``by_tool_id`` holds the index hits of the load query (the most recent replayed turns' tool ids):
    they tell a continued repair where to look again (``_resume_cut``), never which turn a message is:
    turns are matched in ``conversation``, the identified conversation loaded in the same round trip.
    """

    by_tool_id: dict[str, RecordedTurn] = field(default_factory=dict)
    signatures: dict[str, str] = field(default_factory=dict)  # exact hash of a thinking text -> its signature
    conversation: ConversationView = field(default_factory=ConversationView)
    scid: str | None = None


@dataclass(frozen=True, slots=True)
class Repaired:
    """What repair found of a request's messages when every assistant message among them was a recorded turn
    as relayed: replayed verbatim (its replay digest), restored from its record's JSON in the client's
    message's place (a mangled replay), or found by its lookups to be exactly that turn already (a surface
    whose messages carry no digest). The next request of the conversation, which starts with the same
    messages as the same objects (``replay_memo``; the caller vouches for that), starts from it while the
    conversation still holds exactly those turns (``ConversationView.held``), up to the first message matched
    by its lookups that this request's index hits answer (``_resume_cut``): from there it matches afresh. A
    restored one's place gets the message restored then (``restored``)."""

    count: int                          # the messages it covers, ``messages[:count]``
    messages: list[Message]             # the messages it looked at, as the client's (before any restoration)
    scid: str | None                    # the conversation they were matched in
    matched: dict[int, RecordedTurn]    # every assistant message's turn, by index, in index order
    digests: list[bytes]                # their replay digests (a restored one's: its turn's), in order
    held: list[object]                  # what the conversation held for each (``ConversationView.held``)
    restored: dict[int, Message]        # the messages restored in the client's messages' places, in index order
    actions: tuple[Action, ...]         # repair's actions: one ``restored`` for each of them, in the same order
    keys: dict[str, int]                # tool ids of the messages matched by their lookups -> index

    def before(self, cut: int) -> tuple[int, int]:
        """How many of its matched turns, and of its restorations, come before message ``cut`` (index order)."""
        if cut == self.count:
            return len(self.matched), len(self.restored)
        return bisect.bisect_left(list(self.matched), cut), bisect.bisect_left(list(self.restored), cut)


@dataclass(slots=True)
class RepairResult:
    verified: set[int] = field(default_factory=set)  # id() of thinking blocks proven authentic
    actions: list[Action] = field(default_factory=list)
    matched: dict[int, RecordedTurn] = field(default_factory=dict)  # message index -> turn
    changed: bool = False
    # indexes of the assistant messages that are a recorded turn as relayed: matched by replay digest, or restored
    # from the record's JSON (``restored``), in order; all of their thinking is verified (sanitize is given them)
    verbatim: list[int] = field(default_factory=list)
    restored: dict[int, Message] = field(default_factory=dict)  # the verbatim restorations, by index, in order
    repaired: Repaired | None = None  # for the next request, when every assistant message was its turn as relayed
    resumed: int = 0  # the messages it continued from the previous request's ``Repaired`` (0: it looked at all)

    def is_verified(self, block: Block) -> bool:
        return id(block) in self.verified

    @property
    def scids(self) -> Counter[str]:
        return Counter(t.scid for t in self.matched.values())


def lookup_hashes(m: Message) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(``block_hashes``, exact hashes of its thinking texts) of a replayed assistant message: what the load
    query and repair look it up by. Read once per undecoded JSON (a replayed history's latest turns are
    looked up again on every request)."""
    known = m.raw_derived(_lookup_hashes)
    return known if known is not None else _lookup_hashes(m)


def _lookup_hashes(m: Message) -> tuple[tuple[str, ...], tuple[str, ...]]:
    blocks = m.peek_content()
    return tuple(block_hashes(blocks)), tuple(exact_hash(b.thinking) for b in blocks
                                              if isinstance(b, ThinkingBlock) and b.thinking)


def block_hashes(blocks: Iterable[Block]) -> list[str]:
    """Normalized hashes of an assistant message's thinking and text blocks (``lookup_hashes``)."""
    out: list[str] = []
    for b in blocks:
        if isinstance(b, ThinkingBlock) and b.thinking:
            out.append(norm_hash(b.thinking))
        elif isinstance(b, TextBlock) and b.text.strip():
            out.append(norm_hash(b.text))
            for _, inner in _TAGGED.findall(b.text):
                out.append(norm_hash(inner))
            outer = _TAGGED.sub(" ", b.text)
            if outer.strip() and outer != b.text:
                out.append(norm_hash(outer))
    return out


def rebuild_history(recs: Records, msgs: list[Message],
                    upto: int | None = None) -> tuple[list[Message], dict[int, RecordedTurn]] | None:
    """Server-side thread state: the client named a known conversation and replayed no history (``upto``: the
    position of the turn it continues from, a ``previous_response_id``'s; the turns after it are left out, so the
    answer branches there).

    Returns the recorded conversation (each turn's prompt messages, then the turn) followed by the
    client's messages, plus which message index holds which turn; None when there is nothing to
    rebuild, and when the client's first message is the conversation's first one: it replays the
    conversation from its start (a retry of the first request), and the path is the client's; and None when a turn
    was stored without its prompt.
    """
    turns = {p: t for p, t in recs.conversation.items() if upto is None or p <= upto}
    if not turns or any(m.role == "assistant" for m in msgs):
        return None
    if any(not turn.prompt for turn in turns.values()):
        return None  # a turn stored without its prompt (too large: ``StorageLimits``) cannot be replayed whole
    first = turns[min(turns)].prompt
    if msgs and first and (first[0].role, first[0].content) == (msgs[0].role, msgs[0].content):
        return None
    out: list[Message] = []
    pinned: dict[int, RecordedTurn] = {}
    for pos in sorted(turns):
        turn = turns[pos]
        out += [Message(m.role, list(m.content), m.content_was_string, dict(m.extra)) for m in turn.prompt]
        pinned[len(out)] = turn
        out.append(Message("assistant", list(turn.content), provider=turn.provider))
    return out + msgs, pinned


@dataclass(frozen=True, slots=True)
class RepairPrior:
    """What repair found of a conversation's previous request, for its next one (``run``)."""

    repaired: Repaired | None = None  # to resume from (``Repaired``), when the caller vouches for the memo's part
    # the client messages it restored, by ``id`` of the client's message (``Restoration.client``: the same object)
    restorations: Mapping[int, Restoration] = field(default_factory=dict)


def repair(msgs: list[Message], recs: Records, pinned: Mapping[int, RecordedTurn] | None = None,
           resumed: Repaired | None = None) -> RepairResult:
    """``run`` with no restorations carried over: ``pinned`` fixes the turn of some message indexes (a history
    rebuilt from the records); ``resumed``: the previous request's ``Repaired``."""
    return run(msgs, recs, pinned, RepairPrior(resumed))[0]


def run(msgs: list[Message], recs: Records, pinned: Mapping[int, RecordedTurn] | None,
        prior: RepairPrior | None) -> tuple[RepairResult, RepairPrior]:
    """Repair ``msgs`` in place (``pinned``: see ``repair``), from ``prior`` where it holds: its ``Repaired`` while
    ``msgs`` start with the very messages it covers (``_resume_cut`` checks the rest), and a client message
    restored on that request restored again by the same message while it is still what it was. Returns the
    outcome and what the next request may start from."""
    resumed = prior.repaired if prior is not None else None
    if resumed is not None and not _covers(resumed, msgs):
        resumed = None
    # recorded turns the client dropped, put back before their results (pinned in their places)
    reshaped = reshape(msgs, recs.conversation, resumed.count if resumed is not None else 0) if not pinned else {}
    reinstated = {i: turn for i, (turn, _) in reshaped.items()}
    if reinstated:
        pinned = reinstated
    restorations = prior.restorations if prior is not None else {}
    made: dict[int, Restoration] = {}  # this request's new restorations
    client_msgs = list(msgs)  # (``Repaired.messages``: as the client's, before any restoration)
    res = RepairResult()
    id_map: dict[str, str] = {}  # the previous assistant message's client tool ids -> its turn's
    mapped = False  # some tool id was mapped
    keys: dict[str, int] = {}  # the lookup keys of the messages matched by them (``Repaired.keys``)
    uncarried = False  # a turn matched by its lookups that the next request must match afresh
    prev: RecordedTurn | None = None  # the previous assistant message's turn (None: it had none)
    prev_i = -1  # ... and that message's index
    taken = _Taken(res)
    start = assistants = 0
    cut = _resume_cut(resumed, msgs, recs, pinned) if resumed is not None else 0
    if resumed is not None and cut:
        prev = _resume(resumed, cut, msgs, res)
        prev_i = res.verbatim[-1] if res.verbatim else -1
        # (a key of a message from ``cut`` on stays: it is that message's again if it is matched so again, and an
        # earlier cut on a later request otherwise, which only makes repair look at more)
        keys.update(resumed.keys)
        start = res.resumed = cut
        assistants = len(res.matched)
    if reinstated:
        taken.reserve(reinstated.values())  # no earlier message takes a turn put back after it
    for i in range(start, len(msgs)):
        m = msgs[i]
        if m.role == "user":
            _map_tool_results(m, i, id_map, res)
            continue
        if m.role != "assistant":
            continue
        assistants += 1
        id_map = {}  # tool results answer the assistant message right before them
        turn = pinned.get(i) if pinned else None
        if turn is None and m.replay_digest and (turn := recs.conversation.find_digest(m.replay_digest)):
            # replayed verbatim: its blocks are the recorded ones, nothing to decode or restore; all of
            # its thinking is verified (sanitize is given ``verbatim``, whether or not it decodes it)
            prev, prev_i = turn, i
            res.matched[i] = turn
            taken.add(turn)
            res.verbatim.append(i)
            continue
        if turn is None:
            turn = _place(m, msgs, i, recs.conversation, prev, prev_i, taken, restorations)
        prev, prev_i = turn, i
        if turn is None:
            taken.kept(m)
            _verify_by_exact_text(m, i, recs, res)
            continue
        res.matched[i] = turn
        taken.add(turn)
        client = m
        again = _restoration(m, turn, restorations)
        if again is not None:
            # the same client JSON restored from the same record on this conversation's previous request (as
            # the record's JSON: the recorded turn as relayed)
            _learn_id_map(m, turn.content, id_map)
            m = msgs[i] = again.message
            verbatim = True
            res.changed = True
            res.actions.append(Action(ActionKind.RESTORED, i))
        else:
            restored = list(turn.content)
            _learn_id_map(m, restored, id_map)
            if not _same(m.peek_content(), restored) or m.provider != turn.provider:
                m = msgs[i] = _restored(m, turn, restored)
                verbatim = m.raw_blocks is not None  # restored as the record's JSON
                if verbatim and i not in reinstated:
                    made[id(client)] = Restoration(client, turn, client.source, m)
                res.changed = True
                res.actions.append(Action(ActionKind.RESTORED, i))
                if i in reshaped:
                    res.actions.append(Action(reshaped[i][1], i))
            else:  # exactly the recorded turn already (a surface whose messages carry no replay digest)
                verbatim = True
        mapped = mapped or bool(id_map)
        if verbatim:  # the recorded turn as relayed: all of its thinking is verified (sanitize is given it)
            res.verbatim.append(i)
            if m is not client:
                res.restored[i] = m
            # a next request matches afresh what a turn recorded without a replay digest (the conversation
            # cannot say whether it still holds it)
            uncarried = uncarried or turn.scid != recs.scid or not turn.replay_digest
            for key in client.tool_use_ids():
                keys.setdefault(key, i)
            continue
        for b in m.content:
            if b.type in THINKING_TYPES:
                res.verified.add(id(b))
    # every assistant message the recorded turn as relayed and no id mapped: repair's only actions are the
    # restorations
    if assistants == len(res.verbatim) and not mapped and not uncarried and len(res.actions) == len(res.restored) \
            and not reinstated:
        j = bisect.bisect_left(res.verbatim, start) if res.resumed and resumed is not None else 0  # taken over
        digests = resumed.digests[:j] if resumed is not None else []
        new = [msgs[i].replay_digest or res.matched[i].replay_digest for i in res.verbatim[j:]]
        res.repaired = Repaired(len(msgs), client_msgs, recs.scid, dict(res.matched), digests + new,
                                (resumed.held[:j] if resumed is not None else []) + recs.conversation.held(new),
                                dict(res.restored), tuple(res.actions), keys)
    # the restorations the next request may make again: the carried ones (of messages it may still hold) and new
    return res, RepairPrior(res.repaired, {**restorations, **made} if made else restorations)


def _covers(resumed: Repaired, msgs: list[Message]) -> bool:
    """Whether ``msgs`` start with the very messages ``resumed`` looked at (not a history rebuilt, nor one the
    replay memo decoded again)."""
    n = resumed.count
    return len(msgs) >= n and len(resumed.messages) == n and all(map(operator.is_, msgs[:n], resumed.messages))


class _Taken:
    """What of the conversation a request's history has taken so far, for ``_place``: the turns matched (by
    position, read from ``RepairResult.matched`` when first asked: a verbatim replay never asks) and the tool
    ids of the client messages kept as they are (they go upstream with those ids)."""

    __slots__ = ("_matched", "_positions", "ids")

    def __init__(self, res: RepairResult) -> None:
        self._matched = res.matched
        self._positions: set[int] | None = None
        self.ids: set[str] = set()

    def kept(self, m: Message) -> None:
        self.ids.update(m.tool_use_ids())

    def reserve(self, turns: Iterable[RecordedTurn]) -> None:
        """``turns`` are taken by messages further on (turns put back in their shape, ``gateway.reshape``)."""
        if self._positions is None:
            self._positions = {t.position for t in self._matched.values()}
        self._positions.update(t.position for t in turns)

    def add(self, turn: RecordedTurn) -> None:
        """``turn`` was just matched (``RepairResult.matched`` has it)."""
        if self._positions is not None:
            self._positions.add(turn.position)

    def holds(self, turn: RecordedTurn) -> bool:
        """Whether ``turn`` is taken already: matched to an earlier message, or its tool ids in a kept one."""
        if self._positions is None:
            self._positions = {t.position for t in self._matched.values()}
        return turn.position in self._positions or bool(self.ids and self.ids.intersection(_tool_ids(turn.content)))


def _resume_cut(resumed: Repaired, msgs: list[Message], recs: Records,
                pinned: Mapping[int, RecordedTurn] | None) -> int:
    """How many of ``msgs`` repair takes as ``resumed`` found them (0: none). Not in another conversation, nor
    with pinned turns. A message matched by its replay digest was matched in the conversation alone; one matched
    by its lookups (restored, or exactly its turn already) was matched by the index hits too, which this
    request's (the recent turns' lookups: a handful) may answer differently now: the cut comes before the first
    such message one of them concerns, and only while the conversation still holds exactly the turns before it
    (one C-level pass)."""
    if pinned or resumed.scid != recs.scid or resumed.count > len(msgs):
        return 0
    cut = resumed.count
    if resumed.keys:
        for key in recs.by_tool_id:
            i = resumed.keys.get(key)
            if i is not None and i < cut:
                cut = i
    j = resumed.before(cut)[0]
    now = recs.conversation.held(resumed.digests[:j])
    return cut if all(map(operator.is_, now, resumed.held[:j])) else 0


def _resume(resumed: Repaired, cut: int, msgs: list[Message], res: RepairResult) -> RecordedTurn | None:
    """Take ``resumed``'s findings for ``msgs[:cut]``: their turns, marks and restorations (each a ``restored``
    action, as matching it again gives). Returns the last matched turn."""
    whole = cut == resumed.count
    j, r = resumed.before(cut)
    res.matched.update(resumed.matched if whole else itertools.islice(resumed.matched.items(), j))
    res.verbatim += itertools.islice(resumed.matched, j)
    if r:
        restored = resumed.restored if whole else dict(itertools.islice(resumed.restored.items(), r))
        put_restored(msgs, restored)
        res.restored.update(restored)
        res.actions += resumed.actions[:r]
        res.changed = True
    return res.matched[res.verbatim[-1]] if res.verbatim else None


def put_restored(msgs: list[Message], restored: Mapping[int, Message]) -> None:
    """Each restored message in its place (``RepairResult.restored``)."""
    for i, m in restored.items():
        msgs[i] = m


@dataclass(frozen=True, slots=True)
class Restoration:
    """How repair restored a client's message ``client`` (``RepairPrior.restorations``): from ``turn``, while the
    message was ``source`` (its ``Message.source``), by putting ``message`` (the record's JSON) in its place."""

    client: Message
    turn: RecordedTurn
    source: list[JSON]
    message: Message


def _restoration(m: Message, turn: RecordedTurn, restorations: Mapping[int, Restoration]) -> Restoration | None:
    """``m``'s restoration from ``turn`` on an earlier request, while ``m`` is still what it was then."""
    again = restorations.get(id(m)) if restorations else None
    if again is not None and again.client is m and again.turn is turn and m.holds(again.source):
        return again
    return None


def _restored(m: Message, turn: RecordedTurn, blocks: list[Block]) -> Message:
    """The message that takes ``m``'s place: ``turn`` as recorded. A new object, so the client's message
    stays as it was decoded (undecoded, if it was): the replay memo hands it to the next request, which
    replays the same bytes, without decoding it again."""
    r = Message(m.role, extra=dict(m.extra), provider=turn.provider, replay_digest=m.replay_digest)
    wire = turn.wire
    if wire is not None:
        # exactly the recorded turn, as a verbatim replay is: its recorded JSON goes upstream (encoders
        # splice it), its blocks are built only if a later stage needs them
        r.restore_raw(wire, functools.partial(_blocks, turn), turn.replay_digest)
    else:
        r.content = blocks
    return r


def _blocks(turn: RecordedTurn) -> list[Block]:
    return list(turn.content)


def _place(m: Message, msgs: list[Message], i: int, conv: ConversationView, prev: RecordedTurn | None,
           prev_i: int, taken: _Taken, restorations: Mapping[int, Restoration]) -> RecordedTurn | None:
    """The identified conversation's turn at message ``i``'s place, when the evidence singles out one and nothing
    contradicts it (see the module docstring); None otherwise."""
    if not conv:
        return None
    named = {t.position: t for t in map(conv.find_tool, m.tool_use_ids()) if t is not None}
    named.update((t.position, t) for t in map(conv.find_thinking, lookup_hashes(m)[1]) if t is not None)
    by_place = not named
    if len(named) > 1:
        return None  # its tool ids (or thinking) name several turns
    if named:
        turn: RecordedTurn | None = next(iter(named.values()))
    else:
        turn = conv.find_path(msgs, i)
        if turn is None and prev is not None and prev_i >= 0:
            turn = conv.get(prev.position + 1)
            if turn is not None and _results_between(msgs, prev_i, i) != len(_tool_ids(prev.content)):
                turn = None  # the messages between do not answer the previous turn alone (one was dropped)
    if turn is None or taken.holds(turn):
        return None
    # the same client JSON restored from this record before: it agreed then
    if _restoration(m, turn, restorations) is None and not _agrees(m, turn, by_place):
        return None
    return turn


def _agrees(m: Message, turn: RecordedTurn, by_place: bool) -> bool:
    """Whether the record agrees with what the client kept of it: as many tool calls, with the same names, and
    the same inputs where the client kept them; for a turn found by its place, also the client's text (when it
    kept any) among the turn's."""
    calls = [b for b in m.peek_content() if isinstance(b, ToolUseBlock)]
    recorded = [b for b in turn.content if isinstance(b, ToolUseBlock)]
    if len(calls) != len(recorded):
        return False
    for c, r in zip(calls, recorded, strict=True):
        if c.name != r.name or (c.input and c.input != r.input):
            return False
    if by_place:
        hashes = lookup_hashes(m)[0]
        if hashes and set(hashes).isdisjoint(block_hashes(turn.content)):
            return False
    return True


def _results_between(msgs: list[Message], a: int, b: int) -> int:
    return sum(len(m.result_shape().result_ids) for m in msgs[a + 1:b] if m.role == "user")


def _verify_by_exact_text(m: Message, i: int, recs: Records, res: RepairResult) -> None:
    for b in m.content:
        if not isinstance(b, ThinkingBlock) or b.thinking is None:
            continue
        sig = recs.signatures.get(exact_hash(b.thinking))
        if sig is None:
            continue
        if b.signature != sig:
            b.signature = sig
            res.changed = True
            res.actions.append(Action(ActionKind.SIGNATURE_RESTORED, i))
        res.verified.add(id(b))


def _learn_id_map(m: Message, restored: Iterable[Block], id_map: dict[str, str]) -> None:
    """Client tool ids that differ from the recorded ones map back by order (in the results that follow)."""
    recorded = [b.id for b in restored if isinstance(b, ToolUseBlock)]
    client = m.tool_use_ids()
    if len(recorded) == len(client):
        for c, r in zip(client, recorded, strict=True):
            if c != r:
                id_map[c] = r


def _map_tool_results(m: Message, i: int, id_map: dict[str, str], res: RepairResult) -> None:
    if not id_map:
        return
    mapped = False
    for b in m.content:
        if isinstance(b, ToolResultBlock) and b.tool_use_id in id_map:
            b.tool_use_id = id_map[b.tool_use_id]
            mapped = True
            res.changed = True
            res.actions.append(Action(ActionKind.TOOL_ID_MAPPED, i))
    if mapped:
        m.content = list(m.content)  # blocks changed in place: a new list, as ``Message.result_shape`` asks


def _tool_ids(content: Iterable[Block]) -> list[str]:
    return [b.id for b in content if isinstance(b, ToolUseBlock)]


def _same(a: list[Block], b: list[Block]) -> bool:
    return len(a) == len(b) and all(x == y for x, y in zip(a, b, strict=True))
