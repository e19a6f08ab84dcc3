"""The models of the GPU precision checks (job ``precision`` of
:mod:`fairseq_plugins.lab.common.arms`; scripts/gpu-checks.sh): toy sizes on the checks' toy data
(translation: its mt/ folder, else lm/). The job gives each arm's model options only; the script
adds the rest. Standard library only.
"""

from fairseq_plugins.lab.common.arms import Arm, Job

_SMALL = ["--decoder-embed-dim", "64", "--decoder-attention-heads", "4", "--decoder-ffn-embed-dim", "128"]
ARMS = (
    Arm("infinite_former_lm", "streaming_lm", "infinite_former_lm", "infinite_former_kl", "∞-former LM",
        flags=lambda b: ["--tokens-per-sample", "32", "--batch-size", "8", "--num-basis-functions", "32",
                         "--num-samples", "32", *_SMALL]),
    Arm("fastformer_lm", "language_modeling", "fastformer_lm_tiny", None, "Fastformer LM",
        flags=lambda b: ["--tokens-per-sample", "128", "--sample-break-mode", "none", "--batch-size", "8", *_SMALL]),
    Arm("fastformer_tiny", "translation", "fastformer_tiny", None, "Fastformer encoder-decoder",
        flags=lambda b: ["--batch-size", "16", "--encoder-embed-dim", "64", "--encoder-attention-heads", "4",
                         "--encoder-ffn-embed-dim", "128", *_SMALL]),
)


def job() -> Job:
    """The ``precision`` :class:`~fairseq_plugins.lab.common.arms.Job` (the registry's ``EXPERIMENT_JOBS["precision"]``)."""
    return Job("precision", ARMS, command="model")
