"""Every example is generated: no batch-size multiple at inference.

fairseq's batch sampler (``fairseq.data.data_utils.batch_by_size``) drops the *last*
batch when its size is not a multiple of ``--required-batch-size-multiple`` (default 8,
meant for tensor-core-friendly training batches). In ``fairseq-generate`` that silently
loses examples: 11 test documents give 8 hypotheses with ``--batch-size 4`` and 9 with
``--batch-size 3``; six prompts with ``--batch-size 6`` give none (and a
``ZeroDivisionError``, which the CLI error hook turns into one line).

A plugin cannot change fairseq's tasks, but fairseq-generate hands every model its
whole configuration through ``prepare_for_inference_(cfg)`` before it builds the batch
iterator from ``cfg.dataset``. :class:`EveryExampleMixin` sets the multiple to 1 there
(and says so in one line), so a plugin model is never asked to generate a subset.
"""

import logging

logger = logging.getLogger(__name__)


class EveryExampleMixin:
    """Mix into a ``BaseFairseqModel`` subclass before it (see the module docstring)."""

    def prepare_for_inference_(self, cfg):
        dataset = cfg.dataset
        if dataset is not None and dataset.required_batch_size_multiple > 1:
            logger.info("--required-batch-size-multiple %d set to 1 for inference: fairseq would drop a last "
                        "batch of another size (every example is generated)", dataset.required_batch_size_multiple)
            dataset.required_batch_size_multiple = 1
        super().prepare_for_inference_(cfg)
