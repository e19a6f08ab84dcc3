"""``fairseq-longmem continue``: continue a text file with an ``infinite_former_lm`` checkpoint
(``scripts/continue.sh`` is this command; docs/generation.md, "Continue a text").

    fairseq-longmem continue --checkpoint CK --data OUT/bin --prompt-file book.txt \\
        [--prompt-tokens 20000] [--max-len 200] [--sampling --sampling-topp P | --beam K] [--seed S]

Reads the checkpoint, the data's ``dict.txt`` (and ``spm.model``, ``prepare.json`` beside
``OUT/bin``) and the prompt file; writes no file: the continuation goes to stdout (paragraphs
separated by a blank line), one line to stderr (prompt length, tokens generated, seconds).
The logic: :mod:`fairseq_plugins.lab.generation.continuation`, on the model's hub interface.
"""

import argparse
import logging
from typing import List, Optional

from fairseq_plugins.lab.common import cli


def _parser(prog: str) -> argparse.ArgumentParser:
    p = cli.ArgumentParser(
        prog=prog, description="Continue a text with an infinite_former_lm checkpoint (scripts/train.sh "
        "infinite_former or memory_off): the prompt is read into the memory segment by segment, then fairseq's "
        "SequenceGenerator continues it. Writes the continuation to stdout and one line to stderr; no file.")
    p.add_argument("--checkpoint", required=True, help="checkpoint_*.pt written by scripts/train.sh")
    p.add_argument("--data", required=True, help="the prepared data's bin/ folder (dict.txt; spm.model beside it)")
    p.add_argument("--prompt-file", required=True, help="UTF-8 text to continue")
    p.add_argument("--prompt-tokens", type=cli.positive_int, default=20000,
                   help="keep the last N tokens of the prompt [20000]")
    p.add_argument("--max-len", type=cli.positive_int, default=200,
                   help="tokens to generate at most [200; at most 100,000]")
    p.add_argument("--beam", type=cli.positive_int, default=1, help="beam size (without --sampling) [1]")
    p.add_argument("--sampling", action="store_true", help="sample instead of beam search")
    p.add_argument("--sampling-topp", type=float, default=-1.0, help="nucleus sampling: keep the top-p mass")
    p.add_argument("--temperature", type=cli.positive_float, default=1.0, help="sampling temperature [1.0]")
    p.add_argument("--seed", type=cli.non_negative_int, default=1, help="the sampling seed [1]")
    p.add_argument("--spm-model", help="sentencepiece model [DATA/../spm.model]")
    p.add_argument("--cpu", action="store_true", help="run on the CPU even if a GPU is available")
    p.add_argument("--prog", help="the recipe's name for its messages (scripts/continue.sh)")
    return p


def main(argv: List[str], prog: str) -> Optional[int]:
    """Parse the options and continue the text (see the module docstring)."""
    from fairseq_plugins.lab.common.cli import recipe_prog, run_command

    name = recipe_prog(argv, prog)
    args = _parser(name).parse_args(argv)
    # stderr holds this command's own lines (the one result line, warnings, the error), not the
    # INFO records of the handler fairseq installs at import (dictionary sizes, archive files)
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(levelname)s: %(message)s", force=True)

    def run(_argv, _prog):
        from fairseq_plugins.lab.common.cli import load_components

        load_components()
        from fairseq_plugins.lab.generation.continuation import continue_text

        continue_text(args.checkpoint, args.data, args.prompt_file, prompt_tokens=args.prompt_tokens,
                      max_len=args.max_len, beam=args.beam, sampling=args.sampling, sampling_topp=args.sampling_topp,
                      temperature=args.temperature, seed=args.seed, spm_model=args.spm_model, cpu=args.cpu, prog=name)

    return run_command(run, [], name)
