"""The models of the speed and memory benchmark (job ``benchmark`` of
:mod:`fairseq_plugins.lab.common.arms`; ``fairseq-longmem bench``, docs/benchmark.md): fairseq's
``transformer_lm``, the Fastformer LM and the ∞-former LM with and without its long-term memory.
The benchmark builds each model itself at its own sizes, so the job has no budget and no
fairseq-train command. Standard library only.
"""

from fairseq_plugins.lab.common.arms import Arm, Job

ARMS = (
    Arm("transformer_lm", "language_modeling", "transformer_lm", "cross_entropy", "fairseq's own"),
    Arm("fastformer_lm", "language_modeling", "fastformer_lm", "cross_entropy", "Fastformer"),
    Arm("infinite_former_lm", "streaming_lm", "infinite_former_lm", "infinite_former_kl", "∞-former",
        model_flags={"no_long_term_memory": False}),
    Arm("infinite_former_lm (LTM off)", "streaming_lm", "infinite_former_lm", "infinite_former_kl",
        "∞-former without long-term memory", model_flags={"no_long_term_memory": True}),
)


def job() -> Job:
    """The ``benchmark`` :class:`~fairseq_plugins.lab.common.arms.Job` (the registry's ``EXPERIMENT_JOBS["benchmark"]``)."""
    return Job("benchmark", ARMS, command="")
