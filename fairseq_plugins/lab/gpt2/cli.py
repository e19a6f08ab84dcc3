"""``fairseq-longmem gpt2``: GPT-2 with the ∞-former's long-term memory (docs/gpt2.md).

    fairseq-longmem gpt2 convert --hf-dir DIR --out OUT [--tokens-per-sample L] [--no-long-term-memory] [--verify] [--force]
    fairseq-longmem gpt2 tiny --out DIR [--text FILE ...] [--vocab-size 500] [--layers 2] [--width 64] ...
    fairseq-longmem gpt2 check --hf-dir DIR --work DIR --tokens-per-sample L (--data BIN | --corpus C [--input PATH])
    fairseq-longmem gpt2 updates --data BIN --tokens-per-sample L --batch-size B --max-epoch E [--max-update U]

convert  reads a Hugging Face GPT-2 folder; writes OUT/checkpoint.pt, OUT/dict.txt and
         OUT/model-args.txt, together or not at all (fairseq_plugins/lab/gpt2/convert.py)
tiny     writes a tiny random GPT-2 folder, save_pretrained's layout (fairseq_plugins/lab/gpt2/tiny.py)
check    scripts/gpt2-recipe.sh's inputs, before it creates anything; writes nothing
updates  prints the updates of the recipe's linear schedule; writes nothing
         (check and updates: fairseq_plugins/lab/gpt2/recipe.py)

Bad input is one line ``PROG VERB: error: ...`` (exit 2) and writes nothing.
"""

import argparse
import os
from typing import List, Optional

from fairseq_plugins.errors import ConfigError
from fairseq_plugins.lab.common.quiet import quiet_config_notices, quiet_progress_bars

# the files of a Hugging Face model folder that `gpt2 tiny` would replace
MODEL_FILES = ("config.json", "model.safetensors", "pytorch_model.bin")


def _parser(prog: str) -> argparse.ArgumentParser:
    from fairseq_plugins.lab.common.cli import non_negative_int, positive_int, topic_parser

    p, sub = topic_parser(prog, __doc__)
    s = sub.add_parser("convert", help="a Hugging Face GPT-2 folder -> OUT/checkpoint.pt, dict.txt, model-args.txt",
                       description="Convert a Hugging Face GPT-2 folder (config.json, model.safetensors or "
                       "pytorch_model.bin, vocab.json, merges.txt) into an infinite_former_gpt2 checkpoint. Writes "
                       "OUT/checkpoint.pt, OUT/dict.txt and OUT/model-args.txt, together or not at all.")
    s.add_argument("--hf-dir", required=True, help="Hugging Face GPT-2 folder (save_pretrained layout)")
    s.add_argument("--out", required=True, help="output folder: checkpoint.pt, dict.txt, model-args.txt")
    s.add_argument("--tokens-per-sample", type=positive_int, default=None,
                   help="block length L stored in the checkpoint's config (paper: 512) "
                        "[512, or the position table's length if shorter]")
    s.add_argument("--no-long-term-memory", action="store_true", help="convert plain GPT-2 (no memory)")
    s.add_argument("--verify", action="store_true",
                   help="compare the logits with transformers' GPT2LMHeadModel before writing")
    s.add_argument("--force", action="store_true", help="replace a conversion already in --out")
    s = sub.add_parser("tiny", help="a tiny random GPT-2 -> DIR (save_pretrained layout; needs the [hf] extra)",
                       description="Write a tiny, randomly initialised GPT-2 and a byte-level BPE trained on text "
                       "files as a Hugging Face folder (config.json, model.safetensors, vocab.json, merges.txt, "
                       "...), offline, for CPU runs of the recipe.")
    s.add_argument("--out", required=True, help="the folder to write (refused when it holds a model, unless --force)")
    s.add_argument("--force", action="store_true", help="replace the model files a folder --out already holds")
    s.add_argument("--text", nargs="*", help="text files for the BPE [tests/fixtures/books_txt/*.txt]")
    s.add_argument("--vocab-size", type=positive_int, default=500)
    s.add_argument("--layers", type=positive_int, default=2)
    s.add_argument("--width", type=positive_int, default=64)
    s.add_argument("--heads", type=positive_int, default=4)
    s.add_argument("--positions", type=positive_int, default=64)
    s.add_argument("--seed", type=non_negative_int, default=0)
    s = sub.add_parser("check", help="scripts/gpt2-recipe.sh's inputs, before it creates anything (writes nothing)",
                       description="Check the GPT-2 recipe's inputs as the converter and data-prep read them: "
                       "--hf-dir's config.json, vocab.json and merges.txt, then --data or --corpus/--input. "
                       "Writes nothing.")
    s.add_argument("--hf-dir", required=True)
    s.add_argument("--work", required=True)
    s.add_argument("--tokens-per-sample", type=positive_int, required=True)
    s.add_argument("--data")
    s.add_argument("--corpus")
    s.add_argument("--input")
    s.add_argument("--paragraphs")
    s.add_argument("--prog", help="the recipe's name for the error line")
    s = sub.add_parser("updates", help="the updates of E epochs of streaming_lm over BIN's train split (stdout)",
                       description="Print the number of updates of --max-epoch epochs of streaming_lm over the "
                       "train split of BIN (--batch-size streams, segments of --tokens-per-sample), capped by "
                       "--max-update when positive. Writes nothing.")
    s.add_argument("--data", required=True)
    s.add_argument("--tokens-per-sample", type=positive_int, required=True)
    s.add_argument("--batch-size", type=positive_int, required=True)
    s.add_argument("--max-epoch", type=positive_int, required=True)
    s.add_argument("--max-update", type=non_negative_int, default=0, help="cap on the updates (0: none) [0]")
    return p


def main(argv: List[str], prog: str) -> Optional[int]:
    """Run one verb (see the module docstring); its errors are one line ``PROG VERB: error: ...``."""
    from fairseq_plugins.lab.common.cli import parse_verb_args, run_command

    args = parse_verb_args(_parser(prog), argv)
    quiet_config_notices()
    if args.verb == "tiny" or getattr(args, "verify", False):
        quiet_progress_bars()
    return run_command(lambda _argv, _prog: _run(args), [], getattr(args, "prog", None) or f"{prog} {args.verb}")


def _run(args: argparse.Namespace) -> int:
    from fairseq_plugins.lab.common.cli import load_components

    load_components()
    if args.verb == "convert":
        from fairseq_plugins.lab.gpt2.convert import convert

        print(convert(args.hf_dir, args.out, args.tokens_per_sample, args.no_long_term_memory, args.verify,
                      args.force))
    elif args.verb == "tiny":
        from fairseq_plugins.lab.gpt2.tiny import make_tiny_gpt2

        held = [n for n in MODEL_FILES if os.path.isfile(os.path.join(args.out, n))]
        if held and not args.force:
            raise ConfigError(f"--out {args.out} already holds a model ({', '.join(held)}); pass another --out, or "
                              f"--force to replace it")
        print(make_tiny_gpt2(args.out, args.text, args.vocab_size, args.layers, args.width, args.heads,
                             args.positions, args.seed))
    elif args.verb == "check":
        from fairseq_plugins.lab.gpt2.recipe import check_recipe

        if not args.data and not args.corpus:
            raise ConfigError("give --data BIN or --corpus C --input PATH")
        check_recipe(args.hf_dir, args.work, args.tokens_per_sample, args.data, args.corpus, args.input,
                     args.paragraphs)
    else:
        from fairseq_plugins.lab.gpt2.recipe import epoch_updates

        print(epoch_updates(args.data, args.tokens_per_sample, args.batch_size, args.max_epoch, args.max_update))
    return 0

