"""The unit-tier tests of ``tests.support.deploy.chart_tests``
(which holds both tiers': ``tests/tiers.py``)."""

from tests.tiers import share

share(globals(), "tests.support.deploy.chart_tests")
