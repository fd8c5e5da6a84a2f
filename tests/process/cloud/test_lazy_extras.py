"""The cloud libraries are imported only when a route names their platform: a gateway without such a route starts
without botocore or google-auth (the base install stays small), and a route whose extra is missing is a clear
settings error at startup."""

from __future__ import annotations

import subprocess
import sys

import pytest

PROBE = """
import sys
from gateway.app.factory import create_app
from gateway.app.settings import Settings
create_app(Settings(routes="gpt-=copilot@https://example.invalid/v1"))
print(sorted(m for m in ("botocore", "google.auth", "requests") if m in sys.modules))
"""


@pytest.mark.process
def test_a_gateway_without_cloud_routes_loads_no_cloud_library() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout


MISSING = """
import builtins, sys
real = builtins.__import__
def no_botocore(name, *a, **k):
    if name.startswith("botocore"):
        raise ImportError(name)
    return real(name, *a, **k)
builtins.__import__ = no_botocore
from gateway.app.settings import Settings, SettingsError
try:
    Settings(routes="us.=bedrock@us-east-1").upstream_auths()
except SettingsError as e:
    print("refused:", e)
"""


@pytest.mark.process
def test_a_bedrock_route_without_the_aws_extra_is_a_settings_error() -> None:
    done = subprocess.run([sys.executable, "-c", MISSING], capture_output=True, text=True, timeout=60, check=False)
    assert "refused: a bedrock route needs botocore: pip install 'thinkgate[aws]'" in done.stdout, done.stderr
