"""Issue 21's rule: each surface's endpoint module is thin (its logic lives in its codec, protocol and state modules;
``handler`` and ``common`` are the shared machinery), and no endpoint imports another (``lint-imports``)."""

from __future__ import annotations

from pathlib import Path

import gateway.surfaces

# the shared machinery of the surfaces package, beside the endpoint modules: the handler and its helpers, the surface
# table, the upstream call table, model listing, the Responses surface's record readers and seals, export formats
SHARED = {"__init__.py", "handler.py", "common.py", "table.py", "model_listing.py", "model_lists.py",
          "responses_state.py", "reasoning_seal.py", "export.py"}
LIMIT = 52  # "about 40 lines": the longest today is chat.py (51)


def test_every_surface_endpoint_module_is_thin() -> None:
    folder = Path(gateway.surfaces.__file__).parent
    sizes = {p.name: len(p.read_text().splitlines()) for p in folder.glob("*.py") if p.name not in SHARED}
    assert {"responses.py", "models.py", "response_get.py", "chat.py", "messages.py", "gemini.py"} <= set(sizes)
    assert {name: n for name, n in sizes.items() if n > LIMIT} == {}
