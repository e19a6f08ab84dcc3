"""The arms of MQAR (job ``mqar`` of :mod:`fairseq_plugins.lab.common.arms`; fairseq_plugins/lab/mqar/mqar.sh,
docs/results/mqar.md): the LM comparison's arms, trained on the query values only.

* ``transformer_lm``: fairseq's own, full attention over the whole example: ``--sample-break-mode
  complete_doc`` with ``--tokens-per-sample LENGTH`` puts each example in a block of its own (the
  examples are documents), ``--batch-size`` as many examples as the streaming arms read tokens per
  update (STREAMS·SEGMENT / (LENGTH + 1), at least 1);
* ``memory_off`` (``--no-long-term-memory``: attention over the segment and the short-term memory
  only, a window W = 2·SEGMENT), ``infinite_former`` (the paper's read), ``infinite_former_mixture``
  (the same with ``--memory-read mixture``, the read addressed by content that learns to retrieve in
  the copy probe, docs/results/copy.md; ``infinite_former_content``, with ``--memory-read content``, is
  not run by default), ``compressive`` (``--arch compressive_transformer_lm``:
  NUM_BASIS compressed slots per layer) and ``memory_off_matched`` (memory_off with its FFN widened
  to the ∞-former's parameter count, :func:`~fairseq_plugins.lab.common.arms.matched_ffn`): the LM
  arms as they are, each example its own document (``--reset-memory-at-document-boundary``: the
  memory starts empty at its first token).

Every arm: ``--loss-after-symbol @query`` (the loss on the values of the queries alone), dropout 0
(a synthetic task; Zoology's setting), validation and a checkpoint only at the end. ``has_memory``:
the arms whose long-term memory the recipe also scores wiped. Standard library only; the registry
builds the job with :func:`job` on first use.
"""

from dataclasses import replace
from typing import List

from fairseq_plugins.lab.common.answer_arms import answer_only_options, one_document_per_example
from fairseq_plugins.lab.common.arms import LM_ARMS, Arm, Job, _int
from fairseq_plugins.lab.mqar.symbols import QUERY_MARKER

# the CPU-size configuration of docs/results/mqar.md: one arm and seed in about 8 minutes on one
# pinned core at vocabulary 256 (fairseq_plugins/lab/mqar/mqar.sh --help, "Budget")
BUDGET = (("LAYERS", "2"), ("WIDTH", "64"), ("HEADS", "1"), ("FFN", "128"), ("SEGMENT", "16"), ("STREAMS", "64"),
          ("MAX_UPDATE", "2500"), ("LR", "0.003"), ("WARMUP", "200"), ("NUM_BASIS", "32"), ("SEED", "1"),
          ("LENGTH", "127"))
# the loss on the values of the queries alone; no dropout
RUN_OPTIONS = answer_only_options(QUERY_MARKER) + ["--dropout", "0.0"]


def _examples_per_update(b) -> str:
    """transformer_lm's examples per batch: the streaming arms' tokens per update over an example's."""
    return str(max(1, _int(b, "STREAMS") * _int(b, "SEGMENT") // (_int(b, "LENGTH") + 1)))


def _full_attention(b) -> List[str]:
    return ["--sample-break-mode", "complete_doc", "--tokens-per-sample", b["LENGTH"], "--decoder-normalize-before",
            "--decoder-input-dim", b["WIDTH"], "--decoder-output-dim", b["WIDTH"], "--batch-size",
            _examples_per_update(b)]


def _extra(arm) -> List[str]:
    return RUN_OPTIONS + one_document_per_example(arm)


def job():
    """The ``mqar`` :class:`~fairseq_plugins.lab.common.arms.Job` (the registry's ``EXPERIMENT_JOBS["mqar"]``)."""
    lm = {arm.name: arm for arm in LM_ARMS}
    memory = dict(criterion="infinite_former_kl", default=True, has_memory=True)
    arms = (
        Arm("transformer_lm", "language_modeling", "transformer_lm", "infinite_former_kl",
            "fairseq's own transformer_lm, full attention over the whole example", flags=_full_attention),
        replace(lm["memory_off"], description="the ∞-former LM with --no-long-term-memory: attention over the "
                                              "segment and the short-term memory only"),
        replace(lm["infinite_former"], **memory),
        replace(lm["infinite_former_mixture"], **memory),
        replace(lm["infinite_former"], name="infinite_former_content", **{**memory, "default": False},
                description="infinite_former with --memory-read content (one Gaussian at the mean of the basis "
                            "centres under a softmax of the scores)", tail=lambda b: ["--memory-read", "content"]),
        replace(lm["compressive"], **memory),
        replace(lm["memory_off_matched"], default=True),
    )
    return Job("mqar", arms, BUDGET, extra=_extra)
