"""AWS event-stream framing (``application/vnd.amazon.eventstream``), as Bedrock streams answers: per message a
prelude (total length and headers length, big-endian u32, then the CRC32 of those 8 bytes), the headers (name length
u8, name, type 7 = string, value length u16, value), the payload and the CRC32 of everything before it. The
simulator's own encoder: it shares nothing with the gateway's reader (botocore's parser)."""

from __future__ import annotations

import base64
import struct
import zlib

import orjson


def _header(name: str, value: str) -> bytes:
    n, v = name.encode(), value.encode()
    return struct.pack(">B", len(n)) + n + b"\x07" + struct.pack(">H", len(v)) + v


def message(headers: dict[str, str], payload: bytes) -> bytes:
    head = b"".join(_header(k, v) for k, v in headers.items())
    total = 12 + len(head) + len(payload) + 4
    prelude = struct.pack(">II", total, len(head))
    prelude += struct.pack(">I", zlib.crc32(prelude))
    body = prelude + head + payload
    return body + struct.pack(">I", zlib.crc32(body))


MEDIA_TYPE = "application/vnd.amazon.eventstream"


def chunk(event: object) -> bytes:
    """One ``chunk`` event carrying an Anthropic stream event (InvokeModelWithResponseStream's PayloadPart)."""
    payload = orjson.dumps({"bytes": base64.b64encode(orjson.dumps(event)).decode()})
    return message({":event-type": "chunk", ":content-type": "application/json", ":message-type": "event"}, payload)


def event(name: str, data: object) -> bytes:
    """One event of a Converse stream (``messageStart``, ``contentBlockDelta``, ...): its JSON as the payload."""
    return message({":event-type": name, ":content-type": "application/json", ":message-type": "event"},
                   orjson.dumps(data))


def exception(name: str, text: str) -> bytes:
    """An exception inside a started stream (``throttlingException``, ``modelStreamErrorException``, ...)."""
    return message({":exception-type": name, ":content-type": "application/json", ":message-type": "exception"},
                   orjson.dumps({"message": text}))
