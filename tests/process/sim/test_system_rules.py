"""The process-tier tests of ``tests.support.sim.system_rules_tests``
(which holds both tiers': ``tests/tiers.py``)."""

from tests.tiers import share

share(globals(), "tests.support.sim.system_rules_tests")
