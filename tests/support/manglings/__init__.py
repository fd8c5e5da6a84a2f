"""How IDE clients mangle the history they replay, one module per wire shape:

- ``tests.support.manglings.anthropic``: Anthropic Messages (``content`` block lists): ``MESSAGE_MANGLINGS`` over one
  assistant message's blocks (``mangle_assistants`` applies one to every replayed assistant message),
  ``HISTORY_MANGLINGS`` over the whole ``messages`` list.
- ``tests.support.manglings.openai``: OpenAI chat messages, whatever the upstream behind them (reasoning fields,
  ``extra_content`` signatures, tool-call ids and tool messages): ``MANGLINGS``, and ``BY_UPSTREAM``, the ones
  that touch what each upstream's answers carry.
- ``tests.support.manglings.gemini``: Gemini native ``contents`` (parts, thoughts, ``thoughtSignature``): ``MANGLINGS``.
- ``tests.support.manglings.augment``: Augment chat-stream ``chat_history`` exchanges (nodes, response text):
  ``MANGLINGS``.

Every mangling returns a mangled copy and leaves its input alone. The acceptance matrix
(``tests/process/e2e/test_mangling_matrix.py``) plays them through real gateways, the traffic matrix
(``tests/support/e2e/traffic.py``) plays them all at once through two replicas; the unit, property and
equivalence tests use them too.
"""
