#!/usr/bin/env python3
"""Write a tiny, randomly initialised GPT-2 as a Hugging Face folder, offline.

    python scripts/make_tiny_gpt2.py --out DIR [--text FILE ...] [--vocab-size 500]
           [--layers 2] [--width 64] [--heads 4] [--positions 64] [--seed 0]

A byte-level BPE with ``<|endoftext|>`` is trained with ``tokenizers`` on the text files
(default: the repository's test fixture books), the model is ``transformers``'
``GPT2LMHeadModel`` with random weights, and both are saved with ``save_pretrained``
(``config.json``, ``model.safetensors``, ``vocab.json``, ``merges.txt``, ...): the
layout of a pretrained GPT-2 download, for exercising the recipe of docs/gpt2.md on a
CPU. Needs ``pip install -e ".[hf]"``.
"""

import argparse
import glob
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from script_errors import ScriptError, run_main  # noqa: E402

PROG = "make_tiny_gpt2.py"
FIXTURE = os.path.join(os.path.dirname(HERE), "tests", "fixtures", "books_txt")


def make(args):
    try:
        import torch
        from tokenizers import ByteLevelBPETokenizer
        from transformers import GPT2Config, GPT2LMHeadModel, GPT2TokenizerFast
    except ImportError as e:
        raise ScriptError(f"{e.name or e} is not installed: pip install -e \".[hf]\"") from None
    files = args.text or sorted(glob.glob(os.path.join(FIXTURE, "*.txt")))
    if not files:
        raise ScriptError("no text to train the BPE on; pass --text FILE")
    bpe = ByteLevelBPETokenizer()
    texts = [open(f, encoding="utf-8", errors="replace").read() for f in files]  # some books are Latin-1
    bpe.train_from_iterator(texts, vocab_size=args.vocab_size, min_frequency=2, special_tokens=["<|endoftext|>"],
                            show_progress=False)
    eot = bpe.token_to_id("<|endoftext|>")
    tokenizer = GPT2TokenizerFast(tokenizer_object=bpe._tokenizer, bos_token="<|endoftext|>",
                                  eos_token="<|endoftext|>", unk_token="<|endoftext|>")
    torch.manual_seed(args.seed)
    config = GPT2Config(vocab_size=bpe.get_vocab_size(), n_positions=args.positions, n_embd=args.width,
                        n_layer=args.layers, n_head=args.heads, bos_token_id=eot, eos_token_id=eot)
    model = GPT2LMHeadModel(config)
    os.makedirs(args.out, exist_ok=True)
    model.save_pretrained(args.out)
    tokenizer.save_pretrained(args.out)
    bpe.save_model(args.out)  # vocab.json + merges.txt (the files fairseq's GPT-2 BPE reads)
    print(f"tiny GPT-2 ({args.layers} layers, width {args.width}, {config.vocab_size} tokens, "
          f"{args.positions} positions) -> {args.out}")


def main(argv=None):
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--text", nargs="*", help="text files for the BPE [the fixture books]")
    p.add_argument("--vocab-size", type=int, default=500)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--positions", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    return run_main(lambda: make(args), PROG)


if __name__ == "__main__":
    sys.exit(main())
