"""What ``scripts/gpt2-recipe.sh`` asks before and while it runs (docs/gpt2.md, "Recipe"):
``fairseq-longmem gpt2 check`` (every input, before anything is created) and
``fairseq-longmem gpt2 updates`` (the updates of the fine-tuning's linear schedule)."""

import os
from typing import Optional

from fairseq_plugins.errors import ConfigError
from fairseq_plugins.lab.gpt2.convert import check_inputs


def check_recipe(hf_dir: str, work: str, tokens_per_sample: int, data: Optional[str] = None,
                 corpus: Optional[str] = None, input_path: Optional[str] = None,
                 paragraphs: Optional[str] = None) -> None:
    """Check the recipe's inputs: the Hugging Face folder as the converter reads it, then the
    data (``data``: a binarized folder; else ``corpus``/``input_path``/``paragraphs`` as
    data-prep/prepare-lm.sh reads them).

    Raises:
        ConfigError: the first problem, naming its fix.
    """
    if os.path.exists(work) and not os.path.isdir(work):
        raise ConfigError(f"--work {work} exists and is not a directory")
    check_inputs(hf_dir, os.path.join(work, "gpt2"), tokens_per_sample)
    if data:
        for name in ("dict.txt", "train.bin", "train.idx"):
            if not os.path.isfile(os.path.join(data, name)):
                raise ConfigError(f"--data {data} holds no {name}; prepare it with data-prep/prepare-lm.sh --bpe gpt2 "
                                  f"--hf-dir {hf_dir} (its OUT/bin), or give --corpus C --input PATH")
        return
    from fairseq_plugins.lab.data import readers

    readers.check_input("lm", {"corpus": corpus, "input": input_path, "paragraphs": paragraphs},
                        user_options=("paragraphs",), input_word="PATH")


def epoch_updates(data: str, tokens_per_sample: int, batch_size: int, max_epoch: int, max_update: int = 0) -> int:
    """The updates of ``max_epoch`` epochs of ``streaming_lm`` over ``data``'s train split
    (``batch_size`` streams, segments of ``tokens_per_sample``): ⌈⌈tokens / streams⌉ / L⌉ per
    epoch; ``max_update`` > 0 caps it.

    Raises:
        ConfigError: the train split cannot be read.
    """
    from fairseq.data import indexed_dataset

    for name, value in (("tokens per sample", tokens_per_sample), ("batch size", batch_size),
                        ("max epoch", max_epoch)):
        if value <= 0:
            raise ConfigError(f"the {name} must be positive, got {value}")
    path = os.path.join(data, "train")
    if not indexed_dataset.dataset_exists(path, impl="mmap"):
        raise ConfigError(f"cannot read {path}.bin/.idx; prepare the data with data-prep/prepare-lm.sh --bpe gpt2")
    dataset = indexed_dataset.make_dataset(path, impl="mmap")  # held: its sizes are a view of its mmap
    tokens = int(dataset.sizes.sum())
    updates = -(-(-(-tokens // batch_size)) // tokens_per_sample) * max_epoch
    return min(updates, max_update) if max_update > 0 else updates
