"""Who is asking (tenant) and which conversation this is (SCID).

- Tenant: HMAC of the client's credential (``x-api-key``, ``x-goog-api-key`` or bearer token) under
  ``GATEWAY_SECRET``; the credential itself never leaves this function.
- SCID candidates, in order: the ``X-AG-Conversation-Id`` header; the tool_use ids
  of the replayed history; normalized-text hashes of replayed assistant text and
  thinking; a fingerprint of the conversation prefix (the user side of the
  history, which clients replay faithfully far more often than the assistant side).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gateway.protocols.canonical import Message, TextBlock, ToolResultBlock, assistant_indexes
from gateway.repair import lookup_hashes
from state.hashing import normalize_text
from state.keys import is_valid_scid, tenant_prefix
from state.store import LoadQuery, LoadResult

SCID_HEADER = "x-ag-conversation-id"


def credential_of(headers: Mapping[str, str]) -> str | None:
    key = headers.get("x-api-key") or headers.get("x-goog-api-key")
    if key:
        return key
    auth = headers.get("authorization", "")
    scheme, _, token = auth.partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    return None


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
                    norm = normalize_text(b.text)
                    if norm:
                        self.seen = True
                        h.update(b"\x1f" + norm.encode("utf-8", "surrogatepass"))
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


def prefix_before_last_assistant(msgs: list[Message]) -> list[Message]:
    for i in range(len(msgs) - 1, -1, -1):
        if msgs[i].role == "assistant":
            return msgs[:i]
    return []


RECENT_TURNS = 3  # replayed assistant turns looked up through the indexes


@dataclass(frozen=True, slots=True)
class Replayed:
    """What the load query reads of every assistant message of a request, in order: replay digests and tool
    ids (``LoadQuery.replayed``, ``replayed_tool_ids``). A function of the messages' bytes alone, so the next
    request of the conversation, which starts with the same bytes (``replay_memo``), starts from it."""

    count: int                   # the messages it covers, ``messages[:count]``
    digests: list[bytes]         # of every assistant message, while each has one (``every``)
    tool_ids: list[list[str]]    # of every assistant message, while ``every``
    every: bool                  # every assistant message has a replay digest


def replayed_of(msgs: list[Message], prior: Replayed | None = None) -> Replayed:
    """``msgs``' ``Replayed``, continuing ``prior`` (that of ``msgs[:prior.count]``, left as it is)."""
    if prior is None or prior.count > len(msgs):
        prior = Replayed(0, [], [], True)
    if not prior.every:
        return Replayed(len(msgs), [], [], False)
    digests, tool_ids = list(prior.digests), list(prior.tool_ids)
    for i in range(prior.count, len(msgs)):
        m = msgs[i]
        if m.role == "assistant":
            if not m.replay_digest:
                return Replayed(len(msgs), [], [], False)
            digests.append(m.replay_digest)
            tool_ids.append(m.tool_use_ids())
    return Replayed(len(msgs), digests, tool_ids, True)


def build_query(msgs: list[Message], scid: str | None, known: Known | None = None,
                replayed: Replayed | None = None) -> LoadQuery:
    """Index lookups for the most recent replayed assistant turns only: they identify the
    conversation, which is loaded whole in the same (or the next) round trip; older turns are
    matched against it in memory. The query stays small however long the history is. With it go the
    replay digests of all replayed assistant turns (``LoadQuery.replayed``: a worker that holds all of
    them answers without a round trip); ``replayed``: ``msgs``' own, when the caller has it."""
    tool_ids: list[str] = []
    norm: list[str] = []
    exact: list[str] = []
    for i in assistant_indexes(msgs, RECENT_TURNS, from_end=True):
        m = msgs[i]
        tool_ids += m.tool_use_ids()
        norms, exacts = lookup_hashes(m)  # an undecoded message stays so (``replay_memo`` reuses it as it is)
        norm += norms
        exact += exacts
    fps = []
    prefix = prefix_before_last_assistant(msgs)
    fp = path_fingerprint(prefix, known) if prefix else None
    if fp:
        fps.append(fp)
    if replayed is None or replayed.count != len(msgs):
        replayed = replayed_of(msgs)
    every = replayed.every
    return LoadQuery(scid=scid, tool_ids=_dedup(tool_ids), exact_hashes=_dedup(exact),
                     norm_hashes=_dedup(norm), fingerprints=fps, replayed=replayed.digests if every else (),
                     replayed_tool_ids=replayed.tool_ids if every else ())


@dataclass(frozen=True, slots=True)
class Identified:
    scid: str | None
    via: str   # header | tool_id | text | fingerprint | none


def identify_conversation(result: LoadResult, query: LoadQuery) -> Identified:
    """Pick the conversation: header hit, else the most referenced by tool ids, text, fingerprint."""
    if query.scid and result.conversation is not None:
        return Identified(query.scid, "header")
    by_tool = Counter(loc.scid for loc in result.tool_hits.values())
    if by_tool:
        return Identified(by_tool.most_common(1)[0][0], "tool_id")
    by_text = Counter(loc.scid for loc in result.norm_hits.values())
    if by_text:
        return Identified(by_text.most_common(1)[0][0], "text")
    for fp in query.fingerprints:
        scid = result.fingerprint_hits.get(fp)
        if scid:
            return Identified(scid, "fingerprint")
    return Identified(None, "none")


def first_method(query: LoadQuery) -> str | None:
    """The first method ``identify_conversation`` tries for ``query`` (its order), the one a miss is
    counted under; ``None``: the query has nothing to find (a first turn)."""
    if query.scid:
        return "header"
    if query.tool_ids:
        return "tool_id"
    if query.norm_hashes or query.exact_hashes:
        return "text"
    return "fingerprint" if query.fingerprints else None


def _dedup(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))
