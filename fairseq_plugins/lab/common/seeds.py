"""The training seeds of a recipe's ``--seeds`` option (scripts/quickstart.sh, sorting.sh,
summarization-comparison.sh, recall.sh through ``fairseq-longmem arms seeds``). Standard library only."""

import re
from typing import List

from fairseq_plugins.errors import ConfigError


def parse_seeds(text: str) -> List[str]:
    """The training seeds of a ``--seeds`` option (``"1,2,3"`` or ``"1 2 3"``), in the order given.

    Raises:
        ConfigError: an empty list or item (``1,,2``), a seed that is not an integer in [0, 2³²)
            (numpy's and fairseq's range), a seed given twice (``01,1`` too).
    """
    items = re.split(r"\s*,\s*|\s+", text.strip())  # commas or white space; "1,,2" has an empty item
    if not any(items):
        raise ConfigError("--seeds needs at least one seed (e.g. --seeds 1,2,3)")
    for seed in items:
        if not seed.isdigit() or not seed.isascii() or int(seed) >= 2 ** 32:
            raise ConfigError(f"--seeds takes integers from 0 to 4294967295 separated by commas (e.g. 1,2,3), "
                              f"got '{seed}'" if seed else f"--seeds {text.strip()} has an empty item; "
                              f"separate the seeds by one comma (e.g. 1,2,3)")
    seeds = [str(int(s)) for s in items]  # 01 is 1
    twice = sorted({s for s in seeds if seeds.count(s) > 1}, key=seeds.index)
    if twice:
        raise ConfigError(f"seed {', '.join(twice)} given twice in --seeds {text.strip()}; give each seed once")
    return seeds
