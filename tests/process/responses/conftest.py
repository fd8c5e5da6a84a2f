"""The responses tests' fixtures (``tests.support.responses.fixtures``)."""

from tests.tiers import share

share(globals(), "tests.support.responses.fixtures")
