"""The strict Anthropic upstream simulator: signs thinking, enforces the replay rules, scripts replies.

``signing`` (HMAC signatures), ``rules`` (pure validator), ``binding`` (prefix and model binding of
thinking blocks on the bound models), ``convo`` (shared message view),
``scenarios`` (marker-driven replies), ``render`` (SSE events), ``app`` (HTTP shell, ``run_sim``).
"""
