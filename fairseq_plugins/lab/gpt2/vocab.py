"""GPT-2's vocabulary as a fairseq dictionary (docs/gpt2.md; docs/design/gpt2.md §5).

Shared by :mod:`fairseq_plugins.lab.gpt2.convert` (the converted model's ``dict.txt`` and the
order of its embedding rows) and :mod:`fairseq_plugins.lab.gpt2.bpe` (text → GPT-2 ids →
the same ``dict.txt``), so that the data and the model always agree. Errors:
:class:`~fairseq_plugins.errors.ConfigError`.

The convention (fairseq's ``--bpe gpt2``): every GPT-2 token id is a symbol written in
decimal; ``dict.txt`` lists them in id order after fairseq's four special symbols
``<s> <pad> </s> <unk>``, except ``<|endoftext|>``, which *is* fairseq's ``</s>`` (the
end-of-sentence symbol that fairseq-preprocess appends to every line and that the
``streaming_lm`` task puts in front of every stream).
"""

import json
import os

from fairseq_plugins.errors import ConfigError

EOT_TOKEN = "<|endoftext|>"
TOKENIZER_FILES = ("vocab.json", "merges.txt")


def read_vocab(hf_dir):
    """``vocab.json`` of a Hugging Face GPT-2 folder → ``{token: id}``.

    Raises:
        ConfigError: the file is missing or not a token → id map.
    """
    path = os.path.join(hf_dir, "vocab.json")
    if not os.path.isfile(path):
        raise ConfigError(f"{path} is missing: --hf-dir must hold GPT-2's tokenizer files "
                          f"({', '.join(TOKENIZER_FILES)}), as save_pretrained writes them")
    try:
        with open(path, encoding="utf-8") as f:
            vocab = json.load(f)
    except (ValueError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path} is not valid JSON ({e}); use the vocab.json of a GPT-2 tokenizer")
    if not isinstance(vocab, dict) or not all(isinstance(v, int) for v in vocab.values()):
        raise ConfigError(f"{path} is not a GPT-2 vocabulary (a JSON object token -> id)")
    ids = sorted(vocab.values())
    if ids != list(range(len(ids))):
        raise ConfigError(f"{path}: the token ids are not 0..{len(ids) - 1} without gaps; not a GPT-2 vocabulary")
    return vocab


def read_merges(hf_dir):
    """``merges.txt`` → list of ``(a, b)`` pairs (the ``#version`` header skipped).

    Raises:
        ConfigError: the file is missing or malformed.
    """
    path = os.path.join(hf_dir, "merges.txt")
    if not os.path.isfile(path):
        raise ConfigError(f"{path} is missing: --hf-dir must hold GPT-2's tokenizer files "
                          f"({', '.join(TOKENIZER_FILES)}), as save_pretrained writes them")
    merges = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line or line.startswith("#version"):
                continue
            parts = line.split(" ")
            if len(parts) != 2:
                raise ConfigError(f"{path}:{number}: expected two symbols separated by a space; not GPT-2 merges")
            merges.append(tuple(parts))
    return merges


def eot_id(vocab, config_eos=None):
    """GPT-2's ``<|endoftext|>`` id: from the vocabulary, else ``config.json``'s ``eos_token_id``."""
    if EOT_TOKEN in vocab:
        return vocab[EOT_TOKEN]
    if isinstance(config_eos, int) and 0 <= config_eos < len(vocab):
        return config_eos
    raise ConfigError(f"the vocabulary has no {EOT_TOKEN} token (and config.json no eos_token_id): "
                      "not a GPT-2 tokenizer")


def dictionary_symbols(vocab_size, eot):
    """The ``dict.txt`` symbols in order: GPT-2 ids ``0..vocab_size-1`` in decimal, ``eot`` left out."""
    return [str(i) for i in range(vocab_size) if i != eot]


def write_dict(path, symbols):
    """Write a fairseq ``dict.txt`` (``symbol count`` lines; the counts are unused, all 1)."""
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8", newline="\n") as f:
        for s in symbols:
            f.write(f"{s} 1\n")
    os.replace(tmp, path)
