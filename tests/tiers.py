"""The test tiers in the tree: ``tests/unit`` (no child process, no socket) and ``tests/process`` (real processes:
the simulator, gateways, redis-server). ``tests/conftest.py`` marks each test by what it uses and fails a test that
sits in the other tier's directory.

A module whose tests are of both tiers (most are one test parametrised over the embedded store and real Redis, or a
chart's rendering beside its live install) lives in ``tests/support`` and is shared into both directories by a file
of one line each (``share``); each tier's file keeps its own tier's tests, the others are deselected there."""

from __future__ import annotations

import importlib
from typing import Any

SPLIT = "__tier_split__"


def share(namespace: dict[str, Any], module: str) -> None:
    """Everything ``module`` defines (its tests, fixtures and hooks, private ones too), in ``namespace``: a test
    file's or a conftest's, which pytest then reads as its own."""
    shared = importlib.import_module(module)
    namespace.update({k: v for k, v in vars(shared).items() if not k.startswith("__")})
    namespace[SPLIT] = True
