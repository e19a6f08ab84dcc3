"""The arms of the summarization comparison (job ``summarization`` of
:mod:`fairseq_plugins.lab.common.arms`; scripts/train-summarizer.sh, summarization-comparison.sh,
docs/summarization.md): the ∞-former summarizer, with and without its document memory, beside
fairseq's ``transformer`` and the Fastformer encoder-decoder, on one budget.

Every arm: ``--task translation`` (source → target), sizes shared by encoder and decoder, Adam
with an inverse-square-root schedule, one validation at the end. A transformer arm cuts its source
at its ``--max-source-positions`` (``--truncate-source``); the ∞-former reads the whole document.
Standard library only.
"""

from typing import List

from fairseq_plugins.lab.common.arms import Arm, Budget, Job

# (variable, default), in the order the recipes print them
BUDGET = (
    ("LAYERS", "2"), ("WIDTH", "128"), ("HEADS", "4"), ("FFN", "512"), ("DOCS", "2"), ("MAX_UPDATE", "800"),
    ("LR", "0.001"), ("WARMUP", "100"), ("DROPOUT", "0.1"), ("SEED", "1"), ("MAX_TARGET", "1280"),
    ("TRANSFORMER_MAX_SOURCE", "1024"), ("FASTFORMER_MAX_SOURCE", "4096"), ("INF_MAX_SOURCE", "131072"),
    ("CHUNK", "256"), ("LEAD_WINDOW", "256"), ("NUM_BASIS", "256"), ("INF_OPTIONS", ""))
# the variables that are not integers
NOT_INTEGERS = ("LR", "DROPOUT", "INF_OPTIONS")
# the variables that may be 0: no lead window is a summarizer that reads its document through the memory alone
MAY_BE_ZERO = ("SEED", "WARMUP", "DROPOUT", "LEAD_WINDOW")


def _summarizer_flags(b: Budget) -> List[str]:
    """The ∞-former summarizer arms' sizes, then INF_OPTIONS: more of its model options, split at
    white space (e.g. ``--memory-read location --read-gate``; docs/summarization.md)."""
    return ["--encoder-chunk-length", b["CHUNK"], "--lead-window", b["LEAD_WINDOW"],
            "--num-basis-functions", b["NUM_BASIS"], *b["INF_OPTIONS"].split()]


ARMS = (
    Arm("infinite_former", "translation", "infinite_former_summarizer", "infinite_former_kl",
        "∞-former summarizer: the whole document, chunk by chunk, into continuous long-term memory",
        flags=_summarizer_flags, label=lambda b: "infinite_former (whole document)", max_source="INF_MAX_SOURCE",
        has_memory=True),
    Arm("infinite_former_lead_only", "translation", "infinite_former_summarizer", "infinite_former_kl",
        "the ∞-former summarizer without its document memory: the lead window (LEAD_WINDOW states) only",
        flags=lambda b: _summarizer_flags(b) + ["--no-document-memory"], default=False,
        label=lambda b: f"infinite_former, lead window only ({b['LEAD_WINDOW']})", max_source="INF_MAX_SOURCE",
        model_flags={"no_document_memory": True}),
    Arm("fastformer", "translation", "fastformer_tiny", "cross_entropy",
        "Fastformer encoder-decoder, source cut to FASTFORMER_MAX_SOURCE",
        label=lambda b: f"fastformer (source cut at {b['FASTFORMER_MAX_SOURCE']})",
        max_source="FASTFORMER_MAX_SOURCE", truncate_source=True),
    Arm("transformer", "translation", "transformer", "cross_entropy",
        "fairseq's own transformer (pre-norm), source cut to TRANSFORMER_MAX_SOURCE",
        flags=lambda b: ["--encoder-normalize-before", "--decoder-normalize-before"],
        label=lambda b: f"transformer (source cut at {b['TRANSFORMER_MAX_SOURCE']})",
        max_source="TRANSFORMER_MAX_SOURCE", truncate_source=True),
)


def common_options(arm: Arm, b: Budget, save_dir: str, device: List[str]) -> List[str]:
    """fairseq-train's options shared by every arm, after the arm's own: sizes, data, schedule."""
    sizes = ["--encoder-layers", b["LAYERS"], "--decoder-layers", b["LAYERS"],
             "--encoder-embed-dim", b["WIDTH"], "--decoder-embed-dim", b["WIDTH"],
             "--encoder-attention-heads", b["HEADS"], "--decoder-attention-heads", b["HEADS"],
             "--encoder-ffn-embed-dim", b["FFN"], "--decoder-ffn-embed-dim", b["FFN"], "--share-all-embeddings"]
    common = ["--task", arm.task, "--source-lang", "source", "--target-lang", "target",
              "--max-source-positions", b[arm.max_source], "--max-target-positions", b["MAX_TARGET"],
              *(["--truncate-source"] if arm.truncate_source else []),
              "--dropout", b["DROPOUT"], "--batch-size", b["DOCS"], "--required-batch-size-multiple", "1",
              "--optimizer", "adam", "--adam-betas", "(0.9, 0.98)", "--clip-norm", "1.0", "--lr", b["LR"],
              "--lr-scheduler", "inverse_sqrt", "--warmup-updates", b["WARMUP"], "--max-update", b["MAX_UPDATE"],
              "--seed", b["SEED"], "--save-dir", save_dir, "--no-epoch-checkpoints",
              "--validate-interval", "1000000", "--validate-interval-updates", b["MAX_UPDATE"],
              "--log-format", "simple", "--log-interval", "10", *device]
    return sizes + common


def job() -> Job:
    """The ``summarization`` :class:`~fairseq_plugins.lab.common.arms.Job` (the registry's
    ``EXPERIMENT_JOBS["summarization"]``)."""
    return Job("summarization", ARMS, BUDGET, command="summarization", common=common_options,
               integers=tuple(n for n, _ in BUDGET if n not in NOT_INTEGERS), may_be_zero=MAY_BE_ZERO)
