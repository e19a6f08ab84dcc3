"""Part of scripts/benchmark.py: the ∞-former's memory-on ÷ memory-off training speed, measured
in pairs. Both models (same seed, same sizes, the same stream) are built in one worker and
trained segment by segment in lockstep; each segment after the first is timed once with the
memory on and once off, in alternating order, and the pair gives one ratio. A drift of the
machine's speed (other jobs, frequency) then moves both members of a pair alike, which the
separate rows of the tables, each measured in its own process minutes apart, cannot offer.
Run through scripts/benchmark.py, not on its own."""

import statistics

from bench_memory import clock
from bench_models import model_for, step, synchronize

ON, OFF = "infinite_former_lm", "infinite_former_lm (LTM off)"


def stream_counts(args):
    """The stream counts of the paired measurement: ``--paired-streams``, else 1 and (with
    ``--tokens-per-step``) tokens per step ÷ segment. Raises ValueError for a bad list."""
    if args.paired_streams is None:
        batched = (args.tokens_per_step or 0) // args.segment
        return [1] + ([batched] if batched > 1 else [])
    counts = [int(x) for x in str(args.paired_streams).split(",")]
    if not counts or min(counts) <= 0:
        raise ValueError(args.paired_streams)
    return counts


def measure_all(args, arms, modes, run_worker):
    """The paired measurement for each of ``args.paired_streams`` in a worker of its own
    (``run_worker(job, args, timeout)``; the time allowed grows with the streams), a line printed
    for each: a list of ``{"streams", ...}`` (:func:`paired_memory_ratio`'s keys or ``"error"``).
    Empty unless both ∞-former arms train; a line says so if ``--paired-streams`` was given
    (``args.paired_streams_given``)."""
    if "train" not in modes or not {ON, OFF} <= set(arms):
        if args.paired_streams_given:
            print("--paired-streams: no paired measurement in this run (it needs both ∞-former arms and "
                  "--modes train)", flush=True)
        return []
    paired = []
    for count in args.paired_streams:
        result = run_worker({"kind": "paired", "mode": "train", "streams": count}, args, args.timeout * count)
        paired.append({"streams": count, **result})
        print(f"paired {count:3d} stream(s): " + (result["error"] if "error" in result else
              f"memory on ÷ off {result['speed_ratio']:.3f} (quartiles {result['speed_ratio_q1']:.3f}–"
              f"{result['speed_ratio_q3']:.3f}, {result['pairs']} pairs)"), flush=True)
    return paired


def paired_memory_ratio(args, streams=1):
    """``{"pairs", "on_ms", "off_ms", "speed_ratio", "speed_ratio_q1", "speed_ratio_q3"}`` for
    ``streams`` streams trained side by side (a batch of that many segments per step): medians
    of the milliseconds per step (forward + backward) and of the per-pair speed ratio
    t_off ÷ t_on (≥ 1 would mean the memory costs nothing), with its quartiles, over
    ``args.repeats`` passes of ``args.paired_segments`` segments (the first of each pass, which
    has no memory yet, untimed), after ``args.warmup`` untimed passes: ``args.repeats ×
    (args.paired_segments − 1)`` pairs. The models and the step are those the
    benchmark's rows measure (scripts/bench_models.py)."""
    import torch

    device = torch.device(args.device)
    models = {}
    for arm in (ON, OFF):
        torch.manual_seed(0)
        models[arm] = model_for(arm, args, args.segment, device, True)
    tokens = torch.randint(4, args.vocab, (streams, args.paired_segments * args.segment), device=device)
    timer = clock(args.clock)

    def segment(arm, index):
        step(models[arm], tokens[:, index * args.segment:(index + 1) * args.segment], args, device, True,
             memory_key="bench")
        synchronize(device)

    ms = {ON: [], OFF: []}
    ratios = []
    for repeat in range(args.warmup + args.repeats):
        for arm in (ON, OFF):
            models[arm].reset_memory("bench")
            segment(arm, 0)
        for index in range(1, args.paired_segments):
            pair = {}
            for arm in ((ON, OFF) if index % 2 else (OFF, ON)):
                start = timer()
                segment(arm, index)
                pair[arm] = timer() - start
            if repeat >= args.warmup:
                ratios.append(pair[OFF] / pair[ON])
                for arm in (ON, OFF):
                    ms[arm].append(1000 * pair[arm])
    # inclusive: the quartiles stay within the measured ratios even for two pairs
    quartiles = statistics.quantiles(ratios, n=4, method="inclusive") if len(ratios) > 1 else [ratios[0]] * 3
    return {"pairs": len(ratios), "on_ms": statistics.median(ms[ON]), "off_ms": statistics.median(ms[OFF]),
            "speed_ratio": statistics.median(ratios), "speed_ratio_q1": quartiles[0],
            "speed_ratio_q3": quartiles[2]}
