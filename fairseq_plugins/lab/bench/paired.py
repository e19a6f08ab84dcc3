"""``fairseq-longmem bench paired``: the ∞-former's memory-on ÷ memory-off training speed,
measured in pairs (docs/benchmark.md).

With ``--paired-against READ`` the pair is instead the same model with two reads of its memory
(``--memory-read`` and READ; docs/infinite-former.md, "Content reads"): the ratio is then
READ's time ÷ ``--memory-read``'s, i.e. ``--memory-read``'s throughput as a share of READ's.

With ``--paired-model summarizer`` the pair is two ``infinite_former_summarizer`` models with the two
reads (``--paired-against`` a read), each step one training update on ``--paired-streams``
documents of ``--doc-length`` tokens with ``--summary-length``-token summaries (encoder,
memory fit, decoder; the width, heads, FFN and layers of the options, ``--num-basis`` N,
``--segment`` the chunk length C and the lead window W).

Both models (same seed, same sizes, the same stream) are built in one worker and trained
segment by segment in lockstep; each segment after the first is timed once with the memory on
and once off, in alternating order, and the pair gives one ratio. After the timed passes each
model's FLOPs of one step (forward + backward, memory filled) are counted once
(:mod:`~fairseq_plugins.lab.bench.flops`), and the table gives beside the measured ratio the one
the FLOPs alone would give (FLOPs off ÷ on) and the efficiency, measured ÷ FLOP-proportional. A drift of the machine's
speed (other jobs, frequency) then moves both members of a pair alike, which separate rows of
``bench train``, each measured in its own process minutes apart, cannot offer. Measured for
each stream count of ``--paired-streams`` (:func:`stream_counts`), each in a worker of its own.
"""

import statistics
from typing import Dict, List

from fairseq_plugins.lab.bench import flops as flop_count
from fairseq_plugins.lab.bench import report
from fairseq_plugins.lab.bench import worker
from fairseq_plugins.lab.bench.models import build, memory_twins, model_for, step
from fairseq_plugins.lab.bench.resources import clock, synchronize
from fairseq_plugins.errors import ConfigError
from fairseq_plugins.lab.common.table import Column, markdown


def stream_counts(paired_streams, tokens_per_step, segment: int) -> List[int]:
    """The stream counts to measure: ``--paired-streams`` (comma-separated), else 1 and (with
    ``--tokens-per-step``) tokens per step ÷ segment. Raises ValueError for a bad list."""
    if paired_streams is None:
        batched = (tokens_per_step or 0) // segment
        return [1] + ([batched] if batched > 1 else [])
    counts = [int(x) for x in str(paired_streams).split(",")]
    if not counts or min(counts) <= 0:
        raise ValueError(paired_streams)
    return counts


def check(args) -> None:
    """Refuse ``--paired-segments`` below 2 and a bad ``--paired-streams`` (ConfigError, one line);
    resolve ``args.paired_streams`` to the list of stream counts (:func:`stream_counts`)."""
    if args.paired_against != "off" and args.paired_against == args.memory_read:
        raise ConfigError(f"--paired-against {args.paired_against} pairs the read with itself; choose another read "
                          "or 'off'")
    if args.paired_model == "summarizer" and args.paired_against == "off":
        raise ConfigError("--paired-model summarizer pairs two reads of its document memory: give --paired-against "
                          "location, content or mixture")
    if args.paired_segments < 2:
        raise ConfigError("--paired-segments must be at least 2 (the first segment of a pass is not timed)")
    try:
        args.paired_streams = stream_counts(args.paired_streams, args.tokens_per_step, args.segment)
    except ValueError:
        raise ConfigError("--paired-streams must be positive integers separated by commas, "
                          f"got {args.paired_streams!r}") from None


def builders(args) -> Dict:
    """``{label: build}`` of the pair's two models (each is built once before measuring:
    :func:`fairseq_plugins.lab.bench.models.refuse_unbuildable`)."""
    if getattr(args, "paired_model", "lm") == "summarizer":
        return {f"infinite_former_summarizer ({read} read)": (lambda read=read: _summarizer(args, read, "cpu"))
                for read in (args.memory_read, args.paired_against)}
    on, twin = memory_twins()
    out = {f"{on} ({args.memory_read} read)": lambda: build(on, args, args.segment, memory_read=args.memory_read)}
    if args.paired_against == "off":
        out[twin] = lambda: build(twin, args, args.segment)
    else:
        out[f"{on} ({args.paired_against} read)"] = lambda: build(on, args, args.segment,
                                                                   memory_read=args.paired_against)
    return out


def _result(ratios, ms, flops) -> Dict:
    """The medians, the quartiles (inclusive: within the measured ratios even for two pairs), the
    FLOPs per step and the FLOP bound (:func:`fairseq_plugins.lab.bench.flops.bound`: off ÷ on)."""
    quartiles = statistics.quantiles(ratios, n=4, method="inclusive") if len(ratios) > 1 else [ratios[0]] * 3
    ratio = statistics.median(ratios)
    return {"pairs": len(ratios), "on_ms": statistics.median(ms["on"]), "off_ms": statistics.median(ms["off"]),
            "speed_ratio": ratio, "speed_ratio_q1": quartiles[0], "speed_ratio_q3": quartiles[2],
            "on_flops": flops["on"], "off_flops": flops["off"],
            **flop_count.bound(ratio, flops["on"], flops["off"])}


def measure(args, streams: int = 1) -> Dict:
    """In a worker: ``{"pairs", "on_ms", "off_ms", "speed_ratio", "speed_ratio_q1",
    "speed_ratio_q3", "on_flops", "off_flops", "flop_ratio", "efficiency"}`` for ``streams`` streams trained side by side (a batch of that many
    segments per step): medians of the milliseconds per step (forward + backward) and of the
    per-pair speed ratio t_off ÷ t_on (≥ 1 would mean the memory costs nothing), with its
    quartiles, over ``--repeats`` passes of ``--paired-segments`` segments (the first of each
    pass, which has no memory yet, untimed), after ``--warmup`` untimed passes: ``repeats ×
    (paired_segments − 1)`` pairs. ``*_flops``: one step's FLOPs (forward + backward, the memory
    filled), counted once after the timed passes; ``flop_ratio`` = off_flops ÷ on_flops, the speed
    ratio if time followed the FLOPs; ``efficiency`` = speed_ratio ÷ flop_ratio. The models and
    the step are those ``bench train`` measures (:mod:`fairseq_plugins.lab.bench.models`)."""
    import torch

    on, twin = memory_twins()
    device = torch.device(args.device)
    against = args.paired_against
    # the pair's members: the memory with --memory-read, and the twin without it or the other read
    members = {"on": (on, args.memory_read), "off": (twin, None) if against == "off" else (on, against)}
    on, off = "on", "off"
    models = {}
    for name, (arm, read) in members.items():
        torch.manual_seed(0)
        models[name] = model_for(arm, args, args.segment, device, True, memory_read=read)
    tokens = torch.randint(4, args.vocab, (streams, args.paired_segments * args.segment), device=device)
    timer = clock(args.clock)

    def segment(arm, index):
        step(models[arm], tokens[:, index * args.segment:(index + 1) * args.segment], args, device, True,
             memory_key="bench")
        synchronize(device)

    ms = {on: [], off: []}
    ratios = []
    for repeat in range(args.warmup + args.repeats):
        for arm in (on, off):
            models[arm].reset_memory("bench")
            segment(arm, 0)
        for index in range(1, args.paired_segments):
            pair = {}
            for arm in ((on, off) if index % 2 else (off, on)):
                start = timer()
                segment(arm, index)
                pair[arm] = timer() - start
            if repeat >= args.warmup:
                ratios.append(pair[off] / pair[on])
                for arm in (on, off):
                    ms[arm].append(1000 * pair[arm])
    # outside the timing, the memory as the timed segments found it (filled)
    flops = {arm: flop_count.count(lambda arm=arm: segment(arm, 1)) for arm in (on, off)}
    return _result(ratios, ms, flops)


def _summarizer(args, read: str, device):
    """``infinite_former_summarizer`` at the options' sizes with ``read``, and its dictionary."""
    from types import SimpleNamespace

    from fairseq.data import Dictionary

    from fairseq_plugins.models.infinite_former_summarizer import (InfiniteFormerSummarizerConfig,
                                                                   InfiniteFormerSummarizerModel)

    d = Dictionary()
    while len(d) < args.vocab:
        d.add_symbol(f"w{len(d)}")
    sides = {f"{side}_{key}": value for side in ("encoder", "decoder") for key, value in
             (("layers", args.layers), ("embed_dim", args.width), ("attention_heads", args.heads),
              ("ffn_embed_dim", args.ffn))}
    cfg = InfiniteFormerSummarizerConfig(**sides, num_basis_functions=args.num_basis, encoder_chunk_length=args.segment,
                                         lead_window=args.segment, memory_read=read, share_all_embeddings=True,
                                         dropout=0.0, max_source_positions=args.doc_length + 1,
                                         max_target_positions=args.summary_length + 1)
    model = InfiniteFormerSummarizerModel.build_model(cfg, SimpleNamespace(source_dictionary=d, target_dictionary=d))
    return model.to(device).train(), d


def measure_summarizer(args, streams: int = 1) -> Dict:
    """In a worker: :func:`measure`'s keys for two summarizers, ``--memory-read`` and
    ``--paired-against``, one training update each per pair (the module docstring); the FLOPs
    are one update's."""
    import torch

    device = torch.device(args.device)
    models = {}
    for name, read in (("on", args.memory_read), ("off", args.paired_against)):
        torch.manual_seed(0)
        models[name] = _summarizer(args, read, device)[0]
    src = torch.randint(4, args.vocab, (streams, args.doc_length), device=device)
    prev = torch.randint(4, args.vocab, (streams, args.summary_length), device=device)
    lengths = torch.full((streams,), args.doc_length, device=device)
    timer = clock(args.clock)

    def update(name):
        logits, _ = models[name](src, lengths, prev)
        logits.float().logsumexp(-1).mean().backward()
        models[name].zero_grad(set_to_none=True)
        synchronize(device)

    ms, ratios = {"on": [], "off": []}, []
    for repeat in range(args.warmup + args.repeats):
        for index in range(args.paired_segments):
            pair = {}
            for name in (("on", "off") if index % 2 else ("off", "on")):
                start = timer()
                update(name)
                pair[name] = timer() - start
            if repeat >= args.warmup:
                ratios.append(pair["off"] / pair["on"])
                for name in pair:
                    ms[name].append(1000 * pair[name])
    flops = {name: flop_count.count(lambda name=name: update(name)) for name in ("on", "off")}
    return _result(ratios, ms, flops)


def measure_all(args) -> List[Dict]:
    """:func:`measure` for each of ``args.paired_streams`` (a list: :func:`check`) in a worker of its own (given
    ``--timeout`` × streams seconds), a line printed for each: ``{"streams", ...}`` with
    :func:`measure`'s keys or ``"error"``."""
    paired = []
    for count in args.paired_streams:
        result = worker.run(measure_summarizer if args.paired_model == "summarizer" else measure, args,
                            args.timeout * count, streams=count)
        paired.append({"streams": count, **result})
        versus = "memory on ÷ off" if args.paired_against == "off" else f"{args.memory_read} ÷ {args.paired_against}"
        print(f"paired {count:3d} stream(s): " + (result["error"] if "error" in result else
              f"{versus} {result['speed_ratio']:.3f} (quartiles {result['speed_ratio_q1']:.3f}–"
              f"{result['speed_ratio_q3']:.3f}, {result['pairs']} pairs); FLOP-proportional "
              f"{result['flop_ratio']:.3f}, efficiency {result['efficiency']:.3f}"), flush=True)
    return paired


def columns(first: str, second: str):
    """The table's columns for the pair ``first`` (memory on, or --memory-read) ÷ ``second`` (off,
    or --paired-against): times, the measured ratio and its quartiles, the FLOPs and their bound."""
    return [Column("streams", "streams", "d"), Column("pairs", "pairs", "d"),
            Column("on_ms", f"{first}, ms / step", ".1f", missing=""),
            Column("off_ms", f"{second}, ms / step", ".1f", missing=""),
            Column("speed_ratio", f"speed {first} ÷ {second} (median)", ".3f", missing=""),
            Column("speed_ratio_q1", "lower quartile", ".3f", missing=""),
            Column("speed_ratio_q3", "upper quartile", ".3f", missing=""),
            Column("on_flops", f"{first}, GFLOP / step", flop_count.gflop, missing=""),
            Column("off_flops", f"{second}, GFLOP / step", flop_count.gflop, missing=""),
            Column("flop_ratio", f"FLOP-proportional (FLOPs {second} ÷ {first})", ".3f",
                   missing=""),
            Column("efficiency", "efficiency (measured ÷ FLOP-proportional)", ".3f", missing="")]


COLUMNS = columns("memory on", "memory off")


def run(args) -> report.Result:
    """Measure every stream count (printing each) and return paired.{md,json}."""
    paired = measure_all(args)
    versus = ("memory on ÷ off" if args.paired_against == "off" else
              f"the {args.memory_read} read ÷ the {args.paired_against} read")
    if args.paired_model == "summarizer":
        versus += f" of the summarizer ({args.doc_length}-token documents, {args.summary_length}-token summaries)"
    info = report.meta(args, f"paired {versus} at {', '.join(str(p['streams']) for p in paired)} stream(s) per step")
    info["sizes"]["paired_streams"] = [p["streams"] for p in paired]  # the counts measured
    info["sizes"]["memory_read"], info["sizes"]["paired_against"] = args.memory_read, args.paired_against
    info["sizes"]["paired_model"] = args.paired_model
    if args.paired_model == "summarizer":
        info["sizes"]["doc_length"], info["sizes"]["summary_length"] = args.doc_length, args.summary_length
    names = (("memory on", "memory off") if args.paired_against == "off" else
             (f"{args.memory_read} read", f"{args.paired_against} read"))
    table_columns = columns(*names)
    unit = "update" if args.paired_model == "summarizer" else "step"
    table = "\n".join([report.header(info), "", f"### ∞-former {versus}, training, paired segments", "",
                       flop_count.convention(*names, unit), "", markdown(report.shown(paired, "pairs", keep=("streams",)), table_columns)])
    return report.Result(table, {"meta": info, "ltm_paired": paired})
