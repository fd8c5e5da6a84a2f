"""`thinkgate demo` shows the mangling client failing direct and succeeding through thinkgate."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.process
def test_demo_before_after_table() -> None:
    out = subprocess.run([sys.executable, "-m", "gateway", "demo"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    rows = {line[:22].strip(): line[22:].split() for line in out.stdout.splitlines()
            if line.startswith(("direct to upstream", "through thinkgate"))}
    direct, via = rows["direct to upstream"], rows["through thinkgate"]
    requests, turns_ok, rejected, kept = (int(x) for x in via)
    assert rejected == 0 and turns_ok == requests == 4 and kept == 4
    assert int(direct[2]) == 1  # the upstream rejected the mangled replay
