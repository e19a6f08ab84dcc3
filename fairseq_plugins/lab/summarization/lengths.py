"""Source and target lengths of a summarization binary against a model's limits
(docs/summarization.md#arms-and-long-sources).

fairseq-train drops a training example longer than the task's ``--max-source-positions`` /
``--max-target-positions`` with one warning line and fairseq-generate stops on one, so the
recipes check the data first: :func:`check_lengths` reports, per split, the examples, the longest
source and target and what ``--truncate-source`` cuts, and refuses what fairseq would drop.
Token counts include the final ``</s>``.
"""

import os
from typing import Iterator, Sequence

import numpy as np

from fairseq_plugins.errors import ConfigError


def sizes(prefix: str) -> np.ndarray:
    """Token counts (with ``</s>``) of the fairseq mmap dataset ``PREFIX.{idx,bin}``, shape
    ``(examples,)``, int64, copied out of the mmap."""
    from fairseq.data.indexed_dataset import MMapIndexedDataset

    dataset = MMapIndexedDataset(prefix)
    counts = np.array(dataset.sizes, dtype=np.int64, copy=True)
    del dataset
    return counts


def split_prefix(data: str, split: str) -> str:
    """``DATA/SPLIT.source-target`` (fairseq-preprocess ``--source-lang source --target-lang target``).

    Raises:
        ConfigError: its ``.source.idx`` or ``.target.idx`` is missing.
    """
    prefix = os.path.join(data, f"{split}.source-target")
    if not os.path.exists(prefix + ".source.idx") or not os.path.exists(prefix + ".target.idx"):
        raise ConfigError(f"{prefix}.{{source,target}}.idx not found (prepare the data with "
                          f"data-prep/prepare-summarization.sh)")
    return prefix


def check_lengths(data: str, max_source: int, max_target: int, truncate_source: bool,
                  splits: Sequence[str]) -> Iterator[str]:
    """One report line per split of ``data`` (yielded as each split is read), then a refusal of
    anything fairseq would drop.

    Raises (after the lines):
        ConfigError: a split is missing; without ``truncate_source`` a source longer than
            ``max_source``; in every case a target longer than ``max_target``.
    """
    problems = []
    for split in splits:
        prefix = split_prefix(data, split)
        src, tgt = sizes(prefix + ".source"), sizes(prefix + ".target")
        long_src = int((src > max_source).sum())
        long_tgt = int((tgt > max_target).sum())
        msg = (f"{split}: {len(src)} examples, source tokens mean {src.mean():.0f} max {src.max()}, "
               f"target max {tgt.max()} (limits {max_source} / {max_target}, counting </s>)")
        if long_src:
            if truncate_source:
                msg += (f"; --truncate-source cuts {long_src} of {len(src)} sources to {max_source - 1} "
                        f"tokens + </s> (keeps {100.0 * np.minimum(src, max_source).sum() / src.sum():.1f}% "
                        f"of source tokens)")
            else:
                problems.append(f"{split}: {long_src} sources longer than --max-source-positions "
                                f"{max_source} (longest {src.max()})")
        if long_tgt:
            problems.append(f"{split}: {long_tgt} targets longer than --max-target-positions {max_target} "
                            f"(longest {tgt.max()}); raise MAX_TARGET")
        yield msg
    if problems:
        raise ConfigError(f"{'; '.join(problems)}; fairseq would drop or reject these examples")
