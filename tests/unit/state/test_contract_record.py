"""The unit-tier tests of ``tests.support.state.contract_record_tests``
(which holds both tiers': ``tests/tiers.py``)."""

from tests.tiers import share

share(globals(), "tests.support.state.contract_record_tests")
