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

Bound models (``thinkgate_sim.binding``) mint with a ``Binding``: the producing model
family (envelope field 8) and the block's prefix record (field 9: digests of the
``system``, the tool set and the earlier messages, and of the previous thinking block,
the chain), both covered by the MAC. A tampered bound signature fails the MAC like any
other; an authentic one whose recorded prefix differs from the request's is "bound to a
different conversation". Signatures minted without a ``Binding`` are byte-identical to
before (no fields 8 and 9, the same MAC input).

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
_KIND_COMPACTION = b"compaction"
_FAMILY_SUFFIX = re.compile(r"(?:[-@]\d{8}|-latest)$")
# inner lengths whose varint's first byte is 0xA_: the base64 then starts with "Eq"
_THINKING_INNER = 164
_REDACTED_INNER = 296
_BOUND_THINKING_INNER = 292
_BOUND_REDACTED_INNER = 420
_MAX_ID = 200
_MAX_INDEX = 1 << 20


BINDING_DIGEST = 12  # bytes of each digest in a prefix record


@dataclass(frozen=True, slots=True)
class Binding:
    """What a bound block commits to: the prefix it was minted under and the block before it."""

    system: bytes
    tools: bytes
    messages: bytes
    chain: bytes  # digest of the previous thinking block's signature/data, or 12 zero bytes

    def encode(self) -> bytes:
        return self.system + self.tools + self.messages + self.chain

    @classmethod
    def decode(cls, raw: bytes) -> Binding | None:
        n = BINDING_DIGEST
        if len(raw) != 4 * n:
            return None
        return cls(raw[:n], raw[n:2 * n], raw[2 * n:3 * n], raw[3 * n:])


@dataclass(frozen=True, slots=True)
class MintInfo:
    """Where a verified block was minted: its response, index and thinking run; for a bound
    block also the producing model family and its prefix record."""

    response_id: str
    index: int
    run_pos: int = 0
    run_len: int = 1
    producer: str | None = None
    binding: Binding | None = None


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
                      run_pos: int | None = None, run_len: int | None = None,
                      binding: Binding | None = None) -> str:
        """Signature for ``text`` as block ``index`` of ``response_id``.

        ``run_pos``/``run_len`` place the block in its run of consecutive thinking
        blocks; by default the run starts at index 0 and ends with this block.
        ``binding`` (bound models only) adds the producer and the prefix record.
        """
        info = _info(response_id, index, run_pos, run_len, model, binding)
        return self._mint(_KIND_THINKING, model, _text_bytes(text), info)

    def verify_thinking(self, model: str, text: str, sig: object) -> MintInfo | None:
        """The block's mint info if ``sig`` was minted by ``model``'s family for exactly ``text``."""
        return self._verify(_KIND_THINKING, model, _text_bytes(text), sig)

    def inspect_thinking(self, text: str, sig: object) -> MintInfo | None:
        """A bound signature verified under the producer it names (another model's block), or None."""
        info = _parse(sig)
        if info is None or info.producer is None:
            return None
        return self._verify(_KIND_THINKING, info.producer, _text_bytes(text), sig)

    # ------------------------------------------------------------ redacted
    def mint_redacted(self, model: str, response_id: str, index: int, *,
                      run_pos: int | None = None, run_len: int | None = None,
                      binding: Binding | None = None) -> str:
        """Opaque ``data`` for a ``redacted_thinking`` block (the data is its own signature)."""
        info = _info(response_id, index, run_pos, run_len, model, binding)
        return self._mint(_KIND_REDACTED, model, b"", info)

    def verify_redacted(self, model: str, data: object) -> MintInfo | None:
        return self._verify(_KIND_REDACTED, model, b"", data)

    def inspect_redacted(self, data: object) -> MintInfo | None:
        info = _parse(data)
        if info is None or info.producer is None:
            return None
        return self._verify(_KIND_REDACTED, info.producer, b"", data)

    # ------------------------------------------------------------ compaction
    def mint_compaction(self, content: str) -> str:
        """The ``signature`` of a ``compaction`` block: over exactly its ``content`` bytes."""
        mac = hmac.new(self._key, _KIND_COMPACTION + b"\0" + _text_bytes(content), hashlib.sha256).digest()
        return base64.b64encode(b"\x1a\x20" + mac).decode("ascii")

    def verify_compaction(self, content: str, sig: object) -> bool:
        return isinstance(sig, str) and hmac.compare_digest(self.mint_compaction(content), sig)

    # ------------------------------------------------------------ internals
    def _mac(self, kind: bytes, model: str, text: bytes, info: MintInfo) -> bytes:
        parts: tuple[bytes, ...] = (
            _DOMAIN, kind, model_family(model).encode(), info.response_id.encode(),
            str(info.index).encode(), str(info.run_pos).encode(), str(info.run_len).encode())
        if info.binding is not None:
            parts += (b"bound", info.binding.encode())
        msg = b"".join(len(p).to_bytes(4, "big") + p for p in parts) + text
        return hmac.new(self._key, msg, hashlib.sha256).digest()

    def _mint(self, kind: bytes, model: str, text: bytes, info: MintInfo) -> str:
        mac = self._mac(kind, model, text, info)
        fields = (_field_bytes(1, b"\x18\x02") + _field_bytes(2, info.response_id.encode())
                  + _field_varint(3, info.index) + _field_varint(4, info.run_pos)
                  + _field_varint(5, info.run_len) + _field_bytes(6, mac))
        if info.binding is not None:
            fields += _field_bytes(8, model_family(model).encode()) + _field_bytes(9, info.binding.encode())
        inner_len = {(False, False): _THINKING_INNER, (False, True): _REDACTED_INNER,
                     (True, False): _BOUND_THINKING_INNER,
                     (True, True): _BOUND_REDACTED_INNER}[info.binding is not None, kind == _KIND_REDACTED]
        pad_len = 48  # fallback when the id is too long for the target length
        for head in (2, 3):
            n = inner_len - len(fields) - head
            if n >= 0 and 1 + len(_varint(n)) == head:
                pad_len = n
                break
        pad = _expand(mac, pad_len)
        inner = fields + _field_bytes(7, pad)
        return base64.b64encode(b"\x12" + _varint(len(inner)) + inner).decode("ascii")

    def _verify(self, kind: bytes, model: str, text: bytes, sig: object) -> MintInfo | None:
        info = _parse(sig)
        if info is None:
            return None
        expected = self._mint(kind, model, text, info)
        return info if hmac.compare_digest(expected, str(sig)) else None


def _info(response_id: str, index: int, run_pos: int | None, run_len: int | None,
          model: str | None = None, binding: Binding | None = None) -> MintInfo:
    pos = index if run_pos is None else run_pos
    length = pos + 1 if run_len is None else run_len
    if not (0 <= index < _MAX_INDEX and 0 <= pos < length < _MAX_INDEX):
        raise ValueError(f"bad block position index={index} run_pos={pos} run_len={length}")
    if not 0 < len(response_id.encode()) <= _MAX_ID:
        raise ValueError("response_id must be 1..200 bytes")
    producer = model_family(model) if binding is not None and model is not None else None
    return MintInfo(response_id, index, pos, length, producer, binding)


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


def _parse(sig: object) -> MintInfo | None:
    """Fields of a well-formed envelope, or None. Says nothing about authenticity."""
    if not isinstance(sig, str) or not sig or len(sig) > 4096:
        return None
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
        producer, bound = fields.get(8), fields.get(9)
        if producer is None and bound is None:
            return _info(rid.decode("utf-8"), index, run_pos, run_len)
        binding = Binding.decode(bound) if isinstance(bound, bytes) else None
        if not isinstance(producer, bytes) or not producer or binding is None:
            return None
        return _info(rid.decode("utf-8"), index, run_pos, run_len, producer.decode("utf-8"), binding)
    except (binascii.Error, ValueError, UnicodeDecodeError):
        return None
