"""The arms of the tasks trained on an answer alone (sorting, recall by distance, MQAR): the
options and the criterion that turn an LM arm of :mod:`fairseq_plugins.lab.common.arms` into one
whose loss reads only the tokens after a marker symbol (the criterion's ``--loss-after-symbol``,
docs/options.md). Standard library only, as the registry.
"""

from dataclasses import replace
from typing import List

from fairseq_plugins.lab.common.arms import Arm


def answer_only_options(symbol: str) -> List[str]:
    """fairseq-train's options of a task trained on its answers alone: the loss on the tokens after
    ``symbol`` only, validation and a checkpoint only at the end (epochs are short on small data)."""
    return ["--validate-interval", "1000000", "--save-interval", "1000000", "--loss-after-symbol", symbol]


def one_document_per_example(arm: Arm) -> List[str]:
    """A streaming arm's option to read each example as its own document (memory emptied at each
    boundary); nothing for an arm that reads each example alone anyway."""
    return ["--reset-memory-at-document-boundary"] if arm.task == "streaming_lm" else []


def answer_loss(arm: Arm) -> Arm:
    """An LM arm as a task with an answer-only loss trains it: a ``language_modeling`` arm takes
    the plugin's criterion, which reads ``--loss-after-symbol`` (its KL term is 0); a streaming
    arm has it already."""
    return arm if arm.task == "streaming_lm" else replace(arm, criterion="infinite_former_kl")
