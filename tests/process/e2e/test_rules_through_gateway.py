"""The process-tier tests of ``tests.support.e2e.rules_through_gateway_tests``
(which holds both tiers': ``tests/tiers.py``)."""

from tests.tiers import share

share(globals(), "tests.support.e2e.rules_through_gateway_tests")
