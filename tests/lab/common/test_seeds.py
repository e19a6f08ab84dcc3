"""The training seeds of a recipe's --seeds: commas or white space, each seed once as a number."""

import pytest

from fairseq_plugins.errors import ConfigError
from fairseq_plugins.lab.common.seeds import parse_seeds


@pytest.mark.parametrize("text,seeds", [("1,2,3", ["1", "2", "3"]), ("1 2 3", ["1", "2", "3"]),
                                        (" 3, 1 ,2 ", ["3", "1", "2"]), ("007", ["7"]), ("0", ["0"])])
def test_seeds_in_the_order_given(text, seeds):
    assert parse_seeds(text) == seeds


@pytest.mark.parametrize("text,message", [
    ("", "--seeds needs at least one seed"),
    ("1,,2", "--seeds 1,,2 has an empty item; separate the seeds by one comma"),
    ("1,", "--seeds 1, has an empty item"),
    ("01,1", "seed 1 given twice in --seeds 01,1; give each seed once"),
    ("1,x", "--seeds takes integers from 0 to 4294967295 separated by commas (e.g. 1,2,3), got 'x'"),
    ("-1", "got '-1'"),
    ("4294967296", "got '4294967296'"),
])
def test_bad_seeds_are_one_line_naming_the_fix(text, message):
    with pytest.raises(ConfigError) as error:
        parse_seeds(text)
    assert message in str(error.value) and "\n" not in str(error.value)
