"""Which segments a segmented memory model runs under ``streaming_lm``.

A checkpoint of the ∞-former LM or of GPT-2 keeps the segment (block) length it was trained
with (its ``segment_length``, by default the training ``--tokens-per-sample``), whatever
``fairseq-eval-lm``'s ``--tokens-per-sample``: each batch of that many tokens per stream is then
run as segments of the trained length. :func:`say_which_segments_run` says so in one line,
naming the ``--model-overrides`` that runs the length asked for, and refuses a length past the
model's position table (docs/infinite-former.md, docs/gpt2.md). It asks the model only through
the :class:`~fairseq_plugins.modules.memory_bank.StreamingMemoryModel` protocol.
"""

import logging

from fairseq_plugins.errors import ConfigError
from fairseq_plugins.modules.memory_bank import StreamingMemoryModel

logger = logging.getLogger(__name__)


def pieces(tokens: int, segment: int) -> str:
    """How a batch of ``tokens`` per stream is cut into segments: "2 segments of 16 and one of 3"."""
    count, rest = divmod(tokens, segment)
    whole = [f"{count} segment{'s' if count != 1 else ''} of {segment}"] if count else []
    return " and ".join(whole + ([f"one of {rest}"] if rest else []))


def say_which_segments_run(model, tokens: int, from_checkpoint: bool) -> None:
    """One log line when ``model`` runs other segments than ``tokens`` per stream (a warning for
    a checkpoint, whose length the user may not know). Models without memory: nothing.

    A model with a short-term memory (the ∞-former LM) is overridden with ``segment_length`` and
    ``mem_len``; one without (GPT-2's blocks) with ``segment_length`` only.

    Raises:
        ConfigError: a checkpoint asked for segments longer than its position table.
    """
    if not isinstance(model, StreamingMemoryModel):
        return
    (segment, memory), limit = model.segment_lengths(), model.position_limit()
    if segment == tokens:
        return
    if from_checkpoint and limit is not None and tokens > limit:
        raise ConfigError(
            f"--tokens-per-sample {tokens} is longer than the checkpoint's position table ({limit} positions; "
            f"it runs blocks of {segment}, its trained --tokens-per-sample): pass --tokens-per-sample {limit} or "
            f"less, with --model-overrides \"{{'segment_length': N}}\" for blocks of N tokens")
    split = pieces(tokens, segment)
    if not from_checkpoint:
        logger.info("the model runs each batch of %d tokens per stream as %s (--segment-length), with a "
                    "short-term memory of %d (--mem-len)", tokens, split, memory)
    elif memory:
        logger.warning(
            "the checkpoint's model runs segments of %d tokens with a short-term memory of %d (its trained "
            "--segment-length/--mem-len), not the --tokens-per-sample %d asked for: each batch of %d tokens "
            "per stream is run as %s; to evaluate with segments of %d pass --model-overrides "
            "\"{'segment_length': %d, 'mem_len': %d}\"", segment, memory, tokens, tokens, split, tokens,
            tokens, tokens)
    else:
        logger.warning(
            "the checkpoint's model runs blocks of %d tokens (its trained --tokens-per-sample), not the "
            "--tokens-per-sample %d asked for: each batch of %d tokens per stream is run as %s; to evaluate with "
            "blocks of %d pass --model-overrides \"{'segment_length': %d}\"", segment, tokens, tokens, split,
            tokens, tokens)
