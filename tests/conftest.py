"""Shared pytest configuration. Fixture modules live beside it as plugins:

- ``tests/redis_fixtures.py``: real ``redis-server`` (single node and 3-master Cluster).
- ``tests/process_fixtures.py``: real ``thinkgate sim`` / ``thinkgate serve`` child processes.
- ``tests/gemini/fixtures.py``: the gateways the Gemini / OpenAI-compatible suites share.
"""

pytest_plugins = ["tests.redis_fixtures", "tests.process_fixtures", "tests.gemini.fixtures"]
