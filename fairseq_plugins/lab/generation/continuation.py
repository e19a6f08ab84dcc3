"""Continue a text file with an ``infinite_former_lm`` checkpoint: ``fairseq-longmem continue``
(``scripts/continue.sh``; docs/generation.md, "Continue a text").

The prompt file is read and split into lines by data-prep's own functions
(:mod:`fairseq_plugins.lab.data.text`, as prepare-lm.sh reads a text document: UTF-8, or Latin-1
for a legacy file without any UTF-8 character, paragraphs by the data's ``--paragraphs`` rule from
``DATA/../prepare.json``, control characters dropped, whitespace collapsed, over-long paragraphs
cut at sentence ends), sentencepiece-encoded with the data-prep model (``DATA/../spm.model``), mapped with
``DATA/dict.txt``, one end-of-sentence token after every line (as fairseq-preprocess writes
them), and the last ``prompt_tokens`` tokens are kept after the stream's first end-of-sentence
token. Pieces the model cannot encode are read as ``<unk>`` (one warning line names them); a
prompt of nothing else is refused. The prompt is checked before the checkpoint loads.

Generation goes through the model's hub interface
(:meth:`~fairseq_plugins.models.hub.SegmentedLMHubInterface.continue_tokens`): the prompt is
prefilled into the memory segment by segment, then fairseq's ``SequenceGenerator`` (beam search
or top-p sampling) continues from that state; the prompt's end-of-sentence tokens are read as
text, never as the end of a hypothesis.
"""

import json
import os
import sys
import time
from typing import List, Optional, Tuple

from fairseq_plugins.lab.data.text import DEFAULT_PARAGRAPHS, PARAGRAPH_RULES, finish_paragraphs, read_text
from fairseq_plugins.models.prompts import check_prompt
from fairseq_plugins.errors import ConfigError
from fairseq_plugins.models.hub import check_generation_length


def check_options(prompt_tokens: int, max_len: int, beam: int, sampling_topp: float) -> None:
    """Refuse options no run can honour, before anything loads.

    Raises:
        ConfigError: a count that is not positive, ``sampling_topp`` outside (0, 1] (−1: off),
            more tokens than fairseq's generator produces in one run.
    """
    for name, value in (("prompt-tokens", prompt_tokens), ("max-len", max_len), ("beam", beam)):
        if value <= 0:
            raise ConfigError(f"--{name} must be positive, got {value}")
    if sampling_topp != -1.0 and not 0.0 < sampling_topp <= 1.0:
        raise ConfigError(f"--sampling-topp must lie in (0, 1], got {sampling_topp}")
    try:
        check_generation_length(max_len, beam)
    except ConfigError as e:
        raise ConfigError(f"--max-len {max_len}: {e}") from None


def prepared_options(data: str) -> dict:
    """The options the data was prepared with (``DATA/../prepare.json``; empty without one)."""
    manifest = os.path.join(os.path.dirname(os.path.abspath(data)), "prepare.json")
    if not os.path.isfile(manifest):
        return {}
    with open(manifest, encoding="utf-8") as f:
        return json.load(f).get("options", {})


def paragraph_rule(data: str) -> str:
    """The ``--paragraphs`` rule the data was prepared with (``DATA/../prepare.json``)."""
    return prepared_options(data).get("paragraphs", DEFAULT_PARAGRAPHS)


GPT2_HINT = ("continue a GPT-2-BPE checkpoint with the hub interface, InfiniteFormerGPT2Model.from_pretrained(..., "
             "bpe='gpt2') (docs/gpt2.md), or fairseq-longmem interactive")


def check_sentencepiece_data(data: str, checkpoint: str, state: dict) -> None:
    """Refuse data prepared with another tokenizer than sentencepiece (``prepare-lm.sh --bpe
    gpt2``) and a checkpoint of GPT-2 with the memory (``state``: its saved dict), for which no
    ``--spm-model`` can help.

    Raises:
        ConfigError: naming the tokenizer and what continues such a checkpoint.
    """
    bpe = prepared_options(data).get("bpe", "sentencepiece")
    if bpe != "sentencepiece":
        raise ConfigError(f"{data} was prepared with --bpe {bpe} (DATA/../prepare.json), and continue reads "
                          f"sentencepiece data only (no --spm-model fits it); {GPT2_HINT}")
    model = ((state.get("cfg") or {}).get("model") or {}).get("_name")
    if model == "infinite_former_gpt2":
        raise ConfigError(f"{checkpoint} is an infinite_former_gpt2 checkpoint, whose text is GPT-2's BPE, and "
                          f"continue reads sentencepiece data only (no --spm-model fits it); {GPT2_HINT}")


def encode_prompt(path: str, sp, dictionary, keep: int, rule: str = DEFAULT_PARAGRAPHS) -> Tuple[List[int], Optional[str]]:
    """``(ids, warning)``: the token ids ``[eos] + last keep tokens`` of the lines data-prep
    makes of ``path``, and the prompt policy's warning on the kept ones' ``<unk>`` tokens
    (:func:`fairseq_plugins.models.prompts.check_prompt`; ``None`` when there are none).

    Raises:
        ConfigError: a file without text, or one the sentencepiece model reads as ``<unk>`` only.
    """
    ids, pieces = [], []
    for line in finish_paragraphs(PARAGRAPH_RULES[rule](read_text(path))):
        for piece in sp.encode(line, out_type=str):
            ids.append(dictionary.index(piece))
            pieces.append(piece)
        ids.append(dictionary.eos())
        pieces.append(None)
    check_prompt(ids, dictionary, f"the prompt file {path}")
    warning = check_prompt(ids[-keep:], dictionary, "the prompt", pieces[-keep:])
    return [dictionary.eos()] + ids[-keep:], warning


def paragraphs(ids: List[int], sp, dictionary) -> str:
    """Generated ids → text: each end-of-sentence ends a paragraph (a blank line between two)."""
    lines, current = [], []
    for i in ids:
        if i == dictionary.eos():
            lines.append(sp.decode(current))
            current = []
        else:
            current.append(dictionary[i])
    lines.append(sp.decode(current))
    return "\n\n".join(lines)


def continue_text(checkpoint: str, data: str, prompt_file: str, *, prompt_tokens: int = 20000, max_len: int = 200,
                  beam: int = 1, sampling: bool = False, sampling_topp: float = -1.0, temperature: float = 1.0,
                  seed: int = 1, spm_model: Optional[str] = None, cpu: bool = False, prog: str = "continue") -> str:
    """Continue the text of ``prompt_file`` (see the module docstring): print the continuation
    on stdout and one line on stderr (the prompt's and the continuation's lengths, the time).

    Returns:
        the continuation's text.
    Raises:
        ConfigError: bad options, a missing file, an empty or unreadable prompt, data of another
            tokenizer than sentencepiece, a file that is no fairseq checkpoint, a checkpoint of
            another model.
    """
    check_options(prompt_tokens, max_len, beam, sampling_topp)
    if os.path.isdir(prompt_file):
        raise ConfigError(f"prompt file {prompt_file} is a directory; give a text file")
    for path, what in ((checkpoint, "checkpoint"), (prompt_file, "prompt file"),
                       (os.path.join(data, "dict.txt"), "dictionary (--data must be the prepared bin/ folder)")):
        if not os.path.isfile(path):
            raise ConfigError(f"{what} {path} not found")
    from fairseq_plugins.lab.common.checkpoints import read_state

    state = read_state(checkpoint)  # a fairseq checkpoint (not, say, a Hugging Face pytorch_model.bin)
    check_sentencepiece_data(data, checkpoint, state)
    spm_model = spm_model or os.path.join(os.path.dirname(os.path.abspath(data)), "spm.model")
    if not os.path.isfile(spm_model):
        raise ConfigError(f"sentencepiece model {spm_model} not found; pass --spm-model (data-prep writes "
                          "OUT/spm.model)")
    import sentencepiece
    import torch
    from fairseq.data import Dictionary

    from fairseq_plugins.models.infinite_former_lm import InfiniteFormerLanguageModel

    sp = sentencepiece.SentencePieceProcessor(model_file=spm_model)
    dictionary = Dictionary.load(os.path.join(data, "dict.txt"))  # the task's dictionary
    prompt, warning = encode_prompt(prompt_file, sp, dictionary, prompt_tokens, paragraph_rule(data))
    if warning:
        print(f"{prog}: warning: {warning}", file=sys.stderr)
    torch.manual_seed(seed)  # before loading: the model is built (randomly) first, then its weights read
    lm = InfiniteFormerLanguageModel.from_pretrained(
        os.path.dirname(os.path.abspath(checkpoint)), checkpoint_file=os.path.basename(checkpoint),
        data_name_or_path=os.path.abspath(data), bpe="sentencepiece", sentencepiece_model=spm_model)
    if torch.cuda.is_available() and not cpu:
        lm.cuda()
    start = time.perf_counter()
    hypos = lm.continue_tokens(torch.tensor(prompt), beam=1 if sampling else beam, sampling=sampling,
                               sampling_topp=sampling_topp, temperature=temperature, max_len_a=0,
                               max_len_b=max_len, min_len=1)
    seconds = time.perf_counter() - start
    best = hypos[0]["tokens"][len(prompt) - 1:].tolist()  # after the prompt
    if best and best[-1] == dictionary.eos():
        best = best[:-1]
    text = paragraphs(best, sp, dictionary)
    print(text)
    print(f"{prog}: prompt {len(prompt) - 1} tokens, generated {len(best)} tokens in {seconds:.1f} s", file=sys.stderr)
    return text
