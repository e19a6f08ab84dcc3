"""The long-term memory must carry a token across segments the short-term
memory cannot see (tests/long_range_task.py): learned with the LTM on, at
chance (1/8) with it off."""

import pytest

from long_range_task import NUM_KEYS, train_and_score


@pytest.mark.full
def test_long_term_memory_learns_what_short_term_memory_cannot_see():
    with_ltm = train_and_score(long_term_memory=True)
    without_ltm = train_and_score(long_term_memory=False)
    chance = 1.0 / NUM_KEYS
    assert with_ltm > 0.7, f"∞-former answer accuracy {with_ltm:.2f}"
    assert without_ltm < chance + 0.15, f"memory-off twin answer accuracy {without_ltm:.2f} (chance {chance:.2f})"
