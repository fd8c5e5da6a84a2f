"""The cloud platforms through real processes: a gateway whose routes send models to Bedrock and Vertex AI at the
simulator, with the credentials those platforms' SDKs read (an AWS key pair the simulator's SigV4 check knows; a
service-account key file whose ``token_uri`` is the simulator's token endpoint, read by google-auth as application
default credentials)."""

from __future__ import annotations

import json
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.process_fixtures import Sim
from thinkgate_sim.sigv4 import TEST_KEYS

BEDROCK_CLAUDE = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
CONVERSE_CLAUDE = "eu.anthropic.claude-sonnet-4-5-20250929-v1:0"  # (another prefix: the bedrock-converse@ route)
VERTEX_CLAUDE = "claude-sonnet-4-5@20250929"
VERTEX_GEMINI = "gemini-3.1-pro-preview"  # (distinct from the AI Studio and compat routes of the same sim)
PROJECT = "thinkgate-test"
REGION = "us-east5"
KEY_ID, SECRET = next(iter(TEST_KEYS.items()))


def service_account(path: Path, token_uri: str) -> Path:
    """A service-account key file (a fresh RSA key) whose tokens come from ``token_uri``."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    path.write_text(json.dumps({
        "type": "service_account", "project_id": PROJECT, "private_key_id": "thinkgate-test-key",
        "private_key": pem, "client_email": f"thinkgate@{PROJECT}.iam.gserviceaccount.com",
        "client_id": "1", "token_uri": token_uri}))
    return path


def cloud_env(sim: Sim, tmp: Path, upstream: str | None = None, **extra: str) -> dict[str, str]:
    """A gateway's environment with Bedrock (``us.anthropic.`` models; ``eu.anthropic.`` through Converse) and
    Vertex AI (``claude-sonnet-4-5@`` and ``gemini-3.1-`` models) at ``upstream`` (default the simulator);
    everything else goes where it always does."""
    url = upstream or sim.url
    routes = (f"us.anthropic.=bedrock@us-east-1,eu.anthropic.=bedrock-converse@us-east-1,"
              f"claude-sonnet-4-5@=vertex@{PROJECT}/{REGION},"
              f"gemini-3.1-=vertex@{PROJECT}/{REGION}")
    return {"GATEWAY_ROUTES": routes, "GATEWAY_BEDROCK_BASE_URL": url, "GATEWAY_VERTEX_BASE_URL": url,
            "GATEWAY_CLOUD_WITHOUT_KEYS": "true",  # (tests/process/cloud/test_platforms.py: with gateway keys only)
            "GATEWAY_GEMINI_BASE_URL": sim.url,
            "AWS_ACCESS_KEY_ID": KEY_ID, "AWS_SECRET_ACCESS_KEY": SECRET,
            "AWS_CONFIG_FILE": str(tmp / "none"), "AWS_SHARED_CREDENTIALS_FILE": str(tmp / "none"),
            "AWS_EC2_METADATA_DISABLED": "true",
            "GOOGLE_APPLICATION_CREDENTIALS": str(service_account(tmp / "sa.json", sim.url + "/token")),
            **extra}
