"""What a plugin model and task do so that an inference covers a whole split: every example
generated, every token scored (docs/design/fairseq.md §7).

* :class:`EveryExampleMixin`: fairseq's batch sampler drops the *last* batch when its size is
  not a multiple of ``--required-batch-size-multiple`` (default 8), which in ``fairseq-generate``
  silently loses examples; fairseq hands every model its configuration through
  ``prepare_for_inference_(cfg)`` before it builds the batch iterator, and the plugin's models
  set the multiple to 1 there (:func:`every_example`, one log line).
* :func:`positions_refusal`: the one line for an evaluation whose samples are longer than the
  model's positions (the streaming task refuses with it instead of an ``IndexError``).

:mod:`fairseq_plugins.compat.inference` applies the same to fairseq's own models and tasks in a
fairseq command-line process.
"""

import logging
from typing import Optional

from fairseq_plugins.errors import ConfigError

logger = logging.getLogger(__name__)


def every_example(cfg) -> None:
    """Set ``cfg.dataset.required_batch_size_multiple`` to 1 (one log line when it was not)."""
    dataset = cfg.dataset
    if dataset is not None and dataset.required_batch_size_multiple > 1:
        logger.info("--required-batch-size-multiple %d set to 1 for inference: fairseq would drop a last "
                    "batch of another size (every example is generated)", dataset.required_batch_size_multiple)
        dataset.required_batch_size_multiple = 1


class EveryExampleMixin:
    """Mix into a ``BaseFairseqModel`` subclass before it (see the module docstring)."""

    def prepare_for_inference_(self, cfg):
        every_example(cfg)
        super().prepare_for_inference_(cfg)


def positions_refusal(limit: int, tokens: int, skipped: Optional[int] = None) -> ConfigError:
    """The one line for an evaluation whose samples are longer than the model's positions.

    Args:
        limit: the model's ``max_positions()``; tokens: the longest sample asked for;
        skipped: how many samples fairseq would skip (``language_modeling``), or ``None``.
    """
    what = (f"would skip {skipped} samples of the split longer than the model's max_positions={limit} and report "
            f"a perplexity over the rest" if skipped is not None else
            f"would score segments of {tokens} tokens, longer than the model's max_positions={limit}")
    return ConfigError(
        f"fairseq-eval-lm {what}: the checkpoint's position table holds {limit} positions (its "
        f"--max-target-positions, by default its --tokens-per-sample at training); evaluate with --tokens-per-sample "
        f"{limit} or less (language_modeling: and --sample-break-mode none, as lines of eos/complete mode can be "
        f"longer)")
