"""The reliability tests' fixtures (``tests.support.reliability.fixtures``)."""

from tests.tiers import share

share(globals(), "tests.support.reliability.fixtures")
