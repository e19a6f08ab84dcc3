"""Generation with fairseq's ``language_modeling`` task: prompts it would not continue.

Under ``language_modeling``, ``fairseq-generate`` and ``fairseq-interactive`` force each
prompt (the example's source, or its first ``--prefix-size`` target tokens) as a prefix of
the hypothesis (``LanguageModelingTask.inference_step``), and fairseq's
``SequenceGenerator`` counts that prefix in its length limit. Three prompts then go wrong
without a word:

* **end-of-sentence inside a forced prefix, with beam search.** A prefix that starts with
  it has its one finite beam finalised at step 0 (beam search expands only the first beam
  there, leaving the others at -inf) and ends in ``AssertionError: N < N`` in
  ``SequenceGenerator._generate``; one inside it fails ``_prefix_tokens``' assertion. Both
  come after the hypotheses of the batches before. The prompts are known before generating,
  so :func:`check_prefixes` reads every example of the loaded split when the generator is
  built and refuses first (sampling and ``--beam 1`` follow such a prefix and are let through).
  The source loses its leading end-of-sentence only where every row of a batch starts with
  it; an example set where only some do is refused too, as its batches can mix both.
* **a length limit inside the prompt.** ``--max-len-a A --max-len-b B`` allow A × source
  length + B tokens *in all* (and at most the model's positions - 1): a prompt at least that
  long comes back cut to the limit, nothing generated (:func:`check_length`).
* **an empty prompt** (an empty line in ``fairseq-interactive``): fairseq generates
  unconditional text as if it had been asked to. ``fairseq-interactive --task
  language_modeling`` skips an empty input line with one warning and goes on with the lines
  after it (:func:`install_skip_empty_lines`; the ids of the output lines count the prompts
  generated); an empty prompt that still reaches generation is refused (:func:`check_length`).

In ``fairseq-interactive`` each prompt also follows the plugin's prompt policy on unknown
symbols (:func:`fairseq_plugins.models.prompts.check_prompt`: all ``<unk>`` refused, some
one warning). :func:`install_prompt_checks` adds these checks to ``LanguageModelingTask`` in a
fairseq CLI process that loaded the plugin; ``streaming_lm`` has its own
(``tasks/generation_checks.py``).
"""

import logging
from typing import Dict, Optional

from torch import Tensor

from fairseq_plugins.errors import ConfigError
from fairseq_plugins.models.prompts import check_prompt

logger = logging.getLogger(__name__)

FIXES = ("generate with --beam 1 or --sampling --beam 1, or beam-search a prompt file of one prompt per line "
         "without empty lines (--sample-break-mode eos; docs/generation.md)")


def check_prefixes(datasets: Dict[str, object], prefix_size: int, bos: int, eos: int, beam: int,
                   break_mode: str) -> None:
    """Refuse beam search over a forced prefix holding end-of-sentence in any example of ``datasets``
    (split name -> a dataset whose items have ``source`` and ``target`` 1-D tensors)."""
    for split, dataset in datasets.items():
        starts = 0
        for index in range(len(dataset)):
            item = dataset[index]
            if prefix_size > 0:
                forced, inside = item["target"][:prefix_size], item["target"][:prefix_size]
            else:
                forced = item["source"]
                inside = forced[1:] if forced.numel() and int(forced[0]) == bos else forced
                starts += int(forced.numel() > 0 and int(forced[0]) == bos)
            if bool(inside.eq(eos).any()):
                _refuse(beam, prefix_size, break_mode, f"example {index} of the '{split}' split")
        if prefix_size <= 0 and 0 < starts < len(dataset):
            _refuse(beam, prefix_size, break_mode, f"{starts} of the {len(dataset)} examples of the '{split}' "
                                                   f"split start with it, and a batch can mix them with the others")


def _refuse(beam: int, prefix_size: int, break_mode: str, where: str) -> None:
    forced = (f"its first --prefix-size {prefix_size} target tokens" if prefix_size > 0
              else "its source tokens, language_modeling's prompt")
    why = ("data-prep separates documents with empty lines" if break_mode == "eos"
           else "a block can start or hold a line end")
    raise ConfigError(f"fairseq-generate's beam search (--beam {beam}) cannot follow a forced prefix ({forced}) that "
                      f"holds end-of-sentence ({where}; {why}); nothing was generated; {FIXES}")


def check_length(prefix_tokens: Optional[Tensor], source_length: int, max_len_a: float, max_len_b: int,
                 positions: int, pad: int, eos: int, interactive: bool) -> None:
    """Refuse a batch's prompts ``prefix_tokens`` ``(bsz, K)`` that leave nothing to generate: an
    empty one (``fairseq-interactive``), or one at least as long as the length limit
    ``min(max_len_a * source_length + max_len_b, positions - 1)``."""
    real = (prefix_tokens.ne(pad) & prefix_tokens.ne(eos)).sum(-1) if prefix_tokens is not None else None
    if interactive and (real is None or bool(real.eq(0).any())):
        raise ConfigError("an empty prompt (an empty input line): fairseq-interactive would generate text "
                          "unconditionally; give the text to continue, one prompt per line")
    if prefix_tokens is None:
        return
    limit = min(int(max_len_a * source_length + max_len_b), positions - 1)
    longest = prefix_tokens.size(1)
    if longest < limit:
        return
    if int(max_len_a * source_length + max_len_b) <= positions - 1:
        raise ConfigError(
            f"a prompt of {longest} tokens and --max-len-a {max_len_a:g} --max-len-b {max_len_b} (at most "
            f"{limit} tokens in all: the limit counts the prompt) leave nothing to generate after it; pass "
            f"--max-len-a 1 --max-len-b N to generate N tokens after a prompt of any length")
    raise ConfigError(
        f"a prompt of {longest} tokens fills the model's {positions} positions: nothing would be generated "
        f"after it; give a prompt of fewer than {positions - 1} tokens (the ∞-former continues a prompt of any "
        f"length with scripts/continue.sh, docs/generation.md)")


def install_prompt_checks(interactive: bool) -> None:
    """Add the checks to ``LanguageModelingTask.build_generator``/``inference_step`` (this process)."""
    from fairseq.sequence_generator import SequenceGenerator
    from fairseq.tasks.language_modeling import LanguageModelingTask

    build_generator, inference_step = LanguageModelingTask.build_generator, LanguageModelingTask.inference_step

    def checked_build_generator(self, models, args, *rest, **kwargs):
        if args.beam > 1 and not args.sampling and not args.score_reference:
            check_prefixes(self.datasets, args.prefix_size, _bos(self), self.source_dictionary.eos(), args.beam,
                           self.args.sample_break_mode)
        return build_generator(self, models, args, *rest, **kwargs)

    def checked_inference_step(self, generator, models, sample, prefix_tokens=None, constraints=None):
        if isinstance(generator, SequenceGenerator):
            forced = prefix_tokens
            src_tokens = sample["net_input"]["src_tokens"]
            if forced is None and src_tokens.nelement():
                forced = src_tokens[:, 1:] if bool(src_tokens[:, 0].eq(_bos(self)).all()) else src_tokens
            check_length(forced, src_tokens.size(1), generator.max_len_a, generator.max_len_b, generator.max_len,
                         self.source_dictionary.pad(), self.source_dictionary.eos(), interactive)
            if interactive and forced is not None:
                for row in forced:
                    warning = check_prompt(row.tolist(), self.source_dictionary)
                    if warning:
                        logger.warning(warning)
        return inference_step(self, generator, models, sample, prefix_tokens=prefix_tokens, constraints=constraints)

    LanguageModelingTask.build_generator = checked_build_generator
    LanguageModelingTask.inference_step = checked_inference_step


def install_skip_empty_lines() -> None:
    """``fairseq-interactive`` reads its input without the empty lines, one warning each (this
    process; the module docstring)."""
    import fairseq_cli.interactive as interactive

    read = interactive.buffered_read

    def buffered_read(input, buffer_size):
        number = 0
        for buffer in read(input, buffer_size):
            kept = []
            for line in buffer:
                number += 1
                if line.strip():
                    kept.append(line)
                else:
                    logger.warning("input line %d is empty: skipped (no prompt to continue); the lines after it "
                                   "are generated", number)
            if kept:
                yield kept

    interactive.buffered_read = buffered_read


def _bos(task) -> int:
    """The token language_modeling conditions generation on (its ``inference_step``)."""
    dictionary = task.source_dictionary
    return dictionary.bos() if task.args.add_bos_token else dictionary.eos()
