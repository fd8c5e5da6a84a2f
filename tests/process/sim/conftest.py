"""The sim tests' fixtures (``tests.support.sim.fixtures``)."""

from tests.tiers import share

share(globals(), "tests.support.sim.fixtures")
