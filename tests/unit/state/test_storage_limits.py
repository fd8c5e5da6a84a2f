"""The unit-tier tests of ``tests.support.state.storage_limits_tests``
(which holds both tiers': ``tests/tiers.py``)."""

from tests.tiers import share

share(globals(), "tests.support.state.storage_limits_tests")
