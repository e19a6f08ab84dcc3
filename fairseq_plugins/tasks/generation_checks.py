"""``fairseq-generate --task streaming_lm --prefix-size K``: prompts that are too short.

fairseq-generate prompts each row of a batch with the first K tokens of its target
(``sample["target"][:, :K]``). A ``streaming_lm`` batch row is one segment of
``--tokens-per-sample`` tokens of a stream, so a prompt is shorter than K when K exceeds
the segment, or where a segment holds fewer tokens: the last segment of each stream (what
is left of it), a document's padded last segment (``--reset-memory-at-document-boundary``),
the padded end of the last stream. fairseq would then silently prompt with fewer tokens
(the padded positions are generated freely). The task refuses instead, in one line naming
both numbers and the fix, before anything is generated (:func:`check_prefix_size`, from
``build_generator``), and again per batch for a caller that hands ``inference_step`` a
padded prefix of its own (:func:`check_prefix_tokens`). Beam search over a prompt holding
end-of-sentence, which fairseq's ``SequenceGenerator`` cannot follow, is refused the same way
(:func:`check_beam_prefixes`). These come with
:class:`GenerationChecksMixin`, the generation side of ``streaming_lm`` (which also points
fairseq-interactive to ``--task language_modeling``); stock fairseq tasks
(``language_modeling``) are not touched.
"""

from typing import Dict, Tuple

from torch import Tensor

from fairseq_plugins.errors import ConfigError

BEAM_FIXES = ("generate with --beam 1 (greedy) or --sampling --beam 1, which follow such a prompt; "
              "docs/generation.md")


def shortest_segment(target: Tensor, tokens_per_sample: int, pad: int) -> Tuple[int, int, int]:
    """``(tokens, segment, stream)`` of the segment holding the fewest tokens (not padding)
    among a split's ``target`` streams ``(streams, stream length)``; both indices 0-based."""
    streams, length = target.shape
    segments = -(-length // tokens_per_sample)
    filled = target.new_full((streams, segments * tokens_per_sample), pad)
    filled[:, :length] = target
    counts = filled.view(streams, segments, tokens_per_sample).ne(pad).sum(-1)  # (streams, segments)
    flat = int(counts.argmin())
    stream, segment = divmod(flat, segments)
    return int(counts[stream, segment]), segment, stream


def check_prefix_size(prefix_size: int, tokens_per_sample: int, max_len_a: float, max_len_b: int,
                      splits: Dict[str, Tensor], pad: int) -> None:
    """Refuse ``--prefix-size`` longer than a prompt of the loaded ``splits`` (name → the
    ``target`` streams of :class:`StreamingLMDataset`), or a length limit that leaves nothing
    to generate after it. ``prefix_size`` 0 (no prompt) passes."""
    if prefix_size <= 0:
        return
    if prefix_size > tokens_per_sample:
        raise ConfigError(
            f"--prefix-size {prefix_size} is longer than every prompt: fairseq-generate --task streaming_lm "
            f"prompts with the start of each segment of --tokens-per-sample {tokens_per_sample} tokens of a "
            f"stream; pass --prefix-size {tokens_per_sample} or less, or --tokens-per-sample {prefix_size} or more")
    for split, target in splits.items():
        tokens, segment, stream = shortest_segment(target, tokens_per_sample, pad)
        if tokens < prefix_size:
            segments = -(-target.size(1) // tokens_per_sample)
            where = f"segment {segment + 1} of {segments} of stream {stream + 1} of the '{split}' split"
            layout = "another --batch-size (number of streams) or --tokens-per-sample"
            if tokens == 0:
                raise ConfigError(
                    f"--prefix-size {prefix_size} is longer than a prompt: {where} is only padding (the split "
                    f"ends before it); pass {layout}, or generate without --prefix-size")
            raise ConfigError(
                f"--prefix-size {prefix_size} is longer than a prompt: {where} holds {tokens} tokens "
                f"(fairseq-generate --task streaming_lm prompts with the start of each segment, and a stream's "
                f"last segment holds what is left of it); pass --prefix-size {tokens} or less, or {layout}")
    longest = int(max_len_a * tokens_per_sample + max_len_b)
    if longest <= prefix_size:
        raise ConfigError(
            f"--max-len-a {max_len_a:g} --max-len-b {max_len_b} leaves nothing to generate after --prefix-size "
            f"{prefix_size}: the length limit counts the prompt; pass --max-len-b {prefix_size + 1} or more "
            f"(the prompt + the tokens to generate)")


def check_beam_prefixes(prefix_size: int, beam: int, tokens_per_sample: int, splits: Dict[str, Tensor],
                        eos: int) -> None:
    """Refuse beam search (``beam`` > 1) when a prompt, the first ``prefix_size`` tokens of a
    segment of ``tokens_per_sample`` tokens of one of the ``splits`` (name → ``target`` streams
    ``(streams, stream length)``), holds end-of-sentence: fairseq's beam search cannot follow
    such a forced prefix (an ``AssertionError`` in ``SequenceGenerator``, after the batches
    before it were printed). Greedy search and sampling follow it."""
    if prefix_size <= 0 or beam <= 1:
        return
    for split, target in splits.items():
        streams, length = target.shape
        for start in range(0, length, tokens_per_sample):
            hits = target[:, start:start + prefix_size].eq(eos).any(-1).nonzero()
            if hits.numel():
                raise ConfigError(
                    f"fairseq-generate's beam search (--beam {beam}) cannot follow a prompt that holds "
                    f"end-of-sentence: the first --prefix-size {prefix_size} tokens of segment "
                    f"{start // tokens_per_sample + 1} of stream {int(hits[0, 0]) + 1} of the '{split}' split "
                    f"hold a line end (segments run across lines); nothing was generated; {BEAM_FIXES}")


def check_prefix_tokens(prefix_tokens: Tensor, pad: int) -> None:
    """Refuse a batch's ``(bsz, K)`` prompts of which one holds padding (a prompt shorter than K)."""
    real = prefix_tokens.ne(pad).sum(-1)
    if bool(real.lt(prefix_tokens.size(1)).any()):
        shortest = int(real.min())
        row = int(real.argmin())
        raise ConfigError(
            f"--prefix-size {prefix_tokens.size(1)} is longer than a prompt: row {row} of this batch holds "
            f"{shortest} tokens before its padding; pass --prefix-size {shortest} or less")



class GenerationChecksMixin:
    """The generation side of ``streaming_lm`` (mixed into the task before ``FairseqTask``):
    its ``self.datasets`` are :class:`StreamingLMDataset` s, whose ``tgt`` are the streams."""

    def build_generator(self, models, args, seq_gen_cls=None, extra_gen_cls_kwargs=None,
                        prefix_allowed_tokens_fn=None):
        """fairseq's generator, after refusing a ``--prefix-size`` longer than a prompt."""
        if not args.score_reference:
            check_prefix_size(args.prefix_size, self.cfg.tokens_per_sample, args.max_len_a, args.max_len_b,
                              {split: dataset.tgt for split, dataset in self.datasets.items()},
                              self.dictionary.pad())
            if not args.sampling:
                check_beam_prefixes(args.prefix_size, args.beam, self.cfg.tokens_per_sample,
                                    {split: dataset.tgt for split, dataset in self.datasets.items()},
                                    self.dictionary.eos())
        return super().build_generator(models, args, seq_gen_cls=seq_gen_cls,
                                       extra_gen_cls_kwargs=extra_gen_cls_kwargs,
                                       prefix_allowed_tokens_fn=prefix_allowed_tokens_fn)

    def inference_step(self, generator, models, sample, prefix_tokens=None, constraints=None):
        if prefix_tokens is not None:
            check_prefix_tokens(prefix_tokens, self.dictionary.pad())
        return super().inference_step(generator, models, sample, prefix_tokens=prefix_tokens,
                                      constraints=constraints)

    def build_dataset_for_inference(self, src_tokens, src_lengths, **kwargs):
        raise ConfigError("streaming_lm is for fairseq-train and fairseq-eval-lm; sample with "
                          "fairseq-interactive/fairseq-generate --task language_modeling (same checkpoint)")
