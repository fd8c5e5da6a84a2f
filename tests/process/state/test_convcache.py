"""The process-tier tests of ``tests.support.state.convcache_tests``
(which holds both tiers': ``tests/tiers.py``)."""

from tests.tiers import share

share(globals(), "tests.support.state.convcache_tests")
