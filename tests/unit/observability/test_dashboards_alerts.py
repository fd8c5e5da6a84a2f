"""The unit-tier tests of ``tests.support.observability.dashboards_alerts_tests``
(which holds both tiers': ``tests/tiers.py``)."""

from tests.tiers import share

share(globals(), "tests.support.observability.dashboards_alerts_tests")
