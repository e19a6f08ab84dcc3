"""Inference over a whole split: every example generated, every token scored.

Two fairseq behaviours lose part of a split without saying so:

* **dropped last batch.** fairseq's batch sampler (``fairseq.data.data_utils.batch_by_size``)
  drops the *last* batch when its size is not a multiple of ``--required-batch-size-multiple``
  (default 8, meant for tensor-core-friendly training batches). In ``fairseq-generate`` that
  silently loses examples (11 test documents give 8 hypotheses with ``--batch-size 4``; six
  prompts with ``--batch-size 6`` give none and a ``ZeroDivisionError``). fairseq-generate
  hands every model its whole configuration through ``prepare_for_inference_(cfg)`` before it
  builds the batch iterator from ``cfg.dataset``: :func:`every_example` sets the multiple to 1
  there (and says so in one line). The plugin's models do it through
  :class:`EveryExampleMixin`; in a fairseq CLI process that loaded the plugin,
  :func:`install_every_example` does it for every model, fairseq's own included.
* **skipped long samples.** ``fairseq-eval-lm`` (``language_modeling``) skips the samples
  longer than the model's ``max_positions`` with a warning and reports a perplexity over the
  rest; under ``streaming_lm`` a segment beyond a learned position table ends in
  ``IndexError``. Both refuse with the same line (:func:`positions_refusal`): fairseq's
  ``FairseqTask.filter_indices_by_size`` in an eval-lm process (:func:`install_no_skipped_samples`),
  the streaming task's evaluation loader for its segments.
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


def install_every_example() -> None:
    """Every model's ``prepare_for_inference_`` (fairseq's ``BaseFairseqModel``) generates every
    example in this process."""
    from fairseq.models import BaseFairseqModel

    original = BaseFairseqModel.prepare_for_inference_

    def prepare_for_inference_(self, cfg):
        every_example(cfg)
        original(self, cfg)

    BaseFairseqModel.prepare_for_inference_ = prepare_for_inference_


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


def install_no_skipped_samples() -> None:
    """fairseq's ``FairseqTask.filter_indices_by_size`` refuses instead of skipping samples (this process)."""
    from fairseq.tasks import FairseqTask

    original = FairseqTask.filter_indices_by_size

    def filter_indices_by_size(self, indices, dataset, max_positions=None, ignore_invalid_inputs=False):
        if max_positions is not None:
            _, ignored = dataset.filter_indices_by_size(indices, max_positions)
            if len(ignored) > 0:
                longest = max(int(dataset.size(i)) if not isinstance(dataset.size(i), tuple)
                              else int(max(dataset.size(i))) for i in ignored)
                raise positions_refusal(int(max_positions if not isinstance(max_positions, tuple)
                                            else min(max_positions)), longest, skipped=len(ignored))
        return original(self, indices, dataset, max_positions=max_positions,
                        ignore_invalid_inputs=ignore_invalid_inputs)

    FairseqTask.filter_indices_by_size = filter_indices_by_size
