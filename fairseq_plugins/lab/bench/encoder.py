"""The summarizer encoder's rows of ``fairseq-longmem bench train`` (``--encoder-lengths``;
docs/benchmark.md): tokens/s and peak memory of the ∞-former summarizer's encoder on one
document of each length — chunked layers, gate and memory fit; train = forward + backward of
the memory's coefficients B."""

from typing import Dict

from fairseq_plugins.lab.bench.resources import time_and_peak


def build_encoder(args, length: int):
    """The summarizer's encoder at the benchmark's sizes (N = 4 × --num-basis, C = W = 256, or the
    document's length if shorter)."""
    from types import SimpleNamespace

    from fairseq.data import Dictionary
    from fairseq_plugins.models.infinite_former_summarizer import (InfiniteFormerSummarizerConfig,
                                                                   InfiniteFormerSummarizerModel)

    d = Dictionary()
    while len(d) < args.vocab:
        d.add_symbol(f"w{len(d)}")
    sizes = {}
    for side in ("encoder", "decoder"):
        sizes.update({f"{side}_layers": args.layers, f"{side}_embed_dim": args.width,
                      f"{side}_attention_heads": args.heads, f"{side}_ffn_embed_dim": args.ffn})
    cfg = InfiniteFormerSummarizerConfig(**sizes, dropout=0.0, num_basis_functions=4 * args.num_basis,
                                         encoder_chunk_length=min(256, length), lead_window=min(256, length),
                                         max_source_positions=length,
                                         max_target_positions=1024)
    task = SimpleNamespace(source_dictionary=d, target_dictionary=d)
    return InfiniteFormerSummarizerModel.build_model(cfg, task).encoder


def measure(args, mode: str, context: int) -> Dict:
    """In a worker: ``{"tokens_per_s", "peak_mem_mb", "params"}`` of the encoder on one document of
    ``context`` tokens (median over ``--repeats``; peak above the built encoder and its input)."""
    import torch

    torch.manual_seed(0)
    device = torch.device(args.device)
    encoder = build_encoder(args, context).to(device)
    encoder.train(mode == "train")
    tokens = torch.randint(4, args.vocab, (1, context), device=device)

    def run_once():
        with torch.set_grad_enabled(mode == "train"), \
                torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=args.bf16):
            out = encoder(tokens)
            if mode == "train":
                out["memory_coefficients"][0].float().square().mean().backward()
                encoder.zero_grad(set_to_none=True)

    seconds, peak = time_and_peak(run_once, args, device)
    return {"tokens_per_s": context / seconds, "peak_mem_mb": peak,
            "params": sum(p.numel() for p in encoder.parameters())}
