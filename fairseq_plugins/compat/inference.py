"""Inference over a whole split: every example generated, every token scored.

Two fairseq behaviours lose part of a split without saying so:

* **dropped last batch.** fairseq's batch sampler (``fairseq.data.data_utils.batch_by_size``)
  drops the *last* batch when its size is not a multiple of ``--required-batch-size-multiple``
  (default 8, meant for tensor-core-friendly training batches). In ``fairseq-generate`` that
  silently loses examples (11 test documents give 8 hypotheses with ``--batch-size 4``; six
  prompts with ``--batch-size 6`` give none and a ``ZeroDivisionError``). fairseq-generate
  hands every model its whole configuration through ``prepare_for_inference_(cfg)`` before it
  builds the batch iterator from ``cfg.dataset``: :func:`~fairseq_plugins.models.inference.every_example`
  sets the multiple to 1 there (and says so in one line). The plugin's models do it themselves
  (:class:`~fairseq_plugins.models.inference.EveryExampleMixin`, model code in the core); in a fairseq
  CLI process that loaded the plugin, :func:`install_every_example` does it for every model,
  fairseq's own included.
* **skipped long samples.** ``fairseq-eval-lm`` (``language_modeling``) skips the samples
  longer than the model's ``max_positions`` with a warning and reports a perplexity over the
  rest; under ``streaming_lm`` a segment beyond a learned position table ends in
  ``IndexError``. Both refuse with the same line
  (:func:`~fairseq_plugins.models.inference.positions_refusal`): fairseq's
  ``FairseqTask.filter_indices_by_size`` in an eval-lm process (:func:`install_no_skipped_samples`),
  the streaming task's evaluation loader for its segments.
"""

from fairseq_plugins.models.inference import every_example, positions_refusal


def install_every_example() -> None:
    """Every model's ``prepare_for_inference_`` (fairseq's ``BaseFairseqModel``) generates every
    example in this process."""
    from fairseq.models import BaseFairseqModel

    original = BaseFairseqModel.prepare_for_inference_

    def prepare_for_inference_(self, cfg):
        every_example(cfg)
        original(self, cfg)

    BaseFairseqModel.prepare_for_inference_ = prepare_for_inference_


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
