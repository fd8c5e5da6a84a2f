"""The process-tier tests of ``tests.support.observability.tracing_tests``
(which holds both tiers': ``tests/tiers.py``)."""

from tests.tiers import share

share(globals(), "tests.support.observability.tracing_tests")
