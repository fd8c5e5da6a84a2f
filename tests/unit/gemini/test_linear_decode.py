"""Issue 32, item 1: a native Gemini request is decoded in time linear in its contents. Each answer's tool-call ids
are minted from the digest of the user side before it (``gemini_parts.deterministic_ids``); that digest was taken
over every earlier message for every content, so 16,001 one-word contents (0.7 MB) kept a worker's CPU busy for 32 s
and its health checks unanswered. Counted in bytes hashed, not in seconds: the same on any machine."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from gateway.dialects.gemini import parts as gemini_parts
from gateway.dialects.gemini import wire as gemini

SHA256 = hashlib.sha256


class CountingSha256:
    hashed = 0

    def __init__(self, data: bytes = b"") -> None:
        self._h = SHA256(data)
        CountingSha256.hashed += len(data)

    def update(self, data: bytes) -> None:
        CountingSha256.hashed += len(data)
        self._h.update(data)

    def copy(self) -> Any:
        out = CountingSha256.__new__(CountingSha256)
        out._h = self._h.copy()
        return out

    def digest(self) -> bytes:
        return self._h.digest()

    def hexdigest(self) -> str:
        return self._h.hexdigest()


def contents(n: int, *, calls: bool) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(n):
        if i % 2 == 0:
            out.append({"role": "user", "parts": [{"text": f"word{i}"}]})
        elif calls:
            out.append({"role": "model", "parts": [{"functionCall": {"name": "f", "args": {"i": i}}}]})
        else:
            out.append({"role": "model", "parts": [{"text": f"answer{i}"}]})
    return out


@pytest.mark.parametrize("calls", [False, True], ids=["text", "function-calls"])
def test_the_bytes_hashed_grow_linearly_with_the_contents(monkeypatch: pytest.MonkeyPatch, calls: bool) -> None:
    monkeypatch.setattr(gemini_parts.hashlib, "sha256", CountingSha256)
    per_content = []
    for n in (1_000, 8_000):
        CountingSha256.hashed = 0
        req = gemini.decode_request({"contents": contents(n, calls=calls)}, "gemini-3-pro-preview", stream=False)
        assert len(req.messages) == n
        per_content.append(CountingSha256.hashed / n)
    # linear: the bytes hashed per content do not grow with the number of contents (quadratic: 8x here)
    assert per_content[1] <= per_content[0] * 1.5, per_content


def test_the_ids_are_those_of_the_whole_prefix() -> None:
    """The incremental digest mints the ids the whole-prefix digest mints (a client replaying the conversation gets
    the same ids again, whichever way they were computed)."""
    req = gemini.decode_request({"contents": contents(9, calls=True)}, "gemini-3-pro-preview", stream=False)
    for i, m in enumerate(req.messages):
        if m.role == "assistant":
            mint = gemini_parts.deterministic_ids(req.messages[:i])
            assert m.tool_use_ids() == [mint(0, "f", {"i": i})]
