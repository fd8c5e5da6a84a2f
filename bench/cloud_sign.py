"""What signing a request for Bedrock costs (issue 36): botocore's SigV4 (``gateway.dialects.bedrock.sigv4.sign``) of
request bodies of 10 KB, 100 KB, 1 MB and 10 MB, against the gateway's own encode of the same body (``orjson.dumps``
of the parsed request, which every request pays) measured in the same run; and the event-stream reader
(``wire.EventStreamFraming``) against the SSE decoder for the same answer's events.

    python bench/cloud_sign.py [--repeats 200] [--sizes 10,100,1024,10240]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import orjson
from botocore.credentials import Credentials

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.latency import median_us
from gateway.dialects.bedrock import wire
from gateway.dialects.bedrock.sigv4 import sign
from gateway.sse import SSEDecoder
from thinkgate_sim import eventstream
from thinkgate_sim.wire import encode_event

URL = "https://bedrock-runtime.us-east-1.amazonaws.com/model/us.anthropic.claude-sonnet-4-5-20250929-v1%3A0/invoke"
CREDS = Credentials("AKIDBENCH", "bench-secret", "bench-session-token")


def request(kb: int) -> dict[str, object]:
    turns = max(1, kb * 1024 // 400)
    return {"max_tokens": 1024, "anthropic_version": "bedrock-2023-05-31",
            "messages": [{"role": "user" if i % 2 == 0 else "assistant", "content": f"word{i} " * 60}
                         for i in range(turns)] + [{"role": "user", "content": "go on"}]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=200)
    ap.add_argument("--sizes", default="10,100,1024,10240", help="request body sizes, KB, comma-separated")
    args = ap.parse_args()
    print("| body | encode (baseline) | SigV4 sign | sign / encode |")
    print("| --- | --- | --- | --- |")
    for kb in (int(k) for k in args.sizes.split(",")):
        data = request(kb)
        body = orjson.dumps(data)
        repeats = max(5, args.repeats // max(1, kb // 100))
        encode = median_us(lambda data=data: orjson.dumps(data), repeats)
        signing = median_us(lambda body=body: sign(CREDS, "us-east-1", "POST", URL,
                                                   {"content-type": "application/json"}, body), repeats)
        print(f"| {len(body) / 1024:,.0f} KB | {encode:,.0f} us | {signing:,.0f} us | {signing / encode:.2f} |")
    events = [{"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "word " * 8}}] * 2000
    framed = b"".join(eventstream.chunk(e) for e in events)
    sse = b"".join(encode_event("content_block_delta", e) for e in events)
    read_es = median_us(lambda: list(wire.EventStreamFraming().feed(framed)), 20)
    read_sse = median_us(lambda: list(SSEDecoder().feed(sse)), 20)
    print(f"\n2,000 stream events: SSE decode {read_sse:,.0f} us, event-stream read (botocore, base64) "
          f"{read_es:,.0f} us, ratio {read_es / read_sse:.2f}")


if __name__ == "__main__":
    main()
