"""The arms of the sorting task (job ``sorting`` of :mod:`fairseq_plugins.lab.common.arms`;
fairseq_plugins/lab/sorting/sorting.sh, docs/results/sorting.md): the LM arms with the paper's sorting settings, trained
on the sorted answer alone.

Every streaming arm reads each example as its own document; the ∞-former's continuous memory takes
the settings of docs/design/infinite-former.md §1–§5 (τ = 0.75, σ²_min, the basis widths, the ridge
penalty λ, the KL weight), which the compressive memory does not read (it takes the KL weight
only); ``transformer_lm`` takes the plugin's criterion for ``--loss-after-symbol`` (its KL term is
0); ``fastformer_lm`` is not an arm here. Standard library only.
"""

from typing import List

from fairseq_plugins.lab.common.answer_arms import answer_loss, answer_only_options, one_document_per_example
from fairseq_plugins.lab.common.arms import LM_ARMS, Arm, Job

BUDGET = (("LAYERS", "2"), ("WIDTH", "64"), ("HEADS", "4"), ("FFN", "128"), ("SEGMENT", "32"),
          ("STREAMS", "16"), ("MAX_UPDATE", "6000"), ("LR", "0.002"), ("WARMUP", "500"),
          ("NUM_BASIS", "32"), ("SEED", "1"))
LTM_OPTIONS = ["--tau", "0.75", "--sigma2-min", "1e-6", "--basis-widths", "0.01,0.05", "--ridge-penalty", "1.0",
               "--kl-weight", "1e-6"]
# the loss on the answer only: the sorted symbols after the separator
RUN_OPTIONS = answer_only_options("sep")


def _stream_options(arm: Arm) -> List[str]:
    """A streaming arm's sorting options: its memory's settings only where it reads a continuous memory."""
    if arm.task != "streaming_lm":
        return []
    compressive = arm.arch == "compressive_transformer_lm"
    return one_document_per_example(arm) + (["--kl-weight", "1e-6"] if compressive else LTM_OPTIONS)


def _extra(arm: Arm) -> List[str]:
    return RUN_OPTIONS + _stream_options(arm)


def job() -> Job:
    """The ``sorting`` :class:`~fairseq_plugins.lab.common.arms.Job` (the registry's ``EXPERIMENT_JOBS["sorting"]``)."""
    return Job("sorting", tuple(answer_loss(arm) for arm in LM_ARMS if arm.name != "fastformer_lm"), BUDGET,
               extra=_extra)
