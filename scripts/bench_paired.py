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


def paired_memory_ratio(args, streams=1):
    """``{"pairs", "on_ms", "off_ms", "speed_ratio", "speed_ratio_q1", "speed_ratio_q3"}`` for
    ``streams`` streams trained side by side (a batch of that many segments per step): medians
    of the per-segment milliseconds (forward + backward) and of the per-pair speed ratio
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
