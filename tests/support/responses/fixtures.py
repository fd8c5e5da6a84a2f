"""The Responses suites' clients: the official openai SDK, one per replica of the shared pair
(``tests.support.gemini.fixtures.provider_pair``: two gateways on one redis-server, every upstream kind at the
simulator)."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from tests.support.gemini.matrix import Pair
from tests.support.responses.helpers import KEY


@pytest.fixture()
def clients(provider_pair: Pair) -> Iterator[list[openai.OpenAI]]:
    made = [openai.OpenAI(base_url=g.url + "/v1", api_key=KEY, max_retries=0)
            for g in (provider_pair.a, provider_pair.b)]
    yield made
    for c in made:
        c.close()
