"""Shared pytest configuration. Fixture modules live beside it as plugins:

- ``tests/redis_fixtures.py``: real ``redis-server`` (single node and 3-master Cluster).
- ``tests/process_fixtures.py``: real ``thinkgate sim`` / ``thinkgate serve`` child processes.
- ``tests/support/gemini/fixtures.py``: the gateways the Gemini / OpenAI-compatible suites share.
"""

from __future__ import annotations

import functools
import socket
import ssl
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.tiers import SPLIT

pytest.register_assert_rewrite("tests.support")  # the shared test modules (``tests.tiers``) are test modules too
TESTS = Path(__file__).resolve().parent
pytest_plugins = ["tests.redis_fixtures", "tests.process_fixtures", "tests.support.gemini.fixtures"]


def pytest_configure(config: pytest.Config) -> None:
    """One default SSL context per set of trust anchors in the test process.

    Every ``httpx.Client`` (so every ``httpx.get``, and every anthropic / openai / google-genai SDK
    client, which are httpx clients) builds ``ssl.create_default_context()`` when it is created, and
    loading the CA bundle into it costs ~20 ms, even for the plain-http loopback URLs that are all the
    tests ever reach: thousands of clients, over a minute of the suite. httpx only reads the context
    it made, so handing every such caller the same one (built with the same arguments) changes nothing
    they do. A call that names no trust anchors gets a context of its own, as before: it is made to be
    configured (redis-py's ``rediss://`` connections and ``state.tls`` set its verify mode, load their CA
    and client certificate into it; aiohttp turns verification off in one), and one shared context would
    carry one caller's CA and certificate into every other's. Child processes are not affected.
    """
    original = ssl.create_default_context

    @functools.cache
    def shared(purpose: Any, cafile: Any, capath: Any, cadata: Any) -> ssl.SSLContext:
        return original(purpose, cafile=cafile, capath=capath, cadata=cadata)

    def create_default_context(purpose: Any = ssl.Purpose.SERVER_AUTH, *, cafile: Any = None,
                               capath: Any = None, cadata: Any = None) -> ssl.SSLContext:
        if cafile is None and capath is None and cadata is None:
            return original(purpose)
        return shared(purpose, cafile, capath, cadata)

    ssl.create_default_context = create_default_context  # type: ignore[assignment]
    config.add_cleanup(lambda: setattr(ssl, "create_default_context", original))


# ------------------------------------------------------------------ tiers
# ``unit``: no child process, no socket (``pytest -m unit``, run first by CI, well under a minute). Every other
# test is ``process``: it uses a fixture below (directly or through its own fixtures), or a store backend
# parameter that is a real Redis, or says so with ``@pytest.mark.process`` (or is a ``slow`` soak). A unit test that
# opens a socket or starts a process fails (``_unit_guard``): the tier cannot quietly grow slow.
PROCESS_FIXTURES = frozenset({
    "sim", "gateways", "gateway", "redis_server", "redis_url", "redis_cluster", "redis_cluster_url", "cluster6",
    "restartable_redis", "provider_gateway", "provider_pair", "private_redis", "hostile_gw", "seeded",
    "redis_tls_server", "redis_tls_url", "restartable_tls_redis"})
PROCESS_BACKENDS = frozenset({"redis", "cluster", "tls"})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test with its tier; a test of a shared module (``tests.tiers``) is kept only in its own tier's
    directory, any other test in the other tier's directory is a collection error."""
    kept, dropped, misplaced = [], [], []
    for item in items:
        tier = _tier(item)
        item.add_marker(getattr(pytest.mark, tier))
        where = _directory_tier(item)
        if where is None or where == tier:
            kept.append(item)
        elif getattr(getattr(item, "module", None), SPLIT, False):
            dropped.append(item)
        else:
            misplaced.append(f"{item.nodeid} is a {tier} test in tests/{where}/")
    if misplaced:
        raise pytest.UsageError("tests in the other tier's directory (move them):\n  " + "\n  ".join(misplaced))
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def _tier(item: pytest.Item) -> str:
    params = getattr(getattr(item, "callspec", None), "params", {})
    process = (item.get_closest_marker("process") is not None
               or item.get_closest_marker("slow") is not None  # a soak: never in the unit tier
               or not PROCESS_FIXTURES.isdisjoint(getattr(item, "fixturenames", ()))
               or params.get("backend") in PROCESS_BACKENDS)
    return "process" if process else "unit"


def _directory_tier(item: pytest.Item) -> str | None:
    parts = Path(str(item.path)).resolve().relative_to(TESTS).parts
    return parts[0] if parts and parts[0] in ("unit", "process") else None


class UnitTierViolation(AssertionError):
    pass


@pytest.fixture(autouse=True)
def _unit_guard(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """In a unit test, connecting or binding a socket or starting a process is a failure (mark the test
    ``process`` instead)."""
    if request.node.get_closest_marker("unit") is None:
        return

    def refuse(what: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            raise UnitTierViolation(f"a unit test {what}: mark it @pytest.mark.process")
        return call

    monkeypatch.setattr(socket.socket, "connect", refuse("connected a socket"))
    monkeypatch.setattr(socket.socket, "connect_ex", refuse("connected a socket"))
    monkeypatch.setattr(socket.socket, "bind", refuse("bound a socket"))
    monkeypatch.setattr(subprocess.Popen, "__init__", refuse("started a process"))
