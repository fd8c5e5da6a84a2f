"""Thinking signatures the simulator mints and later insists on getting back unchanged.

A signature is an HMAC-SHA256 (keyed with the simulator secret) over:

* the block kind (``thinking`` or ``redacted_thinking``),
* the model *family*: the model string without a trailing date or ``-latest``
  (``claude-sonnet-4-5-20250929`` and ``claude-sonnet-4-5`` share a family,
  ``claude-opus-4-1`` is another), so a block is never valid for another model,
* the response id and the block's index in that response, and its position in
  and the length of its run of consecutive thinking blocks,
* the exact UTF-8 bytes of the thinking text (empty text included).

Any byte change of the text (CRLF -> LF, a trailing space, a trim) therefore
invalidates it, and a signature is never valid for other text.

Wire format (base64, like the real ones, usually starting with ``Eq``): a
protobuf-shaped envelope ``0x12 <varint len> <fields>`` whose fields carry the
response id, index, run position, run length, the MAC and padding derived from
the MAC. Verification parses the envelope, re-mints from the parsed fields and
compares the whole string in constant time, so the encoding is canonical: no
other string for the same block verifies.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
from dataclasses import dataclass

_DOMAIN = b"thinkgate-sim/v1"
_KIND_THINKING = b"thinking"
_KIND_REDACTED = b"redacted_thinking"
_FAMILY_SUFFIX = re.compile(r"(?:[-@]\d{8}|-latest)$")
# inner lengths whose varint's first byte is 0xA_: the base64 then starts with "Eq"
_THINKING_INNER = 164
_REDACTED_INNER = 296
_MAX_ID = 200
_MAX_INDEX = 1 << 20


@dataclass(frozen=True, slots=True)
class MintInfo:
    """Where a verified block was minted: its response, index and thinking run."""

    response_id: str
    index: int
    run_pos: int = 0
    run_len: int = 1


def model_family(model: str) -> str:
    """``claude-sonnet-4-5-20250929`` -> ``claude-sonnet-4-5``; Vertex ``@20250929`` too."""
    return _FAMILY_SUFFIX.sub("", model)


class Minter:
    """Mints and verifies ``thinking`` signatures and ``redacted_thinking`` data."""

    __slots__ = ("_key",)

    def __init__(self, secret: bytes) -> None:
        self._key = hashlib.sha256(b"thinkgate-sim-key\0" + secret).digest()

    def __repr__(self) -> str:
        return "Minter(<secret>)"

    # ------------------------------------------------------------ thinking
    def mint_thinking(self, model: str, text: str, response_id: str, index: int, *,
                      run_pos: int | None = None, run_len: int | None = None) -> str:
        """Signature for ``text`` as block ``index`` of ``response_id``.

        ``run_pos``/``run_len`` place the block in its run of consecutive thinking
        blocks; by default the run starts at index 0 and ends with this block.
        """
        info = _info(response_id, index, run_pos, run_len)
        return self._mint(_KIND_THINKING, model, _text_bytes(text), info, _THINKING_INNER)

    def verify_thinking(self, model: str, text: str, sig: object) -> MintInfo | None:
        return self._verify(_KIND_THINKING, model, _text_bytes(text), sig, _THINKING_INNER)

    # ------------------------------------------------------------ redacted
    def mint_redacted(self, model: str, response_id: str, index: int, *,
                      run_pos: int | None = None, run_len: int | None = None) -> str:
        """Opaque ``data`` for a ``redacted_thinking`` block (the data is its own signature)."""
        info = _info(response_id, index, run_pos, run_len)
        return self._mint(_KIND_REDACTED, model, b"", info, _REDACTED_INNER)

    def verify_redacted(self, model: str, data: object) -> MintInfo | None:
        return self._verify(_KIND_REDACTED, model, b"", data, _REDACTED_INNER)

    # ------------------------------------------------------------ internals
    def _mac(self, kind: bytes, model: str, text: bytes, info: MintInfo) -> bytes:
        parts = (_DOMAIN, kind, model_family(model).encode(), info.response_id.encode(),
                 str(info.index).encode(), str(info.run_pos).encode(), str(info.run_len).encode())
        msg = b"".join(len(p).to_bytes(4, "big") + p for p in parts) + text
        return hmac.new(self._key, msg, hashlib.sha256).digest()

    def _mint(self, kind: bytes, model: str, text: bytes, info: MintInfo, inner_len: int) -> str:
        mac = self._mac(kind, model, text, info)
        fields = (_field_bytes(1, b"\x18\x02") + _field_bytes(2, info.response_id.encode())
                  + _field_varint(3, info.index) + _field_varint(4, info.run_pos)
                  + _field_varint(5, info.run_len) + _field_bytes(6, mac))
        pad_len = 48  # fallback when the id is too long for the target length
        for head in (2, 3):
            n = inner_len - len(fields) - head
            if n >= 0 and 1 + len(_varint(n)) == head:
                pad_len = n
                break
        pad = _expand(mac, pad_len)
        inner = fields + _field_bytes(7, pad)
        return base64.b64encode(b"\x12" + _varint(len(inner)) + inner).decode("ascii")

    def _verify(self, kind: bytes, model: str, text: bytes, sig: object,
                inner_len: int) -> MintInfo | None:
        if not isinstance(sig, str) or not sig or len(sig) > 4096:
            return None
        info = _parse(sig)
        if info is None:
            return None
        expected = self._mint(kind, model, text, info, inner_len)
        return info if hmac.compare_digest(expected, sig) else None


def _info(response_id: str, index: int, run_pos: int | None, run_len: int | None) -> MintInfo:
    pos = index if run_pos is None else run_pos
    length = pos + 1 if run_len is None else run_len
    if not (0 <= index < _MAX_INDEX and 0 <= pos < length < _MAX_INDEX):
        raise ValueError(f"bad block position index={index} run_pos={pos} run_len={length}")
    if not 0 < len(response_id.encode()) <= _MAX_ID:
        raise ValueError("response_id must be 1..200 bytes")
    return MintInfo(response_id, index, pos, length)


def _text_bytes(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def _expand(seed: bytes, n: int) -> bytes:
    out = b""
    counter = 0
    while len(out) < n:
        out += hashlib.sha256(b"pad" + counter.to_bytes(4, "big") + seed).digest()
        counter += 1
    return out[:n]


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _field_bytes(num: int, value: bytes) -> bytes:
    return bytes([num << 3 | 2]) + _varint(len(value)) + value


def _field_varint(num: int, value: int) -> bytes:
    return bytes([num << 3]) + _varint(value)


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while pos < len(buf) and shift < 35:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
    raise ValueError("bad varint")


def _parse(sig: str) -> MintInfo | None:
    """Fields of a well-formed envelope, or None. Says nothing about authenticity."""
    try:
        raw = base64.b64decode(sig, validate=True)
        if not raw or raw[0] != 0x12:
            return None
        length, pos = _read_varint(raw, 1)
        if pos + length != len(raw):
            return None
        fields: dict[int, bytes | int] = {}
        while pos < len(raw):
            tag = raw[pos]
            pos += 1
            num, wire = tag >> 3, tag & 7
            if wire == 2:
                n, pos = _read_varint(raw, pos)
                fields[num] = raw[pos:pos + n]
                pos += n
            elif wire == 0:
                fields[num], pos = _read_varint(raw, pos)
            else:
                return None
        rid, index, run_pos, run_len = fields.get(2), fields.get(3), fields.get(4), fields.get(5)
        if not (isinstance(rid, bytes) and isinstance(index, int) and isinstance(run_pos, int)
                and isinstance(run_len, int)):
            return None
        return _info(rid.decode("utf-8"), index, run_pos, run_len)
    except (binascii.Error, ValueError, UnicodeDecodeError):
        return None
