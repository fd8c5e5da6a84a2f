"""The process-tier tests of ``tests.support.gateway.replay_memo_openai_tests``
(which holds both tiers': ``tests/tiers.py``)."""

from tests.tiers import share

share(globals(), "tests.support.gateway.replay_memo_openai_tests")
