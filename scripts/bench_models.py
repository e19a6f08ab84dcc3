"""Part of scripts/benchmark.py: the models it measures, built at its sizes, and the one step
(forward, and in training backward) that its rows and its paired measurement time. Run through
scripts/benchmark.py, not on its own."""

import argparse

from fairseq_plugins.experiments import arms as arm_registry  # noqa: E402


def build(arm, args, context, chunk_size=None):
    import torch  # noqa: F401
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
    cfg = InfiniteFormerLMConfig(segment_length=args.segment, mem_len=args.segment,
                                 num_basis_functions=args.num_basis, num_samples=args.num_basis,
                                 no_long_term_memory=spec.model_flags["no_long_term_memory"], **sizes)
    return InfiniteFormerLanguageModel.build_model(cfg, task)


def model_for(arm, args, context, device, train, chunk_size=None):
    """The arm built at the benchmark's sizes on ``device`` (half precision with --fp16), in
    training or evaluation mode."""
    model = build(arm, args, context, chunk_size).to(device)
    if args.fp16:
        model = model.half()
    return model.train(train)


def step(model, x, args, device, train, **kwargs):
    """One measured step on tokens ``x``: the forward (under --bf16 autocast) and, when training,
    the backward of the logits' mean log-sum-exp and the gradients' reset."""
    import torch

    with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=args.bf16), \
            torch.set_grad_enabled(train):
        logits, _ = model(x, **kwargs)
        loss = logits.float().logsumexp(-1).mean()
    if train:
        loss.backward()
        model.zero_grad(set_to_none=True)


def synchronize(device):
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize()
