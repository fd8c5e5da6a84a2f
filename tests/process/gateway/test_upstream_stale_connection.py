"""A pooled keep-alive connection the upstream closes just as a request goes out on it (its idle timeout racing
ours) is not a 502: the request is sent again, once, on a fresh connection. Seen as ``could not reach upstream ...:
ClientOSError`` under load in the suites and benches (the simulator's hypercorn closes idle connections after
5 s, aiohttp keeps them 30 s). A second failure is the upstream's: a 502."""

from __future__ import annotations

import asyncio

import pytest

from gateway.errors import GatewayError
from gateway.transport.upstream import Upstream

pytestmark = pytest.mark.process  # a loopback server in this process

ANSWER = b'{"ok": true}'


async def _read_request(reader: asyncio.StreamReader) -> bool:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.lower().split(b"\r\n")
    length = next(int(line.split(b":")[1]) for line in lines if line.startswith(b"content-length"))
    await reader.readexactly(length)
    return True


async def _serve(close_after: list[int], seen: list[int]) -> asyncio.Server:
    """Connection k answers ``close_after[k]`` requests, then reads one more and closes without answering."""
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        k = len(seen)
        seen.append(0)
        try:
            while True:
                await _read_request(reader)
                seen[k] += 1
                if k < len(close_after) and seen[k] > close_after[k]:
                    break  # the request is in; the connection goes away before an answer
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
                             b"connection: keep-alive\r\n\r\n%s" % (len(ANSWER), ANSWER))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()
    return await asyncio.start_server(handle, "127.0.0.1", 0)


async def test_a_request_on_a_connection_the_upstream_closed_is_sent_again() -> None:
    seen: list[int] = []
    server = await _serve([1], seen)
    port = server.sockets[0].getsockname()[1]
    up = Upstream("sim", f"http://127.0.0.1:{port}", connect_timeout=5, read_timeout=5)
    try:
        first = await up.post("/v1/messages", b"{}", {})
        assert first.status == 200 and await first.read() == ANSWER
        second = await up.post("/v1/messages", b"{}", {})  # goes out on the pooled connection, which closes
        assert second.status == 200 and await second.read() == ANSWER
        assert seen == [2, 1]  # the closed connection got it, then a fresh one answered it
    finally:
        await up.close()
        server.close()
        await server.wait_closed()


async def test_a_second_closed_connection_is_a_502() -> None:
    seen: list[int] = []
    server = await _serve([1, 0], seen)
    port = server.sockets[0].getsockname()[1]
    up = Upstream("sim", f"http://127.0.0.1:{port}", connect_timeout=5, read_timeout=5)
    try:
        await (await up.post("/v1/messages", b"{}", {})).read()
        with pytest.raises(GatewayError) as e:
            await up.post("/v1/messages", b"{}", {})
        assert e.value.status == 502 and "could not reach upstream sim" in e.value.message
        assert seen == [2, 1]
    finally:
        await up.close()
        server.close()
        await server.wait_closed()
