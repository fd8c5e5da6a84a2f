"""A Response object -> the Responses API's SSE event sequence, as the API streams it (``openai`` SDK
``types/responses/response_*_event.py``): ``response.created``, ``response.in_progress``; per output item
``response.output_item.added``, its deltas (``response.reasoning_summary_part.added`` /
``response.reasoning_summary_text.delta`` / ``.done`` / ``response.reasoning_summary_part.done``;
``response.function_call_arguments.delta`` / ``.done``; ``response.content_part.added`` /
``response.output_text.delta`` / ``.done`` / ``response.content_part.done``), ``response.output_item.done`` (the
whole item, ``encrypted_content`` included); then ``response.completed``. Every event carries ``sequence_number``.
"""

from __future__ import annotations

from typing import Any

from thinkgate_sim.deep_json import dumps
from thinkgate_sim.render import split_words


def _pieces(text: str) -> list[str]:
    return split_words(text) if text else []


def events(response: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []

    def emit(etype: str, **fields: Any) -> None:
        out.append({"type": etype, "sequence_number": len(out), **fields})

    emit("response.created", response={**response, "status": "in_progress", "output": [], "usage": None})
    emit("response.in_progress", response={**response, "status": "in_progress", "output": [], "usage": None})
    for n, item in enumerate(response["output"]):
        iid = item["id"]
        if item["type"] == "reasoning":
            emit("response.output_item.added", output_index=n, item={"id": iid, "type": "reasoning", "summary": []})
            for k, part in enumerate(item["summary"]):
                emit("response.reasoning_summary_part.added", item_id=iid, output_index=n, summary_index=k,
                     part={"type": "summary_text", "text": ""})
                for piece in _pieces(part["text"]):
                    emit("response.reasoning_summary_text.delta", item_id=iid, output_index=n, summary_index=k,
                         delta=piece)
                emit("response.reasoning_summary_text.done", item_id=iid, output_index=n, summary_index=k,
                     text=part["text"])
                emit("response.reasoning_summary_part.done", item_id=iid, output_index=n, summary_index=k, part=part)
        elif item["type"] == "function_call":
            emit("response.output_item.added", output_index=n,
                 item={**item, "arguments": "", "status": "in_progress"})
            for piece in _pieces(item["arguments"]):
                emit("response.function_call_arguments.delta", item_id=iid, output_index=n, delta=piece)
            emit("response.function_call_arguments.done", item_id=iid, output_index=n, arguments=item["arguments"])
        else:
            emit("response.output_item.added", output_index=n, item={**item, "content": [], "status": "in_progress"})
            for k, part in enumerate(item["content"]):
                emit("response.content_part.added", item_id=iid, output_index=n, content_index=k,
                     part={**part, "text": ""})
                for piece in _pieces(part["text"]):
                    emit("response.output_text.delta", item_id=iid, output_index=n, content_index=k, delta=piece,
                         logprobs=[])
                emit("response.output_text.done", item_id=iid, output_index=n, content_index=k, text=part["text"],
                     logprobs=[])
                emit("response.content_part.done", item_id=iid, output_index=n, content_index=k, part=part)
        emit("response.output_item.done", output_index=n, item=item)
    emit("response.completed", response=response)
    return out


def sse_frames(response: dict[str, Any]) -> list[bytes]:
    return [b"event: " + e["type"].encode() + b"\ndata: " + dumps(e) + b"\n\n" for e in events(response)]
