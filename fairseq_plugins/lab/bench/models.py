"""The models the benchmark measures, built at its sizes, and the one step its measurements time.

The arms are the registry's job ``benchmark`` (:mod:`fairseq_plugins.lab.common.arms`):
fairseq's ``transformer_lm``, ``fastformer_lm`` and ``infinite_former_lm`` with the long-term
memory on and off. Sizes come from the options of ``fairseq-longmem bench`` (docs/benchmark.md):
``--layers``, ``--width``, ``--heads``, ``--ffn``, ``--vocab``, ``--num-basis``, ``--segment``.
"""

import argparse
from typing import Callable, List, Mapping, Tuple

from fairseq_plugins.errors import ConfigError
from fairseq_plugins.lab.common import arms as arm_registry

REFERENCE = "transformer_lm"  # the arm every row's ratios compare with (speed_vs_transformer)
# fairseq's dictionary holds 4 special symbols; the measured tokens are drawn from the ids after them
MIN_VOCAB = 5
# the models' options that the benchmark's sizes set (:func:`build`), for the models' refusals
MODEL_OPTIONS = {"--num-basis-functions": "num-basis", "--num-samples": "num-basis", "--mem-len": "segment",
                 "--tokens-per-sample": "segment", "--decoder-embed-dim": "width", "--decoder-attention-heads": "heads",
                 "--decoder-ffn-embed-dim": "ffn", "--decoder-layers": "layers", "--encoder-embed-dim": "width",
                 "--encoder-attention-heads": "heads", "--encoder-ffn-embed-dim": "ffn", "--encoder-layers": "layers",
                 "--attention-chunk-size": "chunk-sizes", "--lead-window": "segment",
                 "--encoder-chunk-length": "segment"}


def arm_names() -> List[str]:
    """The benchmark's arms, in the registry's order."""
    return arm_registry.names("benchmark")


def is_streaming(arm: str) -> bool:
    """Whether the arm reads a stream segment by segment with its memory carried (the ∞-former)."""
    return arm_registry.get_arm("benchmark", arm).task == "streaming_lm"


def memory_off(arm: str) -> bool:
    """Whether the arm is a streaming arm's twin without the long-term memory."""
    return bool(arm_registry.get_arm("benchmark", arm).model_flags.get("no_long_term_memory"))


def memory_twins() -> Tuple[str, str]:
    """The streaming arm with the long-term memory and its twin without it (same sizes otherwise)."""
    streaming = [a for a in arm_names() if is_streaming(a)]
    return (next(a for a in streaming if not memory_off(a)), next(a for a in streaming if memory_off(a)))


def build(arm: str, args, context: int, chunk_size=None, memory_read=None):
    """``arm`` built at the benchmark's sizes for contexts of ``context`` tokens (the position
    table of the windowed arms), on the CPU, in float32; ``chunk_size``: fastformer_lm's
    ``--attention-chunk-size`` (default: its config's); ``memory_read``: the ∞-former's
    ``--memory-read`` (default ``args.memory_read`` where the verb has it, else the paper's)."""
    from fairseq.data import Dictionary

    d = Dictionary()
    while len(d) < args.vocab:
        d.add_symbol(f"w{len(d)}")
    task = argparse.Namespace(source_dictionary=d, target_dictionary=d)
    sizes = dict(decoder_layers=args.layers, decoder_embed_dim=args.width, decoder_attention_heads=args.heads,
                 decoder_ffn_embed_dim=args.ffn, share_decoder_input_output_embed=True, dropout=0.0)
    spec = arm_registry.get_arm("benchmark", arm)
    if spec.arch == "transformer_lm":
        from fairseq.models.transformer_lm import TransformerLanguageModel, TransformerLanguageModelConfig
        cfg = TransformerLanguageModelConfig(decoder_input_dim=args.width, decoder_output_dim=args.width,
                                             decoder_normalize_before=True, max_target_positions=context,
                                             tokens_per_sample=context, **sizes)
        return TransformerLanguageModel.build_model(cfg, task)
    if spec.arch == "fastformer_lm":
        from fairseq_plugins.models.fastformer_lm import FastformerLanguageModel, FastformerLMConfig
        extra = {} if chunk_size is None else {"attention_chunk_size": chunk_size}
        cfg = FastformerLMConfig(tokens_per_sample=context, max_target_positions=context, **sizes, **extra)
        return FastformerLanguageModel.build_model(cfg, task)
    from fairseq_plugins.models.infinite_former_lm import InfiniteFormerLanguageModel, InfiniteFormerLMConfig
    off = spec.model_flags["no_long_term_memory"]
    read = "location" if off else (memory_read or vars(args).get("memory_read") or "location")
    cfg = InfiniteFormerLMConfig(segment_length=args.segment, mem_len=args.segment,
                                 num_basis_functions=args.num_basis, num_samples=args.num_basis,
                                 no_long_term_memory=off, memory_read=read, **sizes)
    return InfiniteFormerLanguageModel.build_model(cfg, task)


def model_for(arm: str, args, context: int, device, train: bool, chunk_size=None, memory_read=None):
    """The arm built at the benchmark's sizes on ``device`` (half precision with --fp16), in
    training or evaluation mode (``memory_read``: as for :func:`build`)."""
    model = build(arm, args, context, chunk_size, memory_read).to(device)
    if args.fp16:
        model = model.half()
    return model.train(train)


def step(model, x, args, device, train: bool, **kwargs) -> None:
    """One measured step on tokens ``x`` (bsz × T): the forward (under --bf16 autocast) and,
    when training, the backward of the logits' mean log-sum-exp and the gradients' reset."""
    import torch

    with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=args.bf16), \
            torch.set_grad_enabled(train):
        logits, _ = model(x, **kwargs)
        loss = logits.float().logsumexp(-1).mean()
    if train:
        loss.backward()
        model.zero_grad(set_to_none=True)


def check_sizes(args) -> None:
    """Refuse, in the benchmark's own option names, sizes no model of it can take: heads that do
    not divide the width, a vocabulary of the special symbols alone.

    Raises:
        ConfigError: one line naming the options and the fix.
    """
    if args.width % args.heads:
        fit = max(args.heads, round(args.width / args.heads) * args.heads)
        raise ConfigError(f"--heads {args.heads} must divide --width {args.width} (every model splits its width into "
                          f"heads); pass e.g. --width {fit}")
    if getattr(args, "vocab", MIN_VOCAB) < MIN_VOCAB:
        raise ConfigError(f"--vocab {args.vocab} leaves no token beside fairseq's 4 special symbols; pass --vocab "
                          f"{MIN_VOCAB} or more")


def refuse_unbuildable(builders: Mapping[str, Callable[[], object]]) -> None:
    """Build every model a measurement will build (``builders``: its label → a function that
    builds it on the CPU), once, before anything is measured, and refuse what one of them refuses:
    its workers would otherwise each fail with the same error, row after row.

    Raises:
        ConfigError: the first model that cannot be built, naming it and its refusal.
    """
    for label, build_one in builders.items():
        try:
            build_one()
        except ConfigError as e:
            named = [f"{model} is --{bench}" for model, bench in MODEL_OPTIONS.items() if model in str(e)]
            fix = f" ({'; '.join(named)} here); change that option" if named else "; change the bench's sizes"
            raise ConfigError(f"{label} refuses these sizes: {e}{fix}") from None
        except (AssertionError, ValueError, RuntimeError, TypeError) as e:
            what = (str(e).strip().splitlines() or [""])[0][:160]
            raise ConfigError(f"{label} cannot be built at these sizes ({type(e).__name__}: {what}); change "
                              "--width, --heads, --ffn, --layers, --num-basis or --segment") from None
