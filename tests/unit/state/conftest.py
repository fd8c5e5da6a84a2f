"""The state tests' fixtures (``tests.support.state.fixtures``)."""

from tests.tiers import share

share(globals(), "tests.support.state.fixtures")
