"""Bounded structure-aware fuzzing (the long campaign is ``make fuzz``: tests/fuzz/campaign.py).

Derandomized so CI sees the same examples every run; a failure prints the
minimized mutated model. Every example must end in success or a HalError that
is a proper status, never another exception (which a server reports as
GENERAL_FAILURE "internal error").
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings

from tests.fuzz.harness import Case, exercise, mutated, seeds

#: A sample of the seed models (every 4th vector file) keeps loading under a second or two.
SEEDS = seeds(4)


@settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(mutated(SEEDS))
def test_mutated_models_and_requests_get_a_status(example: tuple[Case, list[bytearray]]) -> None:
    case, pools = example
    exercise(case, pools)
