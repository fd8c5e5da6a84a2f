"""Shared pytest configuration. Fixture modules live beside it as plugins:

- ``tests/redis_fixtures.py``: real ``redis-server`` (single node and 3-master Cluster).
- ``tests/process_fixtures.py``: real ``thinkgate sim`` / ``thinkgate serve`` child processes.
- ``tests/gemini/fixtures.py``: the gateways the Gemini / OpenAI-compatible suites share.
"""

from __future__ import annotations

import functools
import ssl
from typing import Any

import pytest

pytest_plugins = ["tests.redis_fixtures", "tests.process_fixtures", "tests.gemini.fixtures"]


def pytest_configure(config: pytest.Config) -> None:
    """One default SSL context per set of trust anchors in the test process.

    Every ``httpx.Client`` (so every ``httpx.get``, and every anthropic / openai / google-genai SDK
    client, which are httpx clients) builds ``ssl.create_default_context()`` when it is created, and
    loading the CA bundle into it costs ~20 ms, even for the plain-http loopback URLs that are all the
    tests ever reach: thousands of clients, over a minute of the suite. A context is only read by the
    connections that use it, so handing every caller the same one (built with the same arguments)
    changes nothing they do. Child processes (gateways, simulators) are not affected.
    """
    original = ssl.create_default_context

    @functools.cache
    def shared(purpose: Any, cafile: Any, capath: Any, cadata: Any) -> ssl.SSLContext:
        return original(purpose, cafile=cafile, capath=capath, cadata=cadata)

    def create_default_context(purpose: Any = ssl.Purpose.SERVER_AUTH, *, cafile: Any = None,
                               capath: Any = None, cadata: Any = None) -> ssl.SSLContext:
        return shared(purpose, cafile, capath, cadata)

    ssl.create_default_context = create_default_context  # type: ignore[assignment]
    config.add_cleanup(lambda: setattr(ssl, "create_default_context", original))
