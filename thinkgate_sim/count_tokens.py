"""What ``POST /v1/messages/count_tokens`` takes beyond ``/v1/messages``' rules (``RULE_COUNT_TOKENS_INPUT``, 111).

Pure. The endpoint validates the body as ``/v1/messages`` does (``rules.check_messages_request`` with
``count_tokens=True``: the same message, ``system``, tool and thinking rules), except that it has no
``max_tokens``; and it takes only the fields of the SDK's ``MessageCountTokensParams`` (beta fields included): any
other top-level key, ``max_tokens``, ``temperature`` or ``stream`` among them, is
``{key}: Extra inputs are not permitted``, reported after the schema of the known fields. Sources in
docs/upstream-rules.md.
"""

from __future__ import annotations

from typing import Any

RULE_COUNT_TOKENS_INPUT = 111
# anthropic SDK 2.14.0 MessageCountTokensParams and beta.MessageCountTokensParams, less the header params
# (betas, user_profile_id, workspace_id)
FIELDS = frozenset(("model", "messages", "system", "thinking", "tool_choice", "tools", "cache_control",
                    "output_config", "speed", "billing_policy", "compaction", "context_management", "mcp_servers"))


def check_fields(body: dict[str, Any]) -> str | None:
    extra = next((key for key in body if key not in FIELDS), None)
    return f"{extra}: Extra inputs are not permitted" if extra is not None else None
