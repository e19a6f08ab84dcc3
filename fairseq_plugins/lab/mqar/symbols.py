"""The symbols of MQAR, multi-query associative recall (docs/results/mqar.md): the task's vocabulary of
V tokens and the query marker, each one symbol of the task's fairseq dictionary.

Token ids 0..V-1 of the task (Arora et al., "Zoology", ICLR 2024): id 0 is the filler (the paper's
zeros, written ``0``), ids 1..V/2-1 are the keys (``k1`` ... ``k127`` at V = 256), ids V/2..V-1 the
values (``v128`` ... ``v255``). The marker :data:`QUERY_MARKER` stands between a query's key and its
value, so that ``--loss-after-symbol @query`` scores the value alone (the value ends its line).
Standard library only: :mod:`fairseq_plugins.lab.common.arms` reads it before fairseq is imported.
"""

from typing import List

QUERY_MARKER = "@query"
FILLER = "0"


def half(vocab: int) -> int:
    """V/2: the first value id (keys are 1..V/2-1)."""
    return vocab // 2


def max_pairs(vocab: int) -> int:
    """The most key-value pairs an example of vocabulary V can hold: its V/2 - 1 keys (id 0 is the filler)."""
    return half(vocab) - 1


def task_symbols(vocab: int) -> List[str]:
    """The V symbols of the task's ids 0..V-1, in id order: the filler, the keys, the values."""
    h = half(vocab)
    return [FILLER] + [f"k{i}" for i in range(1, h)] + [f"v{i}" for i in range(h, vocab)]


def key_symbol(task_id: int) -> str:
    return f"k{task_id}"


def value_symbol(task_id: int) -> str:
    return f"v{task_id}"
