"""The unit-tier tests of ``tests.support.augment.scid_rule_tests``
(which holds both tiers': ``tests/tiers.py``)."""

from tests.tiers import share

share(globals(), "tests.support.augment.scid_rule_tests")
