"""The two GPT-2s of ``fairseq-longmem bench gpt2`` (docs/benchmark.md, "GPT-2 against transformers").

One GPT-2 with random weights, built by ``transformers`` (``GPT2Config`` with the benchmark's
sizes: by default its own defaults, GPT-2 small: 12 × 768, 12 heads, vocabulary 50,257, 1,024
positions) and saved with ``save_pretrained`` (no download); the same weights converted by the
project's converter (docs/gpt2.md) into ``infinite_former_gpt2`` and loaded through fairseq's
checkpoint loader, with the long-term memory off or on (W_O^LTM = 0: both compute GPT-2 until
trained). The arms:

* ``hf``: transformers' ``GPT2LMHeadModel``;
* ``off``: ``infinite_former_gpt2`` with ``--no-long-term-memory``;
* ``on``: ``infinite_former_gpt2`` with the long-term memory (N = M = ``--num-basis``).

Tokens are GPT-2 ids; the fairseq models read them through :func:`gpt2_index` (fairseq's GPT-2
dictionary: ids in decimal, ``<|endoftext|>`` = ``</s>``), so both see the same tokens. The one
training step and the greedy steps every measurement times are here
(:func:`train_step`, :func:`prefill`, :func:`generate`).
"""

import contextlib
import copy
import json
import os
from typing import Dict, Optional, Tuple

ARMS = ("hf", "off", "on")
LABELS = {"hf": "HF GPT2LMHeadModel", "off": "infinite_former_gpt2, memory off",
          "on": "infinite_former_gpt2, memory on"}
TOLERANCE = 1e-4  # converted vs transformers' logits (tests/lab/gpt2/test_gpt2.py's bound)
HF, FAIRSEQ = "hf", "fairseq"


def gpt2_config(args):
    """``GPT2Config`` at the benchmark's sizes (``<|endoftext|>`` = the last id, as in GPT-2)."""
    from transformers import GPT2Config

    return GPT2Config(n_layer=args.layers, n_embd=args.width, n_head=args.heads, n_positions=args.positions,
                      vocab_size=args.vocab, bos_token_id=args.vocab - 1, eos_token_id=args.vocab - 1)


def _write_tokenizer(folder: str, vocab_size: int) -> None:
    """A ``vocab.json`` of ``vocab_size`` placeholder tokens (``<|endoftext|>`` last) and an empty
    ``merges.txt``: the converter needs the files of a GPT-2 folder; no text is ever encoded."""
    vocab = {f"t{i}": i for i in range(vocab_size - 1)}
    vocab["<|endoftext|>"] = vocab_size - 1
    with open(os.path.join(folder, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f)
    with open(os.path.join(folder, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n")


def convert(hf_dir: str, out: str, tokens_per_sample: int) -> None:
    """The project's converter (docs/gpt2.md): ``hf_dir`` → ``out/checkpoint.pt`` and ``dict.txt``
    (:func:`fairseq_plugins.lab.gpt2.convert.convert` with the memory on)."""
    from fairseq_plugins.lab.gpt2.convert import convert as convert_gpt2

    convert_gpt2(hf_dir, out, tokens_per_sample=tokens_per_sample)


def write_models(args, folder: str) -> Dict:
    """In a worker: build the random GPT-2 (seed 0), save it in ``folder/hf``, convert it into
    ``folder/fairseq`` (blocks of ``--segment``) and check the conversion as the measurements will
    load it (:func:`check_agreement`, memory off and on). Returns ``{"hf": dir, "fairseq": dir,
    "checked": the largest logit difference}``.

    Raises:
        RuntimeError: the converted models do not read GPT-2's ids as transformers does.
    """
    import torch
    from transformers import GPT2LMHeadModel

    paths = {HF: os.path.join(folder, "hf"), FAIRSEQ: os.path.join(folder, "fairseq")}
    torch.manual_seed(0)
    GPT2LMHeadModel(gpt2_config(args)).save_pretrained(paths[HF])
    _write_tokenizer(paths[HF], args.vocab)
    with contextlib.redirect_stdout(None):  # the converter's summary line
        convert(paths[HF], paths[FAIRSEQ], args.segment)
    device = torch.device("cpu")
    models = {arm: load(arm, args, paths, device) for arm in ARMS}
    checked = check_agreement(models, gpt2_index(models["off"], args.vocab), args, device)
    return {**paths, "checked": checked}


def load(arm: str, args, paths: Dict[str, str], device):
    """The arm's model on ``device`` (float32, training mode), loaded from ``paths``
    (:func:`write_models`): transformers' ``from_pretrained`` or fairseq's checkpoint loader."""
    if arm == "hf":
        from transformers import GPT2LMHeadModel

        return GPT2LMHeadModel.from_pretrained(paths[HF]).to(device).train()
    from fairseq import checkpoint_utils

    overrides = {"data": paths[FAIRSEQ], "tokens_per_sample": args.segment, "no_long_term_memory": arm == "off",
                 "num_basis_functions": args.num_basis, "num_samples": args.num_basis}
    models, _, _ = checkpoint_utils.load_model_ensemble_and_task([os.path.join(paths[FAIRSEQ], "checkpoint.pt")],
                                                                 arg_overrides=overrides)
    return models[0].to(device).train()


def gpt2_index(model, vocab_size: int):
    """``(vocab_size,)`` long: the fairseq index of every GPT-2 id.

    Raises:
        RuntimeError: the dictionary does not hold every GPT-2 id exactly once.
    """
    import torch

    dictionary = model.decoder.dictionary
    index = torch.tensor([dictionary.eos() if i == vocab_size - 1 else dictionary.index(str(i))
                          for i in range(vocab_size)])
    symbols = [dictionary[i] for i in index.tolist()]
    if len(set(index.tolist())) != vocab_size or symbols[:-1] != [str(i) for i in range(vocab_size - 1)]:
        raise RuntimeError("the converted dictionary does not map every GPT-2 id to its own symbol")
    return index


def logits(arm: str, model, ids, index, **kwargs):
    """``(bsz, T, V)`` logits over GPT-2's ids of ``ids`` ``(bsz, T)`` (fairseq's columns put in
    GPT-2's order only where asked: ``index``)."""
    if arm == "hf":
        return model(input_ids=ids).logits
    out, _ = model(index[ids], **kwargs)
    return out[..., index]


def check_agreement(models: Dict, index, args, device) -> float:
    """The largest difference between the fairseq models' and transformers' logits (evaluation
    mode, float32) on one block of random ids; the models are left in training mode.

    Raises:
        RuntimeError: a difference above :data:`TOLERANCE` (the conversion or the tokens are wrong).
    """
    import torch

    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(0, args.vocab, (1, args.segment), generator=generator).to(device)
    worst = 0.0
    with torch.no_grad():
        for model in models.values():
            model.eval()
        reference = logits("hf", models["hf"], ids, index)
        for arm in (a for a in models if a != "hf"):
            worst = max(worst, (logits(arm, models[arm], ids, index) - reference).abs().max().item())
        for model in models.values():
            model.train()
    if not worst <= TOLERANCE:
        raise RuntimeError(f"the converted model's logits differ from transformers' by {worst:.2e} (> {TOLERANCE})")
    return worst


def autocast(args, device):
    """``--bf16``: bfloat16 autocast on ``device``; otherwise nothing."""
    import torch

    return torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=bool(args.bf16))


def train_step(arm: str, model, optimizer, ids, index, args, device) -> float:
    """One training step on ``ids`` ``(bsz, T)`` GPT-2 ids: forward (under ``--bf16`` autocast),
    the next-token cross-entropy (and, memory on, the KL term of ``infinite_former_kl`` with its
    defaults λ = 1e-6, σ₀ = 0.05), backward, AdamW step, gradients reset. The memory-on arm
    carries its memory from one call to the next (``memory_key``). Returns the loss."""
    import torch.nn.functional as F

    from fairseq_plugins.modules.continuous.read import total_kl

    with autocast(args, device):
        if arm == "hf":
            out, extra, targets = model(input_ids=ids).logits, None, ids
        else:
            out, extra = model(index[ids], memory_key="bench" if arm == "on" else None)
            targets = index[ids]
        loss = F.cross_entropy(out[:, :-1].float().flatten(0, 1), targets[:, 1:].flatten())
        if arm == "on":
            loss = loss + 1e-6 * total_kl(extra["ltm_stats"], 0.05).to(loss.device)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.item()


# ---- generation (batch 1, greedy) -------------------------------------------------------------


def hf_window(args) -> int:
    """The longest prompt transformers' model reads before ``--gen-tokens`` greedy steps: its
    window (``--positions``) less the steps, less one, so that the fairseq model's block of the
    same prompt is not pushed into the memory inside the timed steps either (docs/benchmark.md)."""
    return args.positions - args.gen_tokens - 1


def prefill(arm: str, model, ids, index, state: Optional[dict], args, device) -> Tuple[object, object]:
    """Read the prompt ``ids`` ``(1, P)`` GPT-2 ids; returns ``(state, first greedy token)``, the
    token in the model's own ids (fairseq's: a dictionary index).

    ``hf``: a fresh ``DynamicCache`` of the last :func:`hf_window` tokens (the way a user fits a
    longer prompt into GPT-2's window: keep its end), only the last position's logits computed.
    ``off``/``on``: ``decoder.prefill`` into ``state`` (a fairseq incremental state, ``{}`` when new),
    which may hold the first P₀ tokens of ``ids`` already (``seen``): only the others are read."""
    import torch

    with torch.no_grad(), autocast(args, device):
        if arm == "hf":
            out = model(input_ids=ids[:, -hf_window(args):], use_cache=True, logits_to_keep=1)
            return out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
        features = model.decoder.prefill(index[ids], state)
        return state, model.decoder.output_layer(features)[:, -1].argmax(-1, keepdim=True)


def copy_state(arm: str, state):
    """A state to generate from, leaving ``state`` as it is: transformers' cache copied; fairseq's
    tensors cloned (the decoder writes its caches' buffers in place, docs/generation.md)."""
    if arm == "hf":
        return copy.deepcopy(state)
    return {key: {name: tensor.clone() for name, tensor in part.items()} for key, part in state.items()}


def branch_state(arm: str, state):
    """A state to generate from whose generation leaves ``state`` fit to read on from (the next
    prompt's :func:`prefill`), copying no fairseq tensor: the decoder writes only positions
    ``state`` has not filled, which the read then writes again, and starts new buffers at a block's
    end. Transformers' cache is copied (its generation appends to it)."""
    if arm == "hf":
        return copy.deepcopy(state)
    return {key: dict(part) for key, part in state.items()}


def generate(arm: str, model, state, first, prefix, steps: int, args, device):
    """``steps`` greedy steps after a prompt read into ``state`` whose greedy next token is
    ``first`` ``(1, 1)`` (:func:`prefill`): each step feeds the last token picked and picks the
    next. ``prefix`` ``(1, P)``: the prompt in the model's ids (fairseq's decoder takes the whole
    prefix and reads the tokens it has not seen). Returns ``(1, steps + 1)``: the tokens picked,
    in the model's ids."""
    import torch

    tokens = torch.cat([prefix, first, prefix.new_zeros(1, steps)], dim=1)
    start = prefix.size(1)
    with torch.no_grad(), autocast(args, device):
        for end in range(start + 1, start + steps + 1):
            if arm == "hf":
                out = model(input_ids=tokens[:, end - 1:end], past_key_values=state, use_cache=True)
                state, scores = out.past_key_values, out.logits
            else:
                scores, _ = model.decoder(tokens[:, :end], incremental_state=state)
            tokens[:, end] = scores[:, -1].argmax(-1)
    return tokens[:, start:]
