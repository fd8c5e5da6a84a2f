"""Identify: who is asking (tenant) and which conversation this is (SCID), and what each replayed message is
looked up by. Pure, but for the per-worker hint memory.

- Tenant: HMAC of the client's credential (``x-api-key``, ``x-goog-api-key`` or bearer token) under
  ``GATEWAY_SECRET``; the credential itself never leaves ``tenant_of``. Which header holds it is one rule
  (``credential_of``), read by every upstream's auth header too (``gateway.surfaces.common``): a request is
  recorded under the tenant of the key it is billed to.
- SCID candidates, in order: the ``X-AG-Conversation-Id`` header; the tool_use ids of the replayed history; the
  fingerprint of the conversation's path (the user side of the history, which clients replay faithfully far more
  often than the assistant side: ``path_fingerprint``). Text never picks a conversation (``identify_conversation``).
- A recorded turn keeps the fingerprint of the path it answered (``TurnRecord.prefix_fingerprint``); a replayed
  message's place in its conversation is where that path leads (``gateway.pipeline.repair``).
- What a replayed assistant message is looked up by (``lookup_hashes``): the normalized hashes of its thinking and
  text blocks, ``<think>``-tagged text included (``block_hashes``: they confirm the text of a turn found by its
  place), and the exact hashes of its thinking texts (load query keys, and the signed thinking that names a turn).
- ``ConversationHints``: a per-process memory of which conversation a tool_use id belongs to, only a hint. A client
  that sends no ``X-AG-Conversation-Id`` is recognised by the index entries of its replayed turns; the conversation
  those entries name then takes a second store round trip to load. This worker remembers, per tenant, the
  conversation of the tool ids it saw in the first and in the most recent assistant turns of requests it served and
  of turns it recorded, and passes its guess to the store as ``LoadQuery.hint_scid``: the store loads it in the first
  round trip and keeps it only if the index agrees. Redis stays the authority: a wrong or stale guess costs the
  bytes read, never a wrong answer, and any replica without the memory just takes the second round trip. Bounded
  (LRU).
"""

from __future__ import annotations

import hashlib
import re
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gateway.dialects.canonical import Block, Message, TextBlock, ThinkingBlock, ToolResultBlock, assistant_indexes
from gateway.dialects.toolchain import dropped_result_ids
from gateway.errors import ClientError
from gateway.vocab import Via
from state.keys import exact_hash, is_valid_scid, norm_hash, normalized_bytes, tenant_prefix
from state.store import LoadQuery, LoadResult

# --- the path of a conversation ---

class PathHash:
    """``path_fingerprint`` as a running hash: the state after some messages, continued over more."""

    __slots__ = ("_h", "seen")

    def __init__(self) -> None:
        self._h = hashlib.sha256(b"tg-path/2")
        self.seen = False

    def update(self, msgs: Iterable[Message]) -> PathHash:
        h = self._h
        for m in msgs:
            if m.role != "user":
                continue
            results = 0
            h.update(b"\x1eU")
            for b in m.content:
                if isinstance(b, TextBlock):
                    norm = normalized_bytes(b.text)
                    if norm:
                        self.seen = True
                        h.update(b"\x1f")
                        h.update(norm)
                elif isinstance(b, ToolResultBlock):
                    results += 1
            if results:
                self.seen = True
                h.update(b"\x1dR%d" % results)
        return self

    def copy(self) -> PathHash:
        out = PathHash.__new__(PathHash)
        out._h, out.seen = self._h.copy(), self.seen
        return out

    def hexdigest(self) -> str | None:
        return self._h.hexdigest() if self.seen else None


Known = tuple[int, PathHash]  # the running hash after a list's first n messages, known beforehand


def path_fingerprint(msgs: list[Message], known: Known | None = None) -> str | None:
    """Fingerprint of the user side of ``msgs``: each user message's text (normalized) and how many
    tool results it carried. Tool result bodies are left out: they are large and add nothing to
    telling conversations apart. ``known``: the hash after ``msgs[:n]`` (a replay's kept prefix), so
    only the messages after it are hashed."""
    if known is not None and known[0] <= len(msgs):
        return known[1].copy().update(msgs[known[0]:]).hexdigest()
    return PathHash().update(msgs).hexdigest()


# --- what a replayed assistant message is looked up by ---

_TAGGED = re.compile(r"<(think|thinking)>(.*?)</\1>", re.DOTALL)


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


# --- the per-worker hint memory (tool id -> conversation) ---

MAX_ENTRIES = 16_384  # about 3 MB at most
EDGE_TURNS = 3  # assistant turns at each end of a replayed history whose tool ids are remembered


class ConversationHints:
    def __init__(self, max_entries: int = MAX_ENTRIES) -> None:
        self.max_entries = max_entries
        self._scids: OrderedDict[tuple[str, str], str] = OrderedDict()

    def __len__(self) -> int:
        return len(self._scids)

    def learn(self, tenant: str, tool_ids: Iterable[str], scid: str) -> None:
        for tid in tool_ids:
            key = (tenant, tid)
            self._scids[key] = scid
            self._scids.move_to_end(key)
        while len(self._scids) > self.max_entries:
            self._scids.popitem(last=False)

    def guess(self, tenant: str, tool_ids: Iterable[str]) -> str | None:
        """The conversation most of these tool ids were last seen in (None when none is known)."""
        votes: dict[str, int] = {}
        for tid in tool_ids:
            scid = self._scids.get((tenant, tid))
            if scid is not None:
                votes[scid] = votes.get(scid, 0) + 1
        return max(votes, key=votes.__getitem__) if votes else None


def edge_tool_ids(msgs: list[Message]) -> list[str]:
    """Tool ids of the first and the last ``EDGE_TURNS`` replayed assistant turns: the first ones stay
    the same for a whole conversation (until the client trims its history), the last ones are new."""
    first = assistant_indexes(msgs, EDGE_TURNS)
    last = assistant_indexes(msgs, EDGE_TURNS, from_end=True)
    if not first or last[0] <= first[-1]:  # the two ends overlap: a short history, all of its assistant turns
        picked = sorted(set(first) | set(last))
    else:
        picked = first + last
    return [tid for i in picked for tid in msgs[i].tool_use_ids()]


# --- tenant and conversation ---

SCID_HEADER = "x-ag-conversation-id"


# The client's credential, read from its headers: the one rule both the tenant (``tenant_of``) and every
# upstream's auth header (``gateway.surfaces.common``) use, so a request is always recorded under the tenant of the
# key it is billed to.
# the headers a credential comes in: each may be sent once (or repeated with the same value)
KEY_HEADERS = ("x-api-key", "x-goog-api-key")  # a key as it is; ``authorization`` carries a bearer token
CREDENTIAL_HEADERS = frozenset({*KEY_HEADERS, "authorization"})
CONFLICTING = ("the request carries different API keys in {names}; send one credential "
               "(x-api-key, x-goog-api-key or Authorization: Bearer)")


def credential_of(headers: Mapping[str, str]) -> str | None:
    """The request's API key: ``x-api-key``, ``x-goog-api-key`` or a bearer token. A request that carries two
    different keys is refused (400): recorded under one and billed to the other is what it would otherwise get."""
    found: dict[str, str] = {}
    for name in KEY_HEADERS:
        value = headers.get(name, "").strip()
        if value:
            found[name] = value
    scheme, _, token = headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        found["authorization"] = token.strip()
    keys = set(found.values())
    if len(keys) > 1:
        raise ClientError(400, CONFLICTING.format(names=" and ".join(found)), "invalid_request_error")
    return keys.pop() if keys else None


def tenant_of(secret: str, headers: Mapping[str, str]) -> str | None:
    cred = credential_of(headers)
    return tenant_prefix(secret.encode(), cred) if cred else None


def scid_from_header(headers: Mapping[str, str]) -> tuple[str | None, bool]:
    """(scid, header_present). A malformed header value is a miss, never an error."""
    raw = headers.get(SCID_HEADER)
    if raw is None:
        return None, False
    raw = raw.strip()
    return (raw if is_valid_scid(raw) else None), True


def prefix_before_last_assistant(msgs: list[Message]) -> list[Message]:
    for i in range(len(msgs) - 1, -1, -1):
        if msgs[i].role == "assistant":
            return msgs[:i]
    return []


RECENT_TURNS = 3  # replayed assistant turns looked up through the indexes


def build_query(msgs: list[Message], scid: str | None, known: Known | None = None) -> LoadQuery:
    """Index lookups for the most recent replayed assistant turns only: they identify the
    conversation, which is loaded whole in the same (or the next) round trip; older turns are
    matched against it in memory. The query stays small however long the history is."""
    tool_ids: list[str] = []
    exact: list[str] = []
    for i in assistant_indexes(msgs, RECENT_TURNS, from_end=True):
        m = msgs[i]
        tool_ids += m.tool_use_ids()
        exact += lookup_hashes(m)[1]  # an undecoded message stays so (``replay_memo`` reuses it as it is)
    tool_ids += dropped_result_ids(msgs)  # the results of a turn the client dropped name it (``toolchain``)
    fps = []
    prefix = prefix_before_last_assistant(msgs)
    fp = path_fingerprint(prefix, known) if prefix else None
    if fp:
        fps.append(fp)
    return LoadQuery(scid=scid, tool_ids=_dedup(tool_ids), exact_hashes=_dedup(exact), fingerprints=fps)


@dataclass(frozen=True, slots=True)
class Identified:
    scid: str | None
    via: Via


def identify_conversation(result: LoadResult, query: LoadQuery) -> Identified:
    """Pick the conversation by the strongest evidence that names exactly one: the client's SCID when this tenant
    holds it; else the replayed tool ids (``tool_conversation``); else the path fingerprint of the history (an
    index entry that two conversations wrote is ambiguous in the store and comes back as no hit). Text never
    picks a conversation: agents write the same words in every conversation ("Let me check the files."), so a
    text hash only confirms a turn repair found by its place (``repair``)."""
    if query.scid and result.conversation is not None:
        return Identified(query.scid, "header")
    scid = tool_conversation(result)
    if scid is not None:
        return Identified(scid, "tool_id")
    for fp in query.fingerprints:
        scid = result.fingerprint_hits.get(fp)
        if scid:
            return Identified(scid, "fingerprint")
    return Identified(None, "none")


def tool_conversation(result: LoadResult) -> str | None:
    """The conversation the tool-id hits name: the one loaded conversation that holds every hit turn (a fork
    holds its parent's turns too, so its latest turn decides between them). None when no conversation holds
    them all or several do and the hits name more than one (a client that numbers its tool calls itself
    sends the same ids in every conversation): conflicting evidence is no evidence."""
    hits = result.tool_hits.values()
    named = {loc.scid for loc in hits}
    if len(named) == 1:
        return next(iter(named))
    if not named:
        return None
    holding = [scid for scid, conv in result.conversations.items()
               if all(conv.turn_by_id(loc.turn_id) is not None for loc in hits)]
    return holding[0] if len(holding) == 1 else None


def first_method(query: LoadQuery) -> str | None:
    """The first method ``identify_conversation`` tries for ``query`` (its order), the one a miss is
    counted under; ``None``: the query has nothing to find (a first turn)."""
    if query.scid:
        return "header"
    if query.tool_ids:
        return "tool_id"
    return "fingerprint" if query.fingerprints else None


def _dedup(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))
