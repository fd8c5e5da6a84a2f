"""thinkgate's state package: records every relayed assistant turn and finds it again.

Public entry points: ``state.factory.open_store`` -> ``state.store.Store``; the data model in
``state.records``; lookup hashing in ``state.keys``; key scheme, tenant prefix and SCIDs in
``state.keys``. This package never imports ``gateway``.
"""

from state.errors import CodecError, StoreError, StoreUnavailable
from state.factory import open_store
from state.keys import compute_turn_id, exact_hash, new_scid, norm_hash, normalize_text, tenant_prefix
from state.records import ConversationState, Location, TurnRecord, VerifiedPair
from state.store import LoadQuery, LoadResult, RecordResult, Store, StoreHealth, TurnWrite

__all__ = [
    "CodecError", "ConversationState", "LoadQuery", "LoadResult", "Location", "RecordResult", "Store",
    "StoreError", "StoreHealth", "StoreUnavailable", "TurnRecord", "TurnWrite", "VerifiedPair",
    "compute_turn_id", "exact_hash", "new_scid", "norm_hash", "normalize_text", "open_store",
    "tenant_prefix",
]
