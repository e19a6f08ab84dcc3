#!/usr/bin/env python3
"""Continue a text with an infinite_former_lm checkpoint (scripts/continue.sh; docs/generation.md).

The prompt file is read and split into lines with data-prep's own functions
(``fairseq_plugins/data_prep/text.py``, as prepare-lm.sh reads a text document: UTF-8 or Latin-1,
paragraphs by the data's ``--paragraphs`` rule from ``DATA/../prepare.json``, control
characters dropped, whitespace collapsed, over-long paragraphs cut at sentence ends),
sentencepiece-encoded with the data-prep model (``DATA/../spm.model``), mapped with
``DATA/dict.txt``, one end-of-sentence token after every line (as fairseq-preprocess
writes them), and the last ``--prompt-tokens`` tokens are kept, after the stream's
initial end-of-sentence token. Pieces the model cannot encode are read as ``<unk>`` (one
warning line names them); a prompt of nothing else is refused.

Generation is fairseq's own ``SequenceGenerator`` (beam search, or sampling with top-p).
The prompt is given to it as the "source" of a thin encoder–decoder wrapper: the encoder
is the ∞-former decoder run once over the prompt with an ``incremental_state`` (chunked
prefill, segment by segment, constant memory), and the generator's decoder steps start
from that state (the last prompt token is the generator's first token). This keeps
end-of-sentence tokens inside the prompt (fairseq's ``prefix_tokens`` would end a
hypothesis at each of them) and makes the prompt cost one pass instead of one generator
step per token.
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from script_errors import ScriptError, run_main  # noqa: E402

PROG = "continue.sh"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# this checkout's package, not another installed copy: fairseq's --user-dir import below
# refuses a second package of the same name
sys.path.insert(0, ROOT)
from fairseq_plugins.data_prep.text import DEFAULT_PARAGRAPHS, PARAGRAPH_RULES, finish_paragraphs, read_text  # noqa: E402


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog=PROG, description="continue a text with an infinite_former_lm checkpoint")
    p.add_argument("--checkpoint", required=True, help="checkpoint_*.pt written by scripts/train.sh")
    p.add_argument("--data", required=True, help="the prepared data's bin/ folder (dict.txt; spm.model beside it)")
    p.add_argument("--prompt-file", required=True, help="UTF-8 text to continue")
    p.add_argument("--prompt-tokens", type=int, default=20000, help="keep the last N tokens of the prompt [20000]")
    p.add_argument("--max-len", type=int, default=200, help="tokens to generate at most [200]")
    p.add_argument("--beam", type=int, default=1, help="beam size (without --sampling) [1]")
    p.add_argument("--sampling", action="store_true", help="sample instead of beam search")
    p.add_argument("--sampling-topp", type=float, default=-1.0, help="nucleus sampling: keep the top-p mass")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--spm-model", help="sentencepiece model [DATA/../spm.model]")
    p.add_argument("--cpu", action="store_true", help="run on the CPU even if a GPU is available")
    args = p.parse_args(argv)
    for name in ("prompt_tokens", "max_len", "beam"):
        if getattr(args, name) <= 0:
            raise ScriptError(f"--{name.replace('_', '-')} must be positive, got {getattr(args, name)}")
    if args.sampling_topp != -1.0 and not 0.0 < args.sampling_topp <= 1.0:
        raise ScriptError(f"--sampling-topp must lie in (0, 1], got {args.sampling_topp}")
    return args


def paragraph_rule(data):
    """The ``--paragraphs`` rule the data was prepared with (``DATA/../prepare.json``)."""
    manifest = os.path.join(os.path.dirname(os.path.abspath(data)), "prepare.json")
    if not os.path.isfile(manifest):
        return DEFAULT_PARAGRAPHS
    with open(manifest, encoding="utf-8") as f:
        return json.load(f).get("options", {}).get("paragraphs", DEFAULT_PARAGRAPHS)


def encode_prompt(path, sp, dictionary, keep, rule=DEFAULT_PARAGRAPHS):
    """``(ids, unknown)``: the token ids ``[eos] + last keep tokens`` of the lines data-prep
    makes of ``path`` (list of int), and the pieces among the kept ones read as ``<unk>``."""
    ids, pieces = [], []
    for line in finish_paragraphs(PARAGRAPH_RULES[rule](read_text(path))):
        for piece in sp.encode(line, out_type=str):
            ids.append(dictionary.index(piece))
            pieces.append(piece)
        ids.append(dictionary.eos())
        pieces.append(None)
    if not ids:
        raise ScriptError(f"the prompt file {path} holds no text; give a file with at least one word")
    blank = dictionary.index("\u2581")  # sentencepiece's bare word-boundary piece
    if all(i in (dictionary.unk(), dictionary.eos(), blank) for i in ids):
        raise ScriptError(f"the sentencepiece model encodes all of {path} as <unk>: the prompt is in another "
                          "script or language than the training data; give a prompt like the training text")
    unknown = [p for i, p in zip(ids[-keep:], pieces[-keep:]) if i == dictionary.unk()]
    return [dictionary.eos()] + ids[-keep:], unknown


def unknown_warning(unknown, total):
    """One line naming the prompt's pieces read as ``<unk>`` (``None`` when there are none)."""
    if not unknown:
        return None
    shown = list(dict.fromkeys(p.lstrip("\u2581") or p for p in unknown))
    more = f" and {len(shown) - 8} more" if len(shown) > 8 else ""
    verb = "is" if len(unknown) == 1 else "are"
    return (f"{PROG}: warning: {len(unknown)} of the prompt's {total} tokens {verb} <unk>: the sentencepiece model "
            f"cannot encode {' '.join(shown[:8])}{more}; the model reads them as unknown")


def build_wrapper(lm):
    """The encoder–decoder wrapper around the LM's incremental decoder (see the module docstring)."""
    from fairseq.models import FairseqEncoder, FairseqEncoderDecoderModel, FairseqIncrementalDecoder

    decoder = lm.decoder

    class PromptEncoder(FairseqEncoder):
        """Chunked prefill of ``src_tokens[:, :-1]``; ``encoder_out["prompt"]`` holds the state."""

        def forward(self, src_tokens, src_lengths=None):
            state = {}
            if src_tokens.size(1) > 1:
                decoder.prefill(src_tokens[:, :-1], state)
            flat = decoder.get_incremental_state(state, "memory") or {}
            return {"prompt": [flat[k] for k in sorted(flat)], "names": sorted(flat)}

        def reorder_encoder_out(self, encoder_out, new_order):
            names = encoder_out["names"]
            if not names:
                return encoder_out
            state = {}
            decoder.set_incremental_state(state, "memory", dict(zip(names, encoder_out["prompt"])))
            decoder.reorder_incremental_state(state, new_order)
            flat = decoder.get_incremental_state(state, "memory")
            return {"prompt": [flat[k] for k in names], "names": names}

        def max_positions(self):
            return int(1e9)

    class PromptedDecoder(FairseqIncrementalDecoder):
        """The LM's decoder, started from the prompt's state (it reorders its own cache)."""

        def __init__(self):
            super().__init__(decoder.dictionary)
            self.lm = decoder

        def forward(self, prev_output_tokens, encoder_out=None, incremental_state=None, **kwargs):
            if incremental_state is not None and self.lm.get_incremental_state(incremental_state, "memory") is None \
                    and encoder_out is not None and encoder_out["names"]:
                flat = dict(zip(encoder_out["names"], encoder_out["prompt"]))
                flat["seen"] = flat["seen"].new_zeros(flat["seen"].shape)  # the generator's tokens start here
                self.lm.set_incremental_state(incremental_state, "memory", flat)
            return self.lm(prev_output_tokens, incremental_state=incremental_state)

        def max_positions(self):
            return int(1e9)

    return FairseqEncoderDecoderModel(PromptEncoder(decoder.dictionary), PromptedDecoder()).eval()


def main(argv=None):
    args = parse_args(argv)
    if os.path.isdir(args.prompt_file):
        raise ScriptError(f"prompt file {args.prompt_file} is a directory; give a text file")
    for path, what in ((args.checkpoint, "checkpoint"), (args.prompt_file, "prompt file"),
                       (os.path.join(args.data, "dict.txt"), "dictionary (--data must be the prepared bin/ folder)")):
        if not os.path.isfile(path):
            raise ScriptError(f"{what} {path} not found")
    spm_model = args.spm_model or os.path.join(os.path.dirname(os.path.abspath(args.data)), "spm.model")
    if not os.path.isfile(spm_model):
        raise ScriptError(f"sentencepiece model {spm_model} not found; pass --spm-model "
                          "(data-prep writes OUT/spm.model)")

    import logging

    # this script's stderr is its own lines (one per run, warnings, the error): fairseq's INFO
    # records (tensorboardX, dictionary sizes, the user dir) are not; its warnings still are
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(levelname)s: %(message)s")
    import sentencepiece
    import torch
    from fairseq import checkpoint_utils, search, utils
    from fairseq.data import Dictionary
    from fairseq.sequence_generator import SequenceGenerator

    from fairseq_plugins.errors import ConfigError
    from fairseq_plugins.models.infinite_former_lm import InfiniteFormerLanguageModel

    sp = sentencepiece.SentencePieceProcessor(model_file=spm_model)
    dictionary = Dictionary.load(os.path.join(args.data, "dict.txt"))  # the task's dictionary
    # bad prompts fail before the checkpoint loads
    prompt, unknown = encode_prompt(args.prompt_file, sp, dictionary, args.prompt_tokens, paragraph_rule(args.data))
    warning = unknown_warning(unknown, len(prompt) - 1)
    if warning:
        print(warning, file=sys.stderr)
    utils.import_user_module(argparse.Namespace(user_dir=os.path.join(ROOT, "fairseq_plugins")))
    torch.manual_seed(args.seed)
    try:
        models, _, task = checkpoint_utils.load_model_ensemble_and_task([args.checkpoint],
                                                                        arg_overrides={"data": args.data})
    except ConfigError as e:
        raise ScriptError(str(e)) from None
    lm = models[0].eval()
    if not isinstance(lm, InfiniteFormerLanguageModel):
        raise ScriptError(f"{args.checkpoint} holds a {type(lm).__name__}; continue.sh generates with "
                          "infinite_former_lm checkpoints (scripts/train.sh infinite_former or memory_off)")
    use_cuda = torch.cuda.is_available() and not args.cpu
    if use_cuda:
        lm.cuda()
    dictionary = task.target_dictionary

    model = build_wrapper(lm)
    strategy = (search.Sampling(dictionary, sampling_topk=-1, sampling_topp=args.sampling_topp)
                if args.sampling else None)
    generator = SequenceGenerator([model], dictionary, beam_size=1 if args.sampling else args.beam,
                                  max_len_a=0, max_len_b=args.max_len, min_len=1, temperature=args.temperature,
                                  search_strategy=strategy)
    src = torch.tensor([prompt])
    if use_cuda:
        src = src.cuda()
    sample = {"net_input": {"src_tokens": src, "src_lengths": torch.tensor([len(prompt)])}}
    start = time.perf_counter()
    try:
        with torch.no_grad():
            hypos = generator.generate([model], sample, bos_token=prompt[-1])
    except ConfigError as e:
        raise ScriptError(str(e)) from None
    seconds = time.perf_counter() - start
    best = hypos[0][0]["tokens"].tolist()
    if best and best[-1] == dictionary.eos():
        best = best[:-1]
    lines, current = [], []
    for i in best:
        if i == dictionary.eos():
            lines.append(sp.decode(current))
            current = []
        else:
            current.append(dictionary[i])
    lines.append(sp.decode(current))
    print("\n\n".join(lines))
    print(f"{PROG}: prompt {len(prompt) - 1} tokens, generated {len(best)} tokens in {seconds:.1f} s",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main, PROG))
