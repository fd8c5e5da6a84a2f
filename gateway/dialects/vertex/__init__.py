"""Claude and Gemini on Google Vertex AI: ``vertex@PROJECT/REGION`` serves a Claude model as the Messages API
(``rawPredict``; Anthropic's thinking rules: Claude's signatures are valid on every platform, docs/upstream-rules.md,
"signatures across platforms") and any other model as Gemini (``generateContent``; Gemini's signature rules; a
signature Vertex minted goes back to Vertex only: Google states no cross-platform validity). Requests carry an OAuth
bearer token from Google's application default credentials (google-auth, ``thinkgate[gcp]``)."""

from __future__ import annotations

import re

from gateway.dialects.anthropic import Anthropic
from gateway.dialects.cloud import Auth, CloudTarget
from gateway.dialects.gemini import Gemini

_PROJECT = re.compile(r"^[a-z][a-z0-9-]{4,28}[a-z0-9]$")
_REGION = re.compile(r"^(global|[a-z]+-[a-z]+\d+)$")
_CLAUDE = re.compile(r"(?:^|/)claude-")


class VertexAnthropic(Anthropic):
    kind = "vertex-anthropic"
    bare_route = False
    listed_for = ""
    passthrough_from = ""
    platform = "gcp"


class VertexGemini(Gemini):
    kind = "vertex-gemini"
    bare_route = False
    listed_for = ""
    platform = "gcp"


CLAUDE = VertexAnthropic()
GEMINI = VertexGemini()


def _split(location: str) -> tuple[str, str]:
    project, _, region = location.partition("/")
    return project, region


def _problem(location: str) -> str | None:
    project, region = _split(location)
    if not _PROJECT.match(project) or not _REGION.match(region):
        return "is not PROJECT/REGION (such as my-project/us-east5, or my-project/global)"
    return None


def _base_url(location: str, override: str | None) -> str:
    project, region = _split(location)
    host = "https://aiplatform.googleapis.com" if region == "global" else f"https://{region}-aiplatform.googleapis.com"
    return f"{(override or host).rstrip('/')}/v1/projects/{project}/locations/{region}"


def _kind_for(model: str) -> str:
    return CLAUDE.kind if _CLAUDE.search(model) else GEMINI.kind


def _auth(location: str) -> Auth:
    from gateway.dialects.vertex.token import GoogleToken

    return GoogleToken()


TARGETS = (CloudTarget("vertex", _kind_for, _base_url, _problem, _auth, "vertex_base_url"),)
