"""The one coherence rule for every per-worker cache: what a replica may trust, and when it reloads.

Any replica may serve any request of a conversation, so the conversation's current state is what Redis holds,
never what one worker remembers of it. A worker may keep what it read or computed of a conversation, but an
entry serves a request only when it is provably the conversation's **current head in Redis**, read in that
request's own round trip (the load): the same incarnation (meta's ``created``) at the same ``version``
(every RECORD and FORK bumps it). A worker never decides by itself that what it holds is current: an entry
whose head differs from the one the request read is dropped, and what it stood for is read or computed
again.

Two ways an entry goes through the rule:

- **Held at a head** (``Head``, ``serves``): the entry was built at one head of one conversation and serves
  only a request whose load read exactly that head. The continuation priors a request hands the next one
  (``gateway.continuation.replay_memo.Carried``: repair's and sanitize's findings, the splice prior, the restorations)
  are
  stamped with the head the conversation had once this worker recorded the request's answer; another replica's
  record in between moves the head, and the next request starts afresh.
- **Extended in the round trip** (``load_args``, ``continues``): the conversation cache
  (``state.convcache``) hands its head to the LOAD script, which compares it with the stored meta inside Redis
  in the same round trip and returns what was recorded since (or everything, for another incarnation). The
  worker's turns are never used without that reply.

Everything else a worker keeps is not conversation state, and is registered as such in ``CACHES`` with the
reason: content-addressed (a function of immutable bytes or objects), a hint the store verifies in the round
trip, or not about conversations at all. ``tests/support/state/coherence_tests.py`` fails when a module builds a cache
(an ``OrderedDict``, ``Lru``, ``ObjectLru``, ``lru_cache``...) that is not registered here.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


@dataclass(frozen=True, slots=True)
class Head:
    """A conversation's head as one read of Redis saw it."""

    scid: str
    created: int   # meta's ``created`` (ms): the incarnation (a conversation that expired and came back differs)
    version: int   # bumped by every RECORD and FORK of the conversation
    next: int      # the position the next append lands at

    def __post_init__(self) -> None:
        if self.version < 0 or self.next < 0:
            raise ValueError("a head's version and next are >= 0")


def serves(held: Head | None, now: Head | None) -> bool:
    """THE rule: what a worker holds as of ``held`` may serve a request whose load read ``now`` only when they are
    the same head of the same conversation. Unknown on either side never serves."""
    return held is not None and now is not None and held == now


def continues(held_created: str, held_next: int, now_created: str, now_start: int, now_next: int) -> bool:
    """The conversation cache's extension rule (applied by the LOAD script inside Redis and checked again on its
    reply): turns ``[.., held_next)`` read of one incarnation are still the conversation's when the stored meta
    is the same incarnation and ``start < held_next <= next`` (RECORD only appends and trims from the front)."""
    return held_created == now_created and now_start < held_next <= now_next


class Kind(Enum):
    HEAD = "serves only at the conversation head it was built at (serves)"
    EXTENDED = "extended by the load's own round trip, never used without its reply (continues)"
    CONTENT = "content-addressed: keyed by immutable bytes or objects, so it cannot be stale"
    VERIFIED_HINT = "a guess the store verifies against the index in the same round trip"
    NOT_CONVERSATION = "holds no conversation state"
    AUTHORITY = "the store itself, not a copy of it (the embedded default: one process, no replicas)"


# module -> (what it caches, how it keeps the rule). Every module that builds a per-worker cache is listed.
CACHES: dict[str, tuple[str, Kind]] = {
    "state/convcache.py": ("the conversations a worker loaded or recorded (delta loads)", Kind.EXTENDED),
    "gateway/continuation/replay_memo.py": (
        "the previous request's body, parsed values, messages and the stages' priors (Carried, stamped with the head "
        "after its record)", Kind.HEAD),
    "state/records.py": ("decoded turns by their stored bytes", Kind.CONTENT),
    "state/lru.py": ("the bounded LRU the other caches are built on", Kind.CONTENT),
    "gateway/pipeline/repair/records.py": ("a record's blocks and stored form, by the record object", Kind.CONTENT),
    "gateway/app/deps.py": ("a record's JSON, by the record object", Kind.CONTENT),
    "gateway/pipeline/identify.py": ("the conversation a tool id was last seen in", Kind.VERIFIED_HINT),
    "gateway/continuation/outage.py": (
        "the exact thinking a worker relayed, by its text's hash, with its signature (a faithful replay verified while "
        "the store is away)", Kind.CONTENT),
    "gateway/surfaces/model_lists.py": ("upstream model lists per tenant, with a TTL", Kind.NOT_CONVERSATION),
    "state/engine.py": ("tenants over their storage budget (a refusal window)", Kind.NOT_CONVERSATION),
    "state/memory_store.py": ("the embedded store's keyspace", Kind.AUTHORITY),
    "gateway/access/admission.py": ("the gateway keys a worker admitted, for admitting them with the store away "
                                    "(GATEWAY_LIMITS_FAIL_OPEN)", Kind.NOT_CONVERSATION),
}
