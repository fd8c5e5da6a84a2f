"""The records as repair sees them: a recorded turn (``RecordedTurn``: where it sits and its exact content), the
identified conversation's turns by position with their finders by replay digest, tool id, signed thinking and path
(``ConversationView``: ``gateway.pipeline.repair.records`` provides the lazy view over stored records,
``TurnsConversation`` one
held in memory), and everything the load stage found for one request (``Records``). Pure.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from gateway.dialects.canonical import JSON, Block, Message, ProviderFields, ThinkingBlock, ToolUseBlock
from gateway.pipeline.identify import PathHash
from state.hashing import exact_hash


class RecordedTurn:
    """A turn record as repair sees it: where it sits and its exact content.

    ``content`` holds canonical blocks and ``prompt`` the request-side messages this turn answered
    (after the previous turn; only a history rebuild needs them). ``gateway.pipeline.repair.records`` subclasses it to
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
        self.model = model  # the model that produced it ("" when not recorded):
        # ``gateway.pipeline.repair.model_switch``

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
