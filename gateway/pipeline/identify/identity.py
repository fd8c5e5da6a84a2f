"""Who is asking (tenant) and which conversation this is (SCID).

- Tenant: HMAC of the client's credential (``x-api-key``, ``x-goog-api-key`` or bearer token) under
  ``GATEWAY_SECRET``; the credential itself never leaves this function.
- SCID candidates, in order: the ``X-AG-Conversation-Id`` header; the tool_use ids
  of the replayed history; a fingerprint of the conversation prefix (the user side of the
  history, which clients replay faithfully far more often than the assistant side). Text never
  picks a conversation (``identify_conversation``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gateway.dialects.canonical import Message, assistant_indexes
from gateway.dialects.credentials import credential_of
from gateway.dialects.toolchain import dropped_result_ids
from gateway.pipeline.identify.lookup import lookup_hashes
from gateway.pipeline.identify.paths import Known, path_fingerprint
from gateway.vocab import Via
from state.keys import is_valid_scid, tenant_prefix
from state.store import LoadQuery, LoadResult

SCID_HEADER = "x-ag-conversation-id"


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
