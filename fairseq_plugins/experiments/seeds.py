"""The training seeds of a recipe's ``--seeds`` option (scripts/quickstart.sh, sorting.sh,
summarization-comparison.sh, recall.sh through ``fairseq-longmem arms seeds``). Standard library only."""

from typing import List

from fairseq_plugins.errors import ConfigError


def parse_seeds(text: str) -> List[str]:
    """The training seeds of a ``--seeds`` option (``"1,2,3"`` or ``"1 2 3"``), in the order given.

    Raises:
        ConfigError: an empty list, a seed that is not a non-negative integer, a seed given twice.
    """
    seeds = [s for s in text.replace(",", " ").split()]
    if not seeds:
        raise ConfigError("--seeds needs at least one seed (e.g. --seeds 1,2,3)")
    for seed in seeds:
        if not seed.isdigit() or not seed.isascii():
            raise ConfigError(f"--seeds takes non-negative integers separated by commas (e.g. 1,2,3), got '{seed}'")
    twice = sorted({s for s in seeds if seeds.count(s) > 1}, key=seeds.index)
    if twice:
        raise ConfigError(f"seed {', '.join(twice)} given twice in --seeds {text.strip()}; give each seed once")
    return [str(int(s)) for s in seeds]
