"""Claude on Amazon Bedrock: ``bedrock@REGION`` (InvokeModel: the Messages body, event-stream framed answers) and
``bedrock-converse@REGION`` (the Converse API). Both are Anthropic's thinking rules: Claude's signatures are valid on
every platform (docs/upstream-rules.md, "signatures across platforms"), so a conversation moves between the Claude
API and Bedrock with its thinking. Requests are signed with SigV4 (botocore's signer, ``thinkgate[aws]``)."""

from __future__ import annotations

import re

from gateway.dialects.anthropic import Anthropic
from gateway.dialects.cloud import Auth, CloudTarget

_REGION = re.compile(r"^[a-z]{2}(-gov|-iso[a-z]*)?-[a-z]+-\d$")
ENDPOINT = "https://bedrock-runtime.{region}.amazonaws.com"


class Bedrock(Anthropic):
    kind = "bedrock"
    bare_route = False
    listed_for = ""
    passthrough_from = ""
    platform = "aws"


class BedrockConverse(Bedrock):
    kind = "bedrock-converse"
    wire = "converse"


DIALECT = Bedrock()
CONVERSE = BedrockConverse()


def _problem(region: str) -> str | None:
    return None if _REGION.match(region) else "is not an AWS region (such as us-east-1)"


def _base_url(region: str, override: str | None) -> str:
    return (override or ENDPOINT.format(region=region)).rstrip("/")


def _auth(region: str) -> Auth:
    from gateway.dialects.bedrock.sigv4 import SigV4

    return SigV4(region)


def _invoke(model: str) -> str:
    return DIALECT.kind


def _converse(model: str) -> str:
    return CONVERSE.kind


TARGETS = (CloudTarget("bedrock", _invoke, _base_url, _problem, _auth, "bedrock_base_url"),
           CloudTarget("bedrock-converse", _converse, _base_url, _problem, _auth, "bedrock_base_url"))
