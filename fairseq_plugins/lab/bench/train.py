"""``fairseq-longmem bench train``: speed and memory as the context grows (docs/benchmark.md).

Training (forward + backward) and inference (forward only, ``--modes``) tokens/s and peak
memory of the benchmark's arms at equal width and depth, as the context grows. Context means

* transformer_lm, fastformer_lm: the attention window, one sequence of that many tokens
  (``--tokens-per-step N``: max(1, N ÷ window) sequences per training step);
* infinite_former_lm: tokens of stream consumed, in segments of ``--segment`` tokens with the
  memory carried (the attention window stays segment + short-term memory).

Each (arm, context, mode) is measured in a fresh worker (:mod:`fairseq_plugins.lab.bench.worker`):
``--warmup`` untimed repeats, then ``--repeats`` timed ones; the median tokens/s and the peak
memory above the built model and its input. Every row carries its ratios to transformer_lm at
the same context and to its own arm's shortest context; the ∞-former's rows also the *tail*:
its last segments (at most :data:`TAIL_SEGMENTS`, never the first, which has no memory yet).
``--chunk-sizes`` adds fastformer_lm training rows with other ``--attention-chunk-size`` values,
``--encoder-lengths`` the summarizer encoder's rows (:mod:`fairseq_plugins.lab.bench.encoder`).
"""

import statistics
from typing import Dict, List

from fairseq_plugins.lab.bench import encoder
from fairseq_plugins.lab.bench import report
from fairseq_plugins.lab.bench import worker
from fairseq_plugins.lab.bench.models import REFERENCE, arm_names, build, is_streaming, model_for, step
from fairseq_plugins.lab.bench.resources import clock, synchronize, time_and_peak
from fairseq_plugins.errors import ConfigError
from fairseq_plugins.lab.common.table import Column, markdown

TAIL_SEGMENTS = 8
MODES = ("train", "infer")
CHUNKED = "fastformer_lm"  # the arm --chunk-sizes measures with other --attention-chunk-size values


def check(args) -> None:
    """Refuse an unknown arm or mode (ConfigError, one line)."""
    unknown = [a for a in args.arms.split(",") if a not in arm_names()] + \
        [m for m in args.modes.split(",") if m not in MODES]
    if unknown:
        raise ConfigError(f"unknown arm or mode {', '.join(unknown)}; arms: {', '.join(arm_names())}; "
                          f"modes: {', '.join(MODES)}")


def builders(args) -> Dict:
    """``{label: build}`` of every model this run builds, at its shortest context
    (:func:`fairseq_plugins.lab.bench.models.refuse_unbuildable` builds each once before measuring)."""
    windows, streams = _ints(args.windows), _ints(args.streams)
    arms = [a for a in arm_names() if a in args.arms.split(",")]
    out = {}
    for arm in arms:
        contexts = streams if is_streaming(arm) else windows
        if contexts:
            out[arm] = lambda arm=arm, context=min(contexts): build(arm, args, context)
    if CHUNKED in arms and windows:
        for size in _ints(args.chunk_sizes):
            out[f"{CHUNKED} (chunk {size})"] = lambda size=size: build(CHUNKED, args, min(windows), size)
    if _ints(args.encoder_lengths):
        out["summarizer encoder"] = lambda: encoder.build_encoder(args, min(_ints(args.encoder_lengths)))
    return out


def measure(args, arm: str, mode: str, context: int, chunk_size=None) -> Dict:
    """In a worker: ``{"tokens_per_s", "peak_mem_mb", "batch", "params"}`` (and the streaming
    arms' ``"tail_tokens_per_s"``) of ``arm`` at ``context`` tokens, ``mode`` train or infer."""
    import torch

    torch.manual_seed(0)
    device = torch.device(args.device)
    model = model_for(arm, args, context, device, mode == "train", chunk_size)
    streaming = is_streaming(arm)
    bsz = 1
    if mode == "train" and not streaming and args.tokens_per_step:
        bsz = max(1, args.tokens_per_step // context)  # equal tokens per training step
    tokens = torch.randint(4, args.vocab, (bsz, context), device=device)
    chunk = args.segment if streaming else context

    # the stream's tail: its last segments (at most TAIL_SEGMENTS, never the first, which has no
    # memory yet), i.e. the cost of a segment once about `context` tokens are consumed
    timer, tail, tail_start = clock(args.clock), [], max(chunk, context - TAIL_SEGMENTS * chunk)

    def run_once():
        if streaming:
            model.reset_memory("bench")
        for start in range(0, context, chunk):
            x = tokens[:, start:start + chunk]
            if streaming and start == tail_start:
                synchronize(device)
                t0 = timer()
            step(model, x, args, device, mode == "train", **({"memory_key": "bench"} if streaming else {}))
        if streaming and context > chunk:
            synchronize(device)
            tail.append(timer() - t0)

    seconds, peak = time_and_peak(run_once, args, device)
    out = {"tokens_per_s": bsz * context / seconds, "peak_mem_mb": peak, "batch": bsz,
           "params": sum(p.numel() for p in model.parameters())}
    if tail:  # the timed repeats' (the warm-up's come first)
        out["tail_tokens_per_s"] = (context - tail_start) / statistics.median(tail[-args.repeats:])
    return out


def _measured(rows: List[Dict], function, args, label: str, mode: str, context: int, **kwargs) -> None:
    """Measure in a worker, add the row (``arm`` = ``label``) and print it."""
    result = worker.run(function, args, mode=mode, context=context, **kwargs)
    rows.append({"mode": mode, "context": context, "arm": label, **result})
    print(f"{mode:5s} {context:6d} {label:30s} " + (
        f"{result['tokens_per_s']:10.0f} tok/s {result['peak_mem_mb']:9.1f} MB"
        if "error" not in result else result["error"]), flush=True)


def _ints(text: str) -> List[int]:
    return [int(x) for x in text.split(",") if x]


def add_transformer_ratios(rows: List[Dict]) -> None:
    """``speed_vs_transformer`` and ``memory_vs_transformer``: each row over transformer_lm's at the
    same mode and context (when it was measured; memory only where its peak is 1 MB or more)."""
    for row in rows:
        ref = next((r for r in rows if r["arm"] == REFERENCE and r["mode"] == row["mode"]
                    and r["context"] == row["context"] and "error" not in r), None)
        if ref is not None and "error" not in row:
            row["speed_vs_transformer"] = row["tokens_per_s"] / ref["tokens_per_s"]
            if ref["peak_mem_mb"] >= 1.0:  # below 1 MB the ratio is noise
                row["memory_vs_transformer"] = row["peak_mem_mb"] / ref["peak_mem_mb"]


def add_own_ratios(rows: List[Dict]) -> None:
    """``speed_vs_own_first``: tokens/s ÷ the same arm's at its shortest measured context; for the
    ∞-former also ``tail_vs_own_first``, the same ratio of its tail's tokens/s."""
    for row in rows:
        if "error" in row:
            continue
        own = [r for r in rows if r["arm"] == row["arm"] and r["mode"] == row["mode"] and "error" not in r]
        first = min(own, key=lambda r: r["context"])
        row["speed_vs_own_first"] = row["tokens_per_s"] / first["tokens_per_s"]
        if "tail_tokens_per_s" in row and "tail_tokens_per_s" in first:
            row["tail_vs_own_first"] = row["tail_tokens_per_s"] / first["tail_tokens_per_s"]


def measure_all(args):
    """The rows of the arms and of the summarizer encoder, in the order measured, with their ratios."""
    windows, streams = _ints(args.windows), _ints(args.streams)
    chunk_sizes, chunk_windows = _ints(args.chunk_sizes), _ints(args.chunk_windows)
    arms, modes = args.arms.split(","), args.modes.split(",")
    rows, encoder_rows = [], []
    for mode in (m for m in MODES if m in modes):
        for context in sorted(set(windows) | set(streams)):
            for arm in (a for a in arm_names() if a in arms):
                if context not in (streams if is_streaming(arm) else windows) or \
                        (arm == REFERENCE and context > (args.transformer_max_window or context)):
                    continue
                _measured(rows, measure, args, arm, mode, context, arm=arm)
            if mode == "train" and CHUNKED in arms and context in chunk_windows:
                for size in chunk_sizes:
                    _measured(rows, measure, args, f"{CHUNKED} (chunk {size})", mode, context, arm=CHUNKED,
                              chunk_size=size)
        for length in _ints(args.encoder_lengths):
            _measured(encoder_rows, encoder.measure, args, "summarizer encoder", mode, length)
    add_transformer_ratios(rows)
    for group in (rows, encoder_rows):
        add_own_ratios(group)
    return rows, encoder_rows


RATIO = {"fmt": ".2f", "missing": "—"}
COLUMNS = [Column("context", "context"), Column("arm", "arm"), Column("tokens_per_s", "tokens/s", ".0f"),
           Column("peak_mem_mb", "peak MB", ".1f"),
           Column("speed_vs_transformer", "speed ÷ transformer_lm", **RATIO),
           Column("memory_vs_transformer", "memory ÷ transformer_lm", **RATIO)]


def table(rows: List[Dict], encoder_rows: List[Dict], info: Dict) -> str:
    """train.md: the header line, one table per mode, the encoder's table."""
    lines = [report.header(info), ""]
    columns = COLUMNS + [Column("batch", "batch", "d", missing=""),
                         Column("speed_vs_own_first", "speed ÷ own first", **RATIO)]
    streaming = columns + [Column("tail_tokens_per_s", "tail tokens/s", ".0f", missing="—"),
                           Column("tail_vs_own_first", "tail ÷ own first", **RATIO)]
    for mode in (m for m in MODES if any(r["mode"] == m for r in rows)):
        lines += [f"### {mode} ({'forward + backward' if mode == 'train' else 'forward only'})", "",
                  markdown(report.shown((r for r in rows if r["mode"] == mode), "tokens_per_s"),
                           streaming if any("tail_tokens_per_s" in r for r in rows) else columns), ""]
    if encoder_rows:
        lines += ["### summarizer encoder, one document (train = forward + backward of B)", "",
                  markdown(report.shown(encoder_rows, "tokens_per_s"),
                           [Column("mode", "mode")] + columns[:4] + columns[-1:]), ""]
    return "\n".join(lines).rstrip("\n") + "\n"


def panels(rows: List[Dict], encoder_rows: List[Dict]) -> List[report.Panel]:
    """tokens/s and peak MB against the context, one line per arm (the training rows, or the
    forward-only ones when no training row was measured), and the encoder's tokens/s."""
    trained = any(r["mode"] == "train" and "error" not in r for r in rows)
    mode, what = ("train", "training") if trained else ("infer", "forward")
    shown = [r for r in rows if r["mode"] == mode]
    xlabel = "context (window; ∞-former: stream consumed)"
    out = [report.Panel(report.series(shown, "tokens_per_s", order=arm_names()), xlabel, f"{what} tokens/s"),
           report.Panel(report.series(shown, "peak_mem_mb", order=arm_names()), xlabel, f"{what} peak MB",
                        legend=False)]
    encoder_series = report.series([{**r, "label": f"summarizer encoder ({r['mode']})"} for r in encoder_rows],
                                   "tokens_per_s", label="label")
    return out + [report.Panel(encoder_series, "document length (tokens)", "encoder tokens/s")]


def run(args) -> report.Result:
    """Measure every row (printing each) and return train.{md,json,png}."""
    rows, encoder_rows = measure_all(args)
    batching = (f"{args.tokens_per_step} tokens per training step (transformer_lm, fastformer_lm)"
                if args.tokens_per_step else "batch 1")
    info = report.meta(args, batching)
    return report.Result(table(rows, encoder_rows, info), {"meta": info, "rows": rows, "encoder_rows": encoder_rows},
                         panels(rows, encoder_rows), title=f"{info['machine']} ({info['precision']}; {batching})")
