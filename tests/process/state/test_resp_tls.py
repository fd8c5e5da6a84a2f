"""The process-tier tests of ``tests.support.state.resp_tls_tests``
(which holds both tiers': ``tests/tiers.py``)."""

from tests.tiers import share

share(globals(), "tests.support.state.resp_tls_tests")
