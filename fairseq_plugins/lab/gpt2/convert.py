"""Convert a local Hugging Face GPT-2 folder into an ``infinite_former_gpt2`` fairseq checkpoint:
``fairseq-longmem gpt2 convert`` (docs/gpt2.md).

The folder holds what ``save_pretrained`` writes: ``config.json``, ``model.safetensors`` (needs
the ``safetensors`` package, part of ``pip install -e ".[hf]"``) or ``pytorch_model.bin``,
``vocab.json`` and ``merges.txt``. ``transformers`` is not needed. The output folder receives:

* ``dict.txt``: GPT-2 token ids in decimal (fairseq's GPT-2 BPE convention; GPT-2's
  ``<|endoftext|>`` is fairseq's ``</s>``), see :mod:`fairseq_plugins.lab.gpt2.vocab`;
* ``model-args.txt``: the model options that rebuild this model in fairseq-train (``--arch``,
  the sizes, ``--max-positions``, ``--activation-fn``), one line, for ``$(cat ...)``;
* ``checkpoint.pt``: a fairseq checkpoint (dataclass config, loads with
  ``weights_only=True``) whose GPT-2 weights are the folder's, embedding rows permuted to
  the dictionary's order. It holds GPT-2's weights only: the long-term memory is created
  when the checkpoint is loaded (with the memory options of that command, e.g. of the
  fine-tuning run), its output projection zero, so the model computes exactly GPT-2 until
  it is fine-tuned. Its config records the paper's memory settings and ``task.data`` = OUT.

``verify`` (needs ``transformers``) compares the converted model's logits with
``GPT2LMHeadModel``'s on random tokens and refuses to write a checkpoint that differs.

Hugging Face's ``Conv1D`` weights are transposed ``nn.Linear`` weights; ``c_attn`` packs
q, k and v along its output dimension (docs/design/gpt2.md §1). Every problem with the
input is a :class:`~fairseq_plugins.errors.ConfigError` and nothing is written (the three
files are written together, :func:`~fairseq_plugins.lab.common.files.write_atomically`).
"""

import json
import os
from typing import Optional

from fairseq_plugins.errors import ConfigError
from fairseq_plugins.lab.gpt2.vocab import dictionary_symbols, eot_id, read_merges, read_vocab, write_dict
from fairseq_plugins.lab.common.files import refuse_existing, text_writer, write_atomically

ACTIVATIONS = {"gelu_new": "gelu_accurate", "gelu_pytorch_tanh": "gelu_accurate", "gelu_fast": "gelu_accurate",
               "gelu": "gelu"}
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
OUTPUT_FILES = ("checkpoint.pt", "dict.txt", "model-args.txt")  # what a conversion writes into its --out


def read_config(hf_dir):
    """config.json → the GPT-2 sizes, checked to be a plain GPT-2 (one line why not)."""
    path = os.path.join(hf_dir, "config.json")
    if not os.path.isfile(path):
        raise ConfigError(f"{path} is missing: --hf-dir must be a Hugging Face GPT-2 folder "
                          "(config.json, model.safetensors or pytorch_model.bin, vocab.json, merges.txt)")
    try:
        with open(path, encoding="utf-8") as f:
            cfg = json.load(f)
    except ValueError as e:
        raise ConfigError(f"{path} is not valid JSON ({e})")
    kind = cfg.get("model_type")
    if kind != "gpt2":
        raise ConfigError(f"{path} describes a {kind!r} model, not GPT-2 (model_type 'gpt2'): only GPT-2's "
                          "block (learned positions, Conv1D c_attn) converts exactly; use a GPT-2 checkpoint")
    activation = cfg.get("activation_function", "gelu_new")
    if activation not in ACTIVATIONS:
        raise ConfigError(f"{path}: activation_function {activation!r} has no fairseq equivalent "
                          f"(supported: {', '.join(ACTIVATIONS)})")
    problems = [(cfg.get("layer_norm_epsilon", 1e-5) != 1e-5, "layer_norm_epsilon is not 1e-5"),
                (cfg.get("scale_attn_by_inverse_layer_idx", False), "scale_attn_by_inverse_layer_idx is set"),
                (not cfg.get("scale_attn_weights", True), "scale_attn_weights is off"),
                (cfg.get("add_cross_attention", False), "it has cross-attention"),
                (not cfg.get("tie_word_embeddings", True), "its input and output embeddings are not tied")]
    for bad, why in problems:
        if bad:
            raise ConfigError(f"{path}: {why}, unlike GPT-2's block, which infinite_former_gpt2 implements")
    width = cfg["n_embd"]
    return {"layers": cfg["n_layer"], "width": width, "heads": cfg["n_head"],
            "ffn": cfg.get("n_inner") or 4 * width, "positions": cfg["n_positions"],
            "vocab_size": cfg["vocab_size"], "activation": ACTIVATIONS[activation],
            "eos_token_id": cfg.get("eos_token_id")}


def read_weights(hf_dir):
    """The folder's tensors as ``{name: tensor}`` with GPT-2's names (``h.0.attn.c_attn.weight``, ...)."""
    import torch

    found = [name for name in WEIGHT_FILES if os.path.isfile(os.path.join(hf_dir, name))]
    if not found:
        raise ConfigError(f"{hf_dir} holds no weights ({' or '.join(WEIGHT_FILES)}); save the model with "
                          "save_pretrained")
    path = os.path.join(hf_dir, found[0])
    if found[0].endswith(".safetensors"):
        try:
            from safetensors.torch import load_file
        except ImportError:
            raise ConfigError(f"reading {path} needs the safetensors package: pip install -e \".[hf]\"") from None
    try:
        tensors = load_file(path) if found[0].endswith(".safetensors") else \
            torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # safetensors' SafetensorError, torch's RuntimeError or UnpicklingError, EOFError
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ConfigError(f"{path} cannot be read ({reason}): the file is truncated or not a model's weights; "
                          "save the model again with save_pretrained") from None
    return {(k[len("transformer."):] if k.startswith("transformer.") else k): v for k, v in tensors.items()}


def gpt2_parameters(tensors, sizes, layer):
    """fairseq names (relative to ``decoder.layers.{layer}.``) → tensors of GPT-2 layer ``layer``."""
    prefix, width = f"h.{layer}.", sizes["width"]
    q, k, v = tensors[prefix + "attn.c_attn.weight"].t().split(width, dim=0)  # Conv1D (in, 3C) → 3 × (C, C)
    qb, kb, vb = tensors[prefix + "attn.c_attn.bias"].split(width)
    return {
        "self_attn_layer_norm.weight": tensors[prefix + "ln_1.weight"],
        "self_attn_layer_norm.bias": tensors[prefix + "ln_1.bias"],
        "self_attn.q_proj.weight": q, "self_attn.q_proj.bias": qb,
        "self_attn.k_proj.weight": k, "self_attn.k_proj.bias": kb,
        "self_attn.v_proj.weight": v, "self_attn.v_proj.bias": vb,
        "self_attn.out_proj.weight": tensors[prefix + "attn.c_proj.weight"].t(),
        "self_attn.out_proj.bias": tensors[prefix + "attn.c_proj.bias"],
        "final_layer_norm.weight": tensors[prefix + "ln_2.weight"],
        "final_layer_norm.bias": tensors[prefix + "ln_2.bias"],
        "ffn.fc1.weight": tensors[prefix + "mlp.c_fc.weight"].t(), "ffn.fc1.bias": tensors[prefix + "mlp.c_fc.bias"],
        "ffn.fc2.weight": tensors[prefix + "mlp.c_proj.weight"].t(),
        "ffn.fc2.bias": tensors[prefix + "mlp.c_proj.bias"],
    }


def check_weights(tensors, sizes, path):
    expected = {"wte.weight": (sizes["vocab_size"], sizes["width"]),
                "wpe.weight": (sizes["positions"], sizes["width"]), "ln_f.weight": (sizes["width"],)}
    for layer in range(sizes["layers"]):
        expected[f"h.{layer}.attn.c_attn.weight"] = (sizes["width"], 3 * sizes["width"])
        expected[f"h.{layer}.mlp.c_fc.weight"] = (sizes["width"], sizes["ffn"])
    for name, shape in expected.items():
        if name not in tensors:
            raise ConfigError(f"{path}: the weights lack {name}; not a complete GPT-2 checkpoint for its config.json")
        if tuple(tensors[name].shape) != shape:
            raise ConfigError(f"{path}: {name} has shape {tuple(tensors[name].shape)}, config.json implies {shape}")


def architecture(sizes):
    from fairseq_plugins.models.infinite_former_gpt2 import GPT2_SIZES

    key = (sizes["layers"], sizes["width"], sizes["heads"], sizes["ffn"])
    return next((name for name, s in GPT2_SIZES.items() if s == key), "infinite_former_gpt2")


def model_args(sizes):
    """The fairseq-train options of this model's architecture."""
    return ["--arch", architecture(sizes), "--decoder-layers", str(sizes["layers"]),
            "--decoder-embed-dim", str(sizes["width"]), "--decoder-attention-heads", str(sizes["heads"]),
            "--decoder-ffn-embed-dim", str(sizes["ffn"]), "--max-positions", str(sizes["positions"]),
            "--activation-fn", sizes["activation"]]


def build_cfg(out, sizes, tokens_per_sample, no_long_term_memory):
    """The training config fairseq would save, from fairseq's own parser (and as a plain dict)."""
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from omegaconf import OmegaConf

    argv = [os.path.abspath(out), "--task", "streaming_lm", "--criterion", "infinite_former_kl",
            "--optimizer", "adam", "--batch-size", "1", "--tokens-per-sample", str(tokens_per_sample),
            *model_args(sizes)]
    if no_long_term_memory:
        argv.append("--no-long-term-memory")
    parsed = options.parse_args_and_arch(options.get_training_parser(), input_args=argv)
    cfg = convert_namespace_to_omegaconf(parsed)
    return cfg, OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)


def check_inputs(hf_dir: str, out: str, tokens_per_sample: Optional[int], force: bool = False):
    """Read and check everything but the weights: ``(sizes, vocab, tokens_per_sample)``.

    Raises:
        ConfigError: a folder or file that is missing or not GPT-2's, a block longer than the
            position table, an ``out`` that holds a conversion (unless ``force``).
    """
    if tokens_per_sample is not None and tokens_per_sample <= 0:
        raise ConfigError(f"--tokens-per-sample must be positive, got {tokens_per_sample}")
    if os.path.exists(out) and not os.path.isdir(out):
        raise ConfigError(f"--out {out} exists and is not a directory")
    if not os.path.isdir(hf_dir):
        raise ConfigError(f"--hf-dir {hf_dir} is not a directory")
    refuse_existing([os.path.join(out, name) for name in OUTPUT_FILES], force)
    sizes = read_config(hf_dir)
    vocab = read_vocab(hf_dir)
    read_merges(hf_dir)  # the data side needs them: fail now rather than at data-prep
    if len(vocab) != sizes["vocab_size"]:
        raise ConfigError(f"vocab.json has {len(vocab)} tokens but config.json's vocab_size is "
                          f"{sizes['vocab_size']}: the tokenizer files belong to another model")
    if tokens_per_sample is None:
        tokens_per_sample = min(512, sizes["positions"])
    if tokens_per_sample > sizes["positions"]:
        raise ConfigError(f"--tokens-per-sample {tokens_per_sample} exceeds GPT-2's position table "
                          f"({sizes['positions']} positions); use {sizes['positions']} or less")
    return sizes, vocab, tokens_per_sample


def convert(hf_dir: str, out: str, tokens_per_sample: Optional[int] = None, no_long_term_memory: bool = False,
            verify: bool = False, force: bool = False) -> str:
    """Convert ``hf_dir`` into ``out`` (see the module docstring); ``tokens_per_sample`` is the
    block length L stored in the config (default: 512, or the position table's length if shorter);
    an earlier conversion in ``out`` is replaced only with ``force``.

    Returns:
        one line saying what was written.
    Raises:
        ConfigError: see :func:`check_inputs`; weights that do not match config.json; with
            ``verify``, logits that differ from ``GPT2LMHeadModel``'s.
    """
    sizes, vocab, tokens_per_sample = check_inputs(hf_dir, out, tokens_per_sample, force)
    tensors = read_weights(hf_dir)
    check_weights(tensors, sizes, hf_dir)
    eot = eot_id(vocab, sizes["eos_token_id"])

    import torch
    from fairseq.data import Dictionary

    from fairseq_plugins import load_components
    from fairseq_plugins.tasks.streaming_language_modeling import StreamingLanguageModelingTask

    load_components()  # the model's registration

    symbols = dictionary_symbols(sizes["vocab_size"], eot)
    dictionary = Dictionary()
    for s in symbols:
        dictionary.add_symbol(s)
    cfg, cfg_dict = build_cfg(out, sizes, tokens_per_sample, no_long_term_memory)
    model = StreamingLanguageModelingTask(cfg.task, dictionary).build_model(cfg.model)

    # rows of GPT-2's embedding in the dictionary's order; <s> <pad> <unk> stay zero
    wte = tensors["wte.weight"].float()
    rows = torch.zeros(len(dictionary), sizes["width"])
    rows[dictionary.eos()] = wte[eot]
    rows[dictionary.nspecial:] = wte[torch.tensor([int(s) for s in symbols])]
    mapped = {"decoder.embed_tokens.weight": rows, "decoder.output_projection.weight": rows,
              "decoder.embed_positions.weight": tensors["wpe.weight"],
              "decoder.layer_norm.weight": tensors["ln_f.weight"], "decoder.layer_norm.bias": tensors["ln_f.bias"]}
    for layer in range(sizes["layers"]):
        for name, t in gpt2_parameters(tensors, sizes, layer).items():
            mapped[f"decoder.layers.{layer}.{name}"] = t
    state = model.state_dict()
    missing = [k for k in state if "long_term_memory" not in k and k not in mapped and k != "dictionary_fingerprint"]
    assert not missing, f"unmapped parameters: {missing}"
    for name, t in mapped.items():
        state[name] = t.to(state[name].dtype).clone().contiguous()
    model.load_state_dict(state, strict=True)
    weights = {k: v for k, v in model.state_dict().items() if ".long_term_memory." not in k}

    checkpoint = {
        "args": None, "cfg": cfg_dict, "model": weights, "criterion": None,
        "optimizer_history": [{"criterion_name": "InfiniteFormerKLCriterion", "optimizer_name": "FairseqAdam",
                               "lr_scheduler_state": {"best": None}, "num_updates": 0}],
        "task_state": {}, "extra_state": {"train_iterator": {"version": 2, "epoch": 1, "iterations_in_epoch": 0,
                                                             "shuffle": False},
                                          "previous_training_time": 0.0, "converted_from": "huggingface gpt2"},
        "last_optimizer_state": None,
    }
    verified = check_logits(model, dictionary, eot, hf_dir, tokens_per_sample) if verify else ""
    write_atomically({os.path.join(out, "dict.txt"): lambda path: write_dict(path, symbols),
                      os.path.join(out, "model-args.txt"): text_writer(" ".join(model_args(sizes))),
                      os.path.join(out, "checkpoint.pt"): lambda path: torch.save(checkpoint, path)})
    n_params = sum(p.numel() for name, p in model.named_parameters() if ".long_term_memory." not in name)
    return (verified + f"converted {hf_dir} ({sizes['layers']} layers, width {sizes['width']}, {len(vocab)} tokens) -> "
            f"{os.path.join(out, 'checkpoint.pt')} (--arch {architecture(sizes)}, {n_params:,} GPT-2 parameters; "
            f"long-term memory {'off' if no_long_term_memory else 'on, created at load'}) and "
            f"{os.path.join(out, 'dict.txt')}")


def check_logits(model, dictionary, eot: int, hf_dir: str, tokens_per_sample: int, tolerance: float = 1e-4) -> str:
    """One line saying the model's logits over GPT-2's ids equal ``GPT2LMHeadModel``'s.

    Raises:
        ConfigError: they differ by more than ``tolerance``, or transformers is missing.
    """
    import torch

    try:
        from transformers import GPT2LMHeadModel
    except ImportError:
        raise ConfigError("--verify needs transformers: pip install -e \".[hf]\"") from None
    reference = GPT2LMHeadModel.from_pretrained(hf_dir).float().eval()
    vocab_size = reference.config.vocab_size
    index = torch.tensor([dictionary.eos() if i == eot else dictionary.index(str(i)) for i in range(vocab_size)])
    ids = torch.randint(0, vocab_size, (2, tokens_per_sample), generator=torch.Generator().manual_seed(0))
    model.eval()
    with torch.no_grad():
        diff = (model(index[ids])[0][..., index] - reference(ids).logits).abs().max().item()
    if not diff <= tolerance:
        raise ConfigError(f"the converted model's logits differ from GPT2LMHeadModel's by {diff:.2e} "
                          f"(> {tolerance}); nothing written")
    return f"verified: logits equal GPT2LMHeadModel's within {diff:.1e} on a block of {tokens_per_sample}\n"
