"""``Exchange``: everything one client request carries through the pipeline (shared vocabulary of the stages,
the endpoints, the metrics and the logs, so none of them imports another to name it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gateway.actions import Action
from gateway.continuation.replay_memo import Continuation
from gateway.dialects.anthropic import codec as anthropic
from gateway.dialects.canonical import Message, Request, Turn
from gateway.dialects.routing import ModelCaps
from gateway.vocab import ClientDialect, Endpoint, Via
from state.store import LoadQuery


@dataclass(slots=True)
class ClientRequest:
    """What the client sent, as it came."""

    endpoint: Endpoint
    dialect: ClientDialect           # the client's (surface) dialect
    request_id: str
    headers: dict[str, str]          # client headers, lowercase names
    query: str
    raw_body: bytes
    # its top-level JSON fields as its surface read them, in its order (the history's value is not read from here):
    # what an upstream of the client's own dialect gets as sent (``gateway.surfaces.common``); None until decoded
    fields: dict[str, Any] | None = None
    objects: int | None = None       # the body's count of ``{`` when the memory estimate counted it

    @property
    def betas(self) -> frozenset[str]:
        return frozenset(anthropic.betas(self.headers))


@dataclass(slots=True)
class RouteDecision:
    """The request's one routing decision."""

    upstream: str = "anthropic"      # the upstream's name (routing table)
    caps: ModelCaps | None = None    # the model's capabilities (None: not routed yet)


@dataclass(slots=True)
class Identity:
    """Whose request it is and which conversation it continues (``gateway.pipeline.identify``)."""

    tenant: str | None = None        # HMAC prefix of the credential, never the credential
    previous_tenant: str | None = None  # the prefix under GATEWAY_PREVIOUS_SECRET (rotation)
    header_scid: str | None = None
    # (conversation, position) of the turn a ``previous_response_id`` names: its history is rebuilt up to that turn
    branch_at: tuple[str, int] | None = None
    scid: str | None = None          # the conversation this exchange belongs to (sent back)
    via: Via = "none"
    expected_position: int | None = None
    fork: bool = False               # record on a fork: the client's path left the recorded one
    prefix_fp: str | None = None     # path fingerprint of the client's history before its last assistant message
    stateful: bool = False           # records were consulted (store up, state machine on)
    stateless: str | None = None     # why they were not (``metrics.stateless_reason``), counted once served
    # the load the store could not answer (away, slow, breaker open): the turn is recorded later, placed by it
    deferred: LoadQuery | None = None


@dataclass(slots=True)
class RecordPlan:
    """What the stages did and what is sent and recorded."""

    actions: list[Action] = field(default_factory=list)
    outgoing: bytes = b""            # the encoded upstream body
    turn: Turn | None = None         # the finished assistant turn
    recorded: bool = False
    position: int | None = None      # where the turn was recorded (with ``identity.scid``), once it is
    prefix_note: dict[str, Any] = field(default_factory=dict)  # recorded with the turn
    # (``gateway.pipeline.repair.prefix``)
    prefix_added: list[Message] = field(default_factory=list)  # messages ``gateway.pipeline.repair.prefix`` inserted


@dataclass(slots=True)
class Exchange:
    """Everything one client request carries through the pipeline: what the client sent, the route, the identity,
    the decoded request, the record plan, and its part in the continuation."""

    client: ClientRequest
    route: RouteDecision = field(default_factory=RouteDecision)
    identity: Identity = field(default_factory=Identity)
    request: Request | None = None
    plan: RecordPlan = field(default_factory=RecordPlan)
    # its part in the continuation: the replay memo's ticket, what the stages carry
    # (``gateway.continuation.replay_memo``)
    continuation: Continuation = field(default_factory=Continuation)
