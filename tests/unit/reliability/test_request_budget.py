"""The unit-tier tests of ``tests.support.reliability.request_budget_tests``
(which holds both tiers': ``tests/tiers.py``)."""

from tests.tiers import share

share(globals(), "tests.support.reliability.request_budget_tests")
