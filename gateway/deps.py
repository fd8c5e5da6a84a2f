"""The app's dependencies (``Gateway``), the one object every stage and handler is handed: a bottom module, so
the pipeline, the endpoints and the metrics name it without importing the app."""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.hints import ConversationHints
from gateway.replay_memo import ReplayMemo
from gateway.routing import Router
from gateway.settings import Settings
from gateway.upstream import Upstream
from state.store import Store


@dataclass(slots=True)
class Gateway:
    """The app's dependencies, reachable from handlers as ``request.app.state.gateway``."""

    settings: Settings
    upstreams: dict[str, Upstream]
    store: Store | None = None
    router: Router = field(default_factory=Router)
    draining: bool = False
    extra: dict[str, object] = field(default_factory=dict)
    hints: ConversationHints = field(default_factory=ConversationHints)  # tool id -> conversation (a guess)
    replay_memo: ReplayMemo | None = None  # decoded histories of untouched requests (None: off)
