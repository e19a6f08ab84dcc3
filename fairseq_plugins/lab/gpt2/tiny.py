"""A tiny, randomly initialised GPT-2 saved as a Hugging Face folder, offline:
``fairseq-longmem gpt2 tiny`` (docs/gpt2.md, "The recipe on a tiny random GPT-2").

A byte-level BPE with ``<|endoftext|>`` is trained with ``tokenizers`` on text files (default:
the repository's fixture books, ``tests/fixtures/books_txt``), the model is ``transformers``'
``GPT2LMHeadModel`` with random weights, and both are saved with ``save_pretrained``
(``config.json``, ``model.safetensors``, ``vocab.json``, ``merges.txt``, ...): the layout of
a pretrained GPT-2 download, for exercising the recipe of docs/gpt2.md on a CPU. Needs
``pip install -e ".[hf]"``.
"""

import glob
import os
import shutil
import tempfile
from typing import List, Optional

import fairseq_plugins
from fairseq_plugins.errors import ConfigError

FIXTURE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(fairseq_plugins.__file__))),
                       "tests", "fixtures", "books_txt")


def make_tiny_gpt2(out: str, text: Optional[List[str]] = None, vocab_size: int = 500, layers: int = 2,
                   width: int = 64, heads: int = 4, positions: int = 64, seed: int = 0) -> str:
    """Write the tiny GPT-2 into ``out`` (created; its files replaced together).

    Returns:
        one line saying what was written.
    Raises:
        ConfigError: transformers or tokenizers missing, no text to train the BPE on.
    """
    try:
        import torch
        from tokenizers import ByteLevelBPETokenizer
        from transformers import GPT2Config, GPT2LMHeadModel, GPT2TokenizerFast
    except ImportError as e:
        raise ConfigError(f"{e.name or e} is not installed: pip install -e \".[hf]\"") from None
    files = text or sorted(glob.glob(os.path.join(FIXTURE, "*.txt")))
    missing = [f for f in files if not os.path.isfile(f)]
    if not files or missing:
        raise ConfigError(f"no text to train the BPE on ({missing[0] if missing else 'no file given'}); "
                          "pass --text FILE ...")
    bpe = ByteLevelBPETokenizer()
    texts = [open(f, encoding="utf-8", errors="replace").read() for f in files]  # some books are Latin-1
    bpe.train_from_iterator(texts, vocab_size=vocab_size, min_frequency=2, special_tokens=["<|endoftext|>"],
                            show_progress=False)
    eot = bpe.token_to_id("<|endoftext|>")
    tokenizer = GPT2TokenizerFast(tokenizer_object=bpe._tokenizer, bos_token="<|endoftext|>",
                                  eos_token="<|endoftext|>", unk_token="<|endoftext|>")
    torch.manual_seed(seed)
    config = GPT2Config(vocab_size=bpe.get_vocab_size(), n_positions=positions, n_embd=width,
                        n_layer=layers, n_head=heads, bos_token_id=eot, eos_token_id=eot)
    model = GPT2LMHeadModel(config)
    parent = os.path.dirname(os.path.abspath(out))
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".tiny-gpt2.", dir=parent)  # the folder appears whole or not at all
    try:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        bpe.save_model(staging)  # vocab.json + merges.txt (the files fairseq's GPT-2 BPE reads)
        os.makedirs(out, exist_ok=True)
        for name in os.listdir(staging):
            os.replace(os.path.join(staging, name), os.path.join(out, name))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return (f"tiny GPT-2 ({layers} layers, width {width}, {config.vocab_size} tokens, {positions} positions) "
            f"-> {out}")
