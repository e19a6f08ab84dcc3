"""Speed and memory as the context grows: fairseq's transformer_lm vs fastformer_lm
vs infinite_former_lm (long-term memory on and off), equal width and depth.

    python scripts/benchmark.py                      # this machine, CPU, default sizes
    python scripts/benchmark.py --quick              # a 1-minute smoke version
    python scripts/benchmark.py --device cuda --fp16 # unchanged on a GPU (or --bf16)

Context means
* transformer_lm, fastformer_lm: the attention window, one sequence of that many tokens;
* infinite_former_lm: tokens of stream consumed, in segments of ``--segment`` tokens with the
  memory carried (the attention window stays segment + short-term memory).

For each arm, context and mode (train = forward + backward, infer = forward without
gradients) a fresh subprocess builds the model, runs ``--warmup`` untimed repeats and
``--repeats`` timed ones and reports the median tokens/s and the peak memory above what the
built model and its input hold (CUDA: ``torch.cuda.max_memory_allocated``; CPU: the process's
peak resident memory). A measurement that runs out of memory is reported as ``OOM`` (CUDA
out-of-memory, a CPU allocation failure, ``MemoryError``, or the worker killed by the
kernel), one that takes longer than ``--timeout`` seconds as a time-out, and the run goes on.
``--memory-limit-mb`` imposes a memory budget on each measurement (to mimic a smaller device,
and to exercise the OOM path on a CPU). Every row carries its ratio to transformer_lm at the
same context.

``--tokens-per-step N`` trains transformer_lm and fastformer_lm on N ÷ window sequences per step
(at least one), so that every training row of theirs moves the same number of tokens;
the ∞-former's memory-on ÷ off speed, measured in lockstep pairs (scripts/bench_paired.py), is
taken with one stream and then with N ÷ segment streams per step (``--paired-streams`` sets the
counts); ``--chunk-sizes`` adds fastformer_lm training rows with other ``--attention-chunk-size`` values
(at ``--chunk-windows``); ``--encoder-lengths`` measures the summarizer's encoder on one document
of each length. Writes OUT/benchmark.md (tables), OUT/benchmark.json and OUT/benchmark.png
(matplotlib), plus a breakdown of the ∞-former's per-segment memory cost (scripts/benchmark_more.py).

Mode ``generate`` (``--modes generate``; docs/generation.md): milliseconds per generated
token and the incremental state's size after a prompt of each ``--prompts`` length, every
arm with its own incremental decoding (transformer_lm: fairseq's key/value cache;
fastformer_lm: its constant carry; infinite_former_lm: its segment caches). The
∞-former reads the prompt in one call (chunked prefill); the other two take it token by
token (their incremental decoders use only the last token), so they stop at
``--token-prefill-max``. ``--gen-tokens`` greedy steps are timed after the prompt.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from fairseq_plugins.experiments import arms as arm_registry  # noqa: E402
from bench_models import build, model_for, step, synchronize  # noqa: E402
import benchmark_generation  # noqa: E402
import benchmark_more  # noqa: E402
import bench_paired  # noqa: E402
from bench_memory import (allocator_environment, apply_memory_limit, clock, is_out_of_memory, peak_rss_mb,  # noqa: E402
                          rss_mb)  # noqa: E402
from fairseq_plugins.report.table import write_files

ARMS = arm_registry.names("benchmark")
TAIL_SEGMENTS = 8


def _streaming(arm: str) -> bool:
    """Whether the arm reads a stream segment by segment with its memory carried (the ∞-former)."""
    return arm_registry.get_arm("benchmark", arm).task == "streaming_lm"


class _Help(argparse.ArgumentDefaultsHelpFormatter):
    """--help with each option's default, except where there is none (the help says what unset means)."""

    def _get_help_string(self, action):
        return action.help if action.default is None else super()._get_help_string(action)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=_Help)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="where to measure")
    precision = p.add_mutually_exclusive_group()
    precision.add_argument("--fp16", action="store_true", help="half-precision model (CUDA)")
    precision.add_argument("--bf16", action="store_true", help="bfloat16 autocast")
    p.add_argument("--layers", type=int, default=2, help="decoder layers of every arm")
    p.add_argument("--width", type=int, default=128, help="model width of every arm")
    p.add_argument("--heads", type=int, default=4, help="attention heads")
    p.add_argument("--ffn", type=int, default=512, help="feed-forward width")
    p.add_argument("--vocab", type=int, default=8000, help="vocabulary size (output logits)")
    p.add_argument("--num-basis", type=int, default=64, help="∞-former N and M")
    p.add_argument("--windows", default="512,1024,2048,4096,8192,16384",
                   help="attention windows of transformer_lm and fastformer_lm")
    p.add_argument("--streams", default="1024,4096,16384,65536", help="stream tokens consumed by the ∞-former")
    p.add_argument("--segment", type=int, default=512, help="∞-former segment (= short-term memory)")
    p.add_argument("--paired-segments", type=int, default=16,
                   help="segments per pass of the paired memory-on ÷ off measurement (scripts/bench_paired.py)")
    p.add_argument("--paired-streams", default=None,
                   help="comma-separated streams per step of the paired measurement (default: 1, and with "
                        "--tokens-per-step N also N ÷ segment: the tokens per step of transformer_lm's and "
                        "fastformer_lm's training rows)")
    p.add_argument("--tokens-per-step", type=int, default=None,
                   help="train transformer_lm and fastformer_lm on max(1, N ÷ window) sequences per step, "
                        "and pair the ∞-former arms also on N ÷ segment streams (unset: one sequence)")
    p.add_argument("--transformer-max-window", type=int, default=None,
                   help="skip transformer_lm at windows above this (its cost is quadratic)")
    p.add_argument("--chunk-sizes", default="", help="extra fastformer_lm training rows with these "
                                                     "--attention-chunk-size values, e.g. 16,64")
    p.add_argument("--chunk-windows", default="512,16384", help="windows of the --chunk-sizes rows")
    p.add_argument("--encoder-lengths", default="1024,4096,16384,65536",
                   help="document lengths of the summarizer encoder rows ('' skips them)")
    p.add_argument("--repeats", type=int, default=3, help="timed repeats per measurement (the median is reported)")
    p.add_argument("--warmup", type=int, default=1, help="untimed repeats before them")
    p.add_argument("--timeout", type=float, default=600, help="seconds per measurement (the paired one: this × its streams)")
    p.add_argument("--memory-limit-mb", type=float, default=None,
                   help="memory budget of each measurement above the built model and its input, in MB; "
                        "beyond it the row reads OOM. CUDA: torch.cuda.set_per_process_memory_fraction; "
                        "CPU: an address-space limit (RLIMIT_AS) over the worker's size once the model is "
                        "built, so allocations past it fail for real (approximate: it counts address space, "
                        "not resident memory)")
    p.add_argument("--arms", default=",".join(ARMS), help="comma-separated subset of the arms to measure")
    p.add_argument("--modes", default="train,infer",
                   help="comma-separated subset of train,infer,generate (generate: docs/generation.md)")
    p.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                   help="wall: elapsed time; cpu: this process's CPU time, which other jobs on a shared "
                        "machine do not inflate (with --threads 1 it equals the wall clock of an idle core)")
    p.add_argument("--allocator", choices=["cached", "system"], default="cached",
                   help="CPU workers: cached keeps freed memory in the process (glibc's mmap and trim thresholds "
                        "raised, as torch's CUDA caching allocator does on a GPU); system: glibc's defaults, which "
                        "hand every block of 32 MB or more back to the kernel and page-fault it in anew at its "
                        "next use (docs/benchmark.md)")
    p.add_argument("--threads", type=int, default=None,
                   help="torch intra-op threads per measurement (default: torch's choice, one per core); "
                        "1 with `taskset -c 0` keeps the numbers steady when other jobs share the machine")
    p.add_argument("--out", default="runs/benchmark", help="folder for benchmark.md, .json and .png")
    p.add_argument("--prompts", default="1024,4096,16384,65536", help="generate mode: prompt lengths")
    p.add_argument("--gen-tokens", type=int, default=32, help="generate mode: timed tokens after the prompt")
    p.add_argument("--token-prefill-max", type=int, default=16384,
                   help="generate mode: longest prompt for the arms that read it token by token")
    p.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test of the whole pipeline")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    unknown = [a for a in args.arms.split(",") if a not in ARMS] + \
        [m for m in args.modes.split(",") if m not in ("train", "infer", "generate")]
    if unknown:
        p.error(f"unknown arm or mode {', '.join(unknown)}; arms: {', '.join(ARMS)}; modes: train, infer, generate")
    if args.threads is not None and args.threads <= 0:
        p.error("--threads must be positive")
    if args.clock == "cpu" and (args.threads != 1 or args.device != "cpu"):
        p.error("--clock cpu needs --threads 1 on --device cpu (idle threads of a pool spin and count as CPU time)")
    if args.memory_limit_mb is not None and args.memory_limit_mb <= 0:
        p.error("--memory-limit-mb must be positive")
    if args.segment <= 0:
        p.error("--segment must be positive")
    if args.tokens_per_step is not None and args.tokens_per_step <= 0:
        p.error("--tokens-per-step must be positive")
    if args.paired_segments < 2:
        p.error("--paired-segments must be at least 2 (the first segment of a pass is not timed)")
    if args.quick:  # smaller defaults; options given explicitly still win
        quick = dict(windows="128,256", streams="256,1024", segment=64, repeats=2, warmup=1, vocab=500, num_basis=16,
                     encoder_lengths="256,512", prompts="128,512")
        for name, value in quick.items():
            if getattr(args, name) == p.get_default(name):
                setattr(args, name, value)
    args.paired_streams_given = args.paired_streams is not None
    try:
        args.paired_streams = bench_paired.stream_counts(args)
    except ValueError:
        p.error(f"--paired-streams must be positive integers separated by commas, got {args.paired_streams!r}")
    return args


# ---- measurements ---------------------------------------------------------------------


def measure(arm, mode, context, args, chunk_size=None):
    """Runs in a worker process; returns tokens/s (median) and peak memory in MB."""
    import torch

    torch.manual_seed(0)
    device = torch.device(args.device)
    model = model_for(arm, args, context, device, mode == "train", chunk_size)
    streaming = _streaming(arm)
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


def time_and_peak(run_once, args, device):
    """Median seconds of ``run_once`` (``--repeats`` after ``--warmup``, on ``--clock``) and the
    peak memory in MB above what the process holds when called (the built model and its input),
    under ``--memory-limit-mb``. CPU: the process's peak resident memory, which the warm-up
    reaches as well as the timed repeats."""
    import torch

    if args.memory_limit_mb is not None:
        apply_memory_limit(args.memory_limit_mb, device)
    timer = clock(args.clock)
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        base = rss_mb()
    for _ in range(args.warmup):
        run_once()
    times = []
    for _ in range(args.repeats):
        synchronize(device)
        t0 = timer()
        run_once()
        synchronize(device)
        times.append(timer() - t0)
    if device.type == "cuda":
        peak = (torch.cuda.max_memory_allocated() - base) / 2**20
    else:
        peak = max(peak_rss_mb() - base, 0.0)
    return statistics.median(times), peak


# ---- driver ---------------------------------------------------------------------------


def run_worker(job, args, timeout=None):
    """``job`` measured in a fresh worker process (at most ``timeout`` seconds, default
    ``--timeout``): its result, or ``{"error": ...}``."""
    timeout = args.timeout if timeout is None else timeout
    cmd = [sys.executable, __file__, "--worker", json.dumps(job)] + _passthrough(args)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, **allocator_environment(args.allocator)})
    except subprocess.TimeoutExpired:
        return {"error": f"timeout > {timeout:.0f}s"}
    if proc.returncode != 0:
        text = proc.stderr
        if "out of memory" in text.lower() or "can't allocate memory" in text.lower() or \
                proc.returncode in (-9, 137):  # -9/137: killed, by the kernel's OOM killer on Linux
            return {"error": "OOM"}
        return {"error": (text.strip().splitlines() or ["failed"])[-1][:120]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _passthrough(args):
    out = ["--device", args.device, "--layers", str(args.layers), "--width", str(args.width),
           "--heads", str(args.heads), "--ffn", str(args.ffn), "--vocab", str(args.vocab),
           "--num-basis", str(args.num_basis), "--segment", str(args.segment), "--paired-segments", str(args.paired_segments),
           "--repeats", str(args.repeats), "--warmup", str(args.warmup), "--clock", args.clock,
           "--gen-tokens", str(args.gen_tokens)]
    if args.tokens_per_step is not None:
        out += ["--tokens-per-step", str(args.tokens_per_step)]
    if args.paired_streams:
        out += ["--paired-streams", ",".join(map(str, args.paired_streams))]
    if args.memory_limit_mb is not None:
        out += ["--memory-limit-mb", str(args.memory_limit_mb)]
    if args.threads is not None:
        out += ["--threads", str(args.threads)]
    return out + (["--fp16"] if args.fp16 else []) + (["--bf16"] if args.bf16 else [])


def _work(job, args):
    """One measurement in the worker: an arm (optionally with another chunk size), the encoder, or
    the long-term memory's breakdown (in a worker too: --threads, --clock and --allocator apply)."""
    if job.get("kind") == "breakdown":
        return benchmark_more.ltm_breakdown(args)
    if job.get("kind") == "paired":
        return bench_paired.paired_memory_ratio(args, job["streams"])
    if job.get("kind") == "encoder":
        import torch
        device = torch.device(args.device)
        return benchmark_more.measure_encoder(job["mode"], job["context"], args,
                                              lambda fn: time_and_peak(fn, args, device))
    return measure(job["arm"], job["mode"], job["context"], args, job.get("chunk"))


def _report(rows, job, label, args):
    """Measure ``job`` in a worker, add its row (``arm`` = ``label``) and print it."""
    result = run_worker(job, args)
    rows.append({"mode": job["mode"], "context": job["context"], "arm": label, **result})
    print(f"{job['mode']:5s} {job['context']:6d} {label:30s} " + (
        f"{result['tokens_per_s']:10.0f} tok/s {result['peak_mem_mb']:9.1f} MB"
        if "error" not in result else result["error"]), flush=True)


def main(argv=None):
    args = parse_args(argv)
    if args.worker:
        job = json.loads(args.worker)
        if args.threads is not None:
            import torch
            torch.set_num_threads(args.threads)
        try:
            if job["mode"] == "generate":
                result = benchmark_generation.measure_generation(job["arm"], job["context"], args, build)
            else:
                result = _work(job, args)
        except (RuntimeError, MemoryError) as err:  # CUDA/CPU allocation failures
            if not is_out_of_memory(err):
                raise
            result = {"error": "OOM"}
        print(json.dumps(result))
        return
    windows = [int(x) for x in args.windows.split(",")]
    streams = [int(x) for x in args.streams.split(",")]
    contexts = sorted(set(windows) | set(streams))
    chunk_sizes = [int(x) for x in args.chunk_sizes.split(",") if x]
    chunk_windows = [int(x) for x in args.chunk_windows.split(",") if x]
    rows, encoder_rows = [], []
    arms, modes = args.arms.split(","), args.modes.split(",")
    for mode in ("train", "infer"):
        if mode not in modes:
            continue
        for context in contexts:
            for arm in (a for a in ARMS if a in arms):
                if (_streaming(arm) and context not in streams) or \
                        (not _streaming(arm) and context not in windows) or \
                        (arm == "transformer_lm" and context > (args.transformer_max_window or context)):
                    continue
                _report(rows, {"arm": arm, "mode": mode, "context": context}, arm, args)
            if mode == "train" and "fastformer_lm" in arms and context in chunk_windows:
                for size in chunk_sizes:
                    _report(rows, {"arm": "fastformer_lm", "mode": mode, "context": context, "chunk": size},
                            f"fastformer_lm (chunk {size})", args)
        for length in (int(x) for x in args.encoder_lengths.split(",") if x):
            _report(encoder_rows, {"kind": "encoder", "mode": mode, "context": length}, "summarizer encoder", args)
    generation = benchmark_generation.generation_rows(args, arms, run_worker) if "generate" in modes else []
    benchmark_more.add_transformer_ratios(rows)
    for group in (rows, encoder_rows):
        benchmark_more.add_own_ratios(group)
    breakdown = run_worker({"kind": "breakdown", "mode": "breakdown"}, args)
    if "error" in breakdown:
        print(f"long-term memory breakdown: {breakdown['error']}", flush=True)
        breakdown = {}
    paired = bench_paired.measure_all(args, arms, modes, run_worker)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = {"device": args.device, "precision": "fp16" if args.fp16 else "bf16" if args.bf16 else "fp32",
            "machine": _machine(args), "sizes": {k: getattr(args, k) for k in
                                                 ("layers", "width", "heads", "ffn", "vocab", "num_basis",
                                                  "segment", "paired_segments", "repeats", "warmup", "memory_limit_mb", "threads", "clock", "allocator",
                                                  "tokens_per_step")},
            "batching": (f"{args.tokens_per_step} tokens per training step (transformer_lm, fastformer_lm)"
                         if args.tokens_per_step else "batch 1")
            + (f"; paired memory on ÷ off at {', '.join(str(p['streams']) for p in paired)} stream(s) per step"
               if paired else "")}
    meta["sizes"]["paired_streams"] = [p["streams"] for p in paired]  # the counts measured
    table = benchmark_more.report(rows, encoder_rows, breakdown, meta, paired)
    if generation:
        table += "\n" + "\n".join(benchmark_generation.markdown_lines(generation))
    write_files(str(out / "benchmark.md"), table, str(out / "benchmark.json"),
                {"meta": meta, "rows": rows + generation, "encoder_rows": encoder_rows,
                 "ltm_breakdown_ms": breakdown, "ltm_paired": paired})
    benchmark_more.plot(rows, encoder_rows, out / "benchmark.png", meta, ARMS)
    print(table)
    print(f"wrote {out}/benchmark.md, benchmark.json, benchmark.png")


def _machine(args):
    import platform

    import torch
    if args.device == "cuda":
        return torch.cuda.get_device_name(0)
    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}"


if __name__ == "__main__":
    main()
