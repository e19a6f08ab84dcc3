"""Parts of scripts/benchmark.py: the ∞-former's per-segment memory breakdown, the
summarizer encoder's rows (tokens/s as the document grows), ratios to an arm's own
shortest context, and the plot. Run through scripts/benchmark.py, not on its own."""

import statistics

from bench_memory import clock
from fairseq_plugins.report.table import Column, markdown


def _timed(fn, repeats, device, timer):
    """Median milliseconds of ``fn()`` on ``timer`` over ``repeats`` calls after two untimed ones."""
    import torch

    for _ in range(2):
        fn()
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = timer()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(timer() - t0)
    return 1000 * statistics.median(times)


def ltm_breakdown(args):
    """Per-segment milliseconds of the ∞-former's LTM parts in one layer: forward parts without
    gradients, and the update, the read and the whole step forward + backward (training)."""
    import torch
    from fairseq_plugins.modules.continuous.basis import sticky_histogram, sticky_positions
    from fairseq_plugins.modules.long_term_memory import LongTermMemory

    torch.manual_seed(0)
    device = torch.device(args.device)
    ltm = LongTermMemory(args.width, args.heads, num_basis=args.num_basis, basis_widths=(0.005, 0.01),
                         num_samples=args.num_basis).to(device)
    chunk = torch.randn(args.segment, 1, args.width, device=device)
    query = torch.randn(args.segment, 1, args.width, device=device, requires_grad=True)
    valid = torch.ones(1, dtype=torch.bool, device=device)
    # two steps of the memory's own protocol: B fitted, the last read's Gaussians kept (sticky)
    state = ltm.empty_state(1, device)
    for _ in range(2):
        state = ltm.step(query.detach(), state, chunk).state
    read_state = ltm.update(state, chunk, valid).detach()
    hist = sticky_histogram(state.mu, state.sigma, ltm.sticky_bins)

    def backward(*tensors):
        sum(t.float().sum() for t in tensors).backward()

    def step_backward():
        step = ltm.step(query, state, chunk)
        backward(step.out, step.stats.mu, step.stats.sigma2)

    forward_parts = {
        "gate (Conv1d + sigmoid)": lambda: ltm.smooth(chunk),
        "sticky histogram": lambda: sticky_histogram(state.mu, state.sigma, ltm.sticky_bins),
        "sticky positions": lambda: sticky_positions(hist, ltm.num_samples, random=True),
        "update (sample, contract, re-fit; gate included)": lambda: ltm.update(state, chunk, valid),
        "read (continuous attention)": lambda: ltm(query, read_state),
    }
    training_parts = {
        "update, forward + backward": lambda: backward(ltm.update(state, chunk, valid).coefficients),
        "read, forward + backward": lambda: backward(*ltm(query, read_state)),
        "step (update + read), forward + backward": lambda: step_backward(),
    }
    repeats = max(args.repeats, 5)
    ltm.train()
    out = {}
    with torch.no_grad():
        for name, fn in forward_parts.items():
            out[name] = _timed(fn, repeats, device, clock(args.clock))
    for name, fn in training_parts.items():
        out[name] = _timed(fn, repeats, device, clock(args.clock))
    return out


def build_encoder(args, length):
    """The summarizer's encoder at the benchmark's sizes (N = 4 × --num-basis, C = 256)."""
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
                                         encoder_chunk_length=min(256, length), max_source_positions=length,
                                         max_target_positions=1024)
    task = SimpleNamespace(source_dictionary=d, target_dictionary=d)
    return InfiniteFormerSummarizerModel.build_model(cfg, task).encoder


def measure_encoder(mode, length, args, memory_above):
    """tokens/s (median) of the summarizer encoder on one document of ``length`` tokens:
    chunked layers, gate and memory fit; train = forward + backward of the memory B."""
    import torch

    torch.manual_seed(0)
    device = torch.device(args.device)
    encoder = build_encoder(args, length).to(device)
    encoder.train(mode == "train")
    tokens = torch.randint(4, args.vocab, (1, length), device=device)

    def run_once():
        with torch.set_grad_enabled(mode == "train"), \
                torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=args.bf16):
            out = encoder(tokens)
            if mode == "train":
                out["memory_coefficients"][0].float().square().mean().backward()
                encoder.zero_grad(set_to_none=True)

    seconds, peak = memory_above(run_once)
    return {"tokens_per_s": length / seconds, "peak_mem_mb": peak,
            "params": sum(p.numel() for p in encoder.parameters())}


def add_transformer_ratios(rows):
    """``speed_vs_transformer`` and ``memory_vs_transformer``: each row over transformer_lm's at the same
    mode and context (when it was measured)."""
    for row in rows:
        ref = next((r for r in rows if r["arm"] == "transformer_lm" and r["mode"] == row["mode"]
                    and r["context"] == row["context"] and "error" not in r), None)
        if ref is not None and "error" not in row:
            row["speed_vs_transformer"] = row["tokens_per_s"] / ref["tokens_per_s"]
            if ref["peak_mem_mb"] >= 1.0:  # below 1 MB the ratio is noise
                row["memory_vs_transformer"] = row["peak_mem_mb"] / ref["peak_mem_mb"]


def add_own_ratios(rows):
    """``speed_vs_own_first``: tokens/s ÷ the same arm's at its shortest measured context; for the
    ∞-former also ``tail_vs_own_first``, the same ratio of its tail's tokens/s (its last
    segments, at most 8, never the first: the cost of a segment once S tokens are consumed,
    without the cheaper first segment, which has no memory to read or update)."""
    for row in rows:
        if "error" in row:
            continue
        own = [r for r in rows if r["arm"] == row["arm"] and r["mode"] == row["mode"] and "error" not in r]
        first = min(own, key=lambda r: r["context"])
        row["speed_vs_own_first"] = row["tokens_per_s"] / first["tokens_per_s"]
        if "tail_tokens_per_s" in row and "tail_tokens_per_s" in first:
            row["tail_vs_own_first"] = row["tail_tokens_per_s"] / first["tail_tokens_per_s"]


def plot(rows, encoder_rows, path, meta, arms):
    import logging

    import matplotlib
    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("tokens_per_s", "training tokens/s"), ("peak_mem_mb", "training peak MB")]
    fig, axes = plt.subplots(1, 3 if encoder_rows else 2, figsize=(16 if encoder_rows else 11, 4))
    for ax, (key, label) in zip(axes, panels):
        for arm in dict.fromkeys([r["arm"] for r in rows if r["arm"] in arms] +
                                 [r["arm"] for r in rows]):
            pts = [(r["context"], r[key]) for r in rows if r["arm"] == arm and r["mode"] == "train"
                   and "error" not in r]
            if pts:
                ax.plot(*zip(*pts), marker="o", label=arm)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("context (window; ∞-former: stream consumed)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    if encoder_rows:
        ax = axes[2]
        for mode in ("train", "infer"):
            pts = [(r["context"], r["tokens_per_s"]) for r in encoder_rows if r["mode"] == mode and "error" not in r]
            if pts:
                ax.plot(*zip(*pts), marker="o", label=f"summarizer encoder ({mode})")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("document length (tokens)")
        ax.set_ylabel("encoder tokens/s")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"{meta['machine']} ({meta['precision']}; {meta.get('batching', 'batch 1')})", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


RATIO = {"fmt": ".2f", "missing": "—"}
COLUMNS = [Column("context", "context"), Column("arm", "arm"), Column("tokens_per_s", "tokens/s", ".0f"),
           Column("peak_mem_mb", "peak MB", ".1f"),
           Column("speed_vs_transformer", "speed ÷ transformer_lm", **RATIO),
           Column("memory_vs_transformer", "memory ÷ transformer_lm", **RATIO)]


def report(rows, encoder_rows, breakdown, meta, paired=()):
    """benchmark.md: the arms' tables per mode, the encoder's, the memory breakdown and the
    paired memory-on ÷ off ratios, one row per stream count (scripts/bench_paired.py)."""
    lines = [f"Machine: {meta['machine']}; precision {meta['precision']}; {meta['batching']}; "
             f"sizes {meta['sizes']}", ""]
    columns = COLUMNS + [Column("batch", "batch", "d", missing=""),
                         Column("speed_vs_own_first", "speed ÷ own first", **RATIO)]
    streaming = columns + [Column("tail_tokens_per_s", "tail tokens/s", ".0f", missing="—"),
                           Column("tail_vs_own_first", "tail ÷ own first", **RATIO)]
    for mode in (m for m in ("train", "infer") if any(r["mode"] == m for r in rows)):
        lines += [f"### {mode} ({'forward + backward' if mode == 'train' else 'forward only'})", "",
                  markdown(_shown(r for r in rows if r["mode"] == mode),
                           streaming if any("tail_tokens_per_s" in r for r in rows) else columns), ""]
    if encoder_rows:
        lines += ["### summarizer encoder, one document (train = forward + backward of B)", "",
                  markdown(_shown(encoder_rows), [Column("mode", "mode")] + columns[:4] + columns[-1:]), ""]
    lines += ["### ∞-former long-term memory, one layer, one segment (ms)", "",
              markdown([{"part": k, "ms": v} for k, v in breakdown.items()],
                       [Column("part", "part"), Column("ms", "ms", ".2f")])]
    if paired:
        lines += ["", "### ∞-former memory on ÷ off, training, paired segments", "",
                  markdown([{"streams": p["streams"], "pairs": p["error"]} if "error" in p else p for p in paired], [
                      Column("streams", "streams", "d"), Column("pairs", "pairs", "d"),
                      Column("on_ms", "memory on, ms / step", ".1f", missing=""),
                      Column("off_ms", "memory off, ms / step", ".1f", missing=""),
                      Column("speed_ratio", "speed on ÷ off (median)", ".3f", missing=""),
                      Column("speed_ratio_q1", "lower quartile", ".3f", missing=""),
                      Column("speed_ratio_q3", "upper quartile", ".3f", missing="")])]
    return "\n".join(lines) + "\n"


def _shown(rows):
    """Rows for a table: a failed measurement shows its error in the tokens/s column."""
    return [{"mode": r["mode"], "context": r["context"], "arm": r["arm"], "tokens_per_s": r["error"]}
            if "error" in r else r for r in rows]
