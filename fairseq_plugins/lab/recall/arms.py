"""The arms of recall by distance (job ``recall`` of :mod:`fairseq_plugins.lab.common.arms`;
fairseq_plugins/lab/recall/recall.sh, docs/results/recall.md): every LM arm at the LM comparison's sizes, trained on
the answer alone.

``transformer_lm`` and ``fastformer_lm`` take the plugin's criterion for ``--loss-after-symbol``
(their KL term is 0); the streaming arms read each example as its own document
(``--reset-memory-at-document-boundary``). Standard library only.
"""

from typing import List

from fairseq_plugins.lab.common.answer_arms import answer_loss, answer_only_options, one_document_per_example
from fairseq_plugins.lab.common.arms import LM_ARMS, Arm, Job
from fairseq_plugins.lab.recall.symbols import QUERY_MARKER

# the LM comparison's sizes; MAX_UPDATE: about 20 minutes per arm and seed on one CPU core with one
# thread (docs/results/recall.md, "Budget")
BUDGET = (("LAYERS", "2"), ("WIDTH", "128"), ("HEADS", "4"), ("FFN", "512"), ("SEGMENT", "64"),
          ("STREAMS", "16"), ("MAX_UPDATE", "2500"), ("LR", "0.002"), ("WARMUP", "100"),
          ("NUM_BASIS", "64"), ("SEED", "1"))
# the loss on the answer only: the key after the query marker
RUN_OPTIONS = answer_only_options(QUERY_MARKER)


def _extra(arm: Arm) -> List[str]:
    return RUN_OPTIONS + one_document_per_example(arm)


def job() -> Job:
    """The ``recall`` :class:`~fairseq_plugins.lab.common.arms.Job` (the registry's ``EXPERIMENT_JOBS["recall"]``)."""
    return Job("recall", tuple(answer_loss(arm) for arm in LM_ARMS), BUDGET, extra=_extra)
