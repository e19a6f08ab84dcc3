"""The fixed symbols of the recall-by-distance task (docs/results/recall.md): the key marker, the query
marker and the closed set of keys, each one token of the task's fairseq dictionary.

They are dictionary symbols of their own, written into the text as they are and never passed
through sentencepiece: fairseq splits a line at white space, so each is one token whatever the
filler text is (the data-prep stage refuses a sentencepiece model with a piece equal to one of
them), and the shell needs no quotes for ``--loss-after-symbol @query``. Standard library
only: :mod:`fairseq_plugins.lab.common.arms` reads :data:`QUERY_MARKER` before fairseq is imported.
"""

from typing import List

KEY_MARKER = "@key"
QUERY_MARKER = "@query"
# the names the keys are drawn from; --keys K uses the first K (K = 32 by default, 64 at most)
NAMES = ("Ada", "Basil", "Cora", "Dmitri", "Edith", "Felix", "Greta", "Hugo", "Ines", "Jonas", "Kira", "Leon",
         "Mira", "Nils", "Olga", "Pavel", "Quinn", "Rosa", "Silas", "Tessa", "Umar", "Vera", "Wendel", "Xenia",
         "Yusuf", "Zora", "Anton", "Bianca", "Caspar", "Delia", "Emil", "Flora", "Gideon", "Hedda", "Ivo", "Jana",
         "Konrad", "Lotte", "Milo", "Nadia", "Oskar", "Petra", "Rafael", "Sanna", "Tobias", "Ulla", "Viktor",
         "Wilma", "Yara", "Zeno", "Arvid", "Berit", "Cyril", "Dora", "Elias", "Frida", "Gustav", "Helga", "Igor",
         "Judit", "Kasper", "Linnea", "Magnus", "Nora")
MAX_KEYS = len(NAMES)


def key_symbols(keys: int) -> List[str]:
    """The dictionary symbols of the first ``keys`` names (``@Ada``, ``@Basil``, ...), in order.

    Raises:
        ValueError: ``keys`` outside 1..:data:`MAX_KEYS` (the data-prep stage checks it first).
    """
    if not 1 <= keys <= MAX_KEYS:
        raise ValueError(f"keys must be in 1..{MAX_KEYS}, not {keys}")
    return ["@" + name for name in NAMES[:keys]]
