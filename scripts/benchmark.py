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

Mode ``generate`` (``--modes generate``; docs/generation.md): milliseconds per generated
token and the incremental state's size after a prompt of each ``--prompts`` length, every
arm with its own incremental decoding (transformer_lm: fairseq's key/value cache;
fastformer_lm: its constant carry; infinite_former_lm: its segment caches). The
∞-former reads the prompt in one call (chunked prefill); the other two take it token by
token (their incremental decoders use only the last token), so they stop at
``--token-prefill-max``. ``--gen-tokens`` greedy steps are timed after the prompt.

Writes OUT/benchmark.md (tables), OUT/benchmark.json and OUT/benchmark.png (matplotlib),
plus a breakdown of the ∞-former's per-segment memory cost (gate, update, read).
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import arms as arm_registry  # noqa: E402
from results_table import Column, markdown, write_files  # noqa: E402

ARMS = arm_registry.names("benchmark")


def _streaming(arm: str) -> bool:
    """Whether the arm reads a stream segment by segment with its memory carried (the ∞-former)."""
    return arm_registry.get_arm("benchmark", arm).task == "streaming_lm"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
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
    p.add_argument("--repeats", type=int, default=3, help="timed repeats per measurement (the median is reported)")
    p.add_argument("--warmup", type=int, default=1, help="untimed repeats before them")
    p.add_argument("--timeout", type=float, default=600, help="seconds per measurement")
    p.add_argument("--memory-limit-mb", type=float, default=None,
                   help="memory budget of each measurement above the built model and its input, in MB; "
                        "beyond it the row reads OOM. CUDA: torch.cuda.set_per_process_memory_fraction; "
                        "CPU: an address-space limit (RLIMIT_AS) over the worker's size once the model is "
                        "built, so allocations past it fail for real (approximate: it counts address space, "
                        "not resident memory)")
    p.add_argument("--arms", default=",".join(ARMS), help="comma-separated subset of the arms to measure")
    p.add_argument("--modes", default="train,infer", help="comma-separated subset of train,infer")
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
    if args.memory_limit_mb is not None and args.memory_limit_mb <= 0:
        p.error("--memory-limit-mb must be positive")
    if args.quick:  # smaller defaults; options given explicitly still win
        quick = dict(windows="128,256", streams="256,1024", segment=64, repeats=2, warmup=1, vocab=500, num_basis=16)
        for name, value in quick.items():
            if getattr(args, name) == p.get_default(name):
                setattr(args, name, value)
    return args


# ---- models ---------------------------------------------------------------------------


def build(arm, args, context):
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
        cfg = FastformerLMConfig(tokens_per_sample=context, max_target_positions=context, **sizes)
        return FastformerLanguageModel.build_model(cfg, task)
    from fairseq_plugins.models.infinite_former_lm import InfiniteFormerLanguageModel, InfiniteFormerLMConfig
    cfg = InfiniteFormerLMConfig(segment_length=args.segment, mem_len=args.segment,
                                 num_basis_functions=args.num_basis, num_samples=args.num_basis,
                                 no_long_term_memory=spec.model_flags["no_long_term_memory"], **sizes)
    return InfiniteFormerLanguageModel.build_model(cfg, task)


def _rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _address_space_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def apply_memory_limit(limit_mb, device):
    """Make allocations beyond ``limit_mb`` MB (above what the process holds now) fail."""
    import torch

    if device.type == "cuda":
        total = torch.cuda.get_device_properties(device).total_memory
        fraction = (torch.cuda.memory_allocated(device) + limit_mb * 2**20) / total
        torch.cuda.set_per_process_memory_fraction(min(fraction, 1.0), device)
        return
    torch.ones(64, 64) @ torch.ones(64, 64)  # start the thread pool (its stacks count) first
    limit = int((_address_space_mb() + limit_mb) * 2**20)
    resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))


def is_out_of_memory(err) -> bool:
    """CUDA out-of-memory, a CPU allocator failure or Python's MemoryError."""
    import torch

    if isinstance(err, (MemoryError, torch.cuda.OutOfMemoryError)):
        return True
    text = str(err).lower()
    return isinstance(err, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text)


def measure(arm, mode, context, args):
    """Runs in a worker process; returns tokens/s (median) and peak memory in MB."""
    import torch

    torch.manual_seed(0)
    device = torch.device(args.device)
    model = build(arm, args, context).to(device)
    if args.fp16:
        model = model.half()
    model.train(mode == "train")
    tokens = torch.randint(4, args.vocab, (1, context), device=device)
    streaming = _streaming(arm)
    chunk = args.segment if streaming else context
    if args.memory_limit_mb is not None:
        apply_memory_limit(args.memory_limit_mb, device)

    def run_once():
        if streaming:
            model.reset_memory("bench")
        for start in range(0, context, chunk):
            x = tokens[:, start:start + chunk]
            with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=args.bf16), \
                    torch.set_grad_enabled(mode == "train"):
                kwargs = {"memory_key": "bench"} if streaming else {}
                logits, _ = model(x, **kwargs)
                loss = logits.float().logsumexp(-1).mean()
            if mode == "train":
                loss.backward()
                model.zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.synchronize()

    # memory above what the built model and its input hold (CPU: the process's peak resident
    # memory, which the warm-up reaches as well as the timed repeats)
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        base = _rss_mb()
    for _ in range(args.warmup):
        run_once()
    times = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        run_once()
        times.append(time.perf_counter() - t0)
    if device.type == "cuda":
        peak = (torch.cuda.max_memory_allocated() - base) / 2**20
    else:
        peak = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - base, 0.0)
    return {"tokens_per_s": context / statistics.median(times), "peak_mem_mb": peak,
            "params": sum(p.numel() for p in model.parameters())}


def measure_generation(arm, prompt_len, args):
    """Runs in a worker: ms per generated token (median over ``--gen-tokens`` greedy steps after
    a prompt of ``prompt_len`` tokens), the incremental state's size, the prefill time."""
    import torch

    torch.manual_seed(0)
    device = torch.device(args.device)
    total = prompt_len + args.gen_tokens + 1
    model = build(arm, args, total).to(device).eval()
    if args.fp16:
        model = model.half()
    buf = torch.randint(4, args.vocab, (1, total), device=device)
    base = _rss_mb()
    state = {}

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    with torch.no_grad():
        t0 = time.perf_counter()
        if arm.startswith("infinite_former_lm"):  # chunked prefill: the whole prompt in one call
            model.decoder(buf[:, :prompt_len], incremental_state=state, features_only=True)
        else:  # their incremental decoders read the last token of the prefix only
            for end in range(1, prompt_len + 1):
                model.decoder(buf[:, :end], incremental_state=state, features_only=True)
        sync()
        prefill = time.perf_counter() - t0
        times = []
        for end in range(prompt_len + 1, prompt_len + args.gen_tokens + 1):
            t0 = time.perf_counter()
            logits, _ = model.decoder(buf[:, :end], incremental_state=state)
            buf[:, end] = logits[:, -1].argmax(-1)
            sync()
            times.append(time.perf_counter() - t0)
    numbers = sum(t.numel() for part in state.values() for t in part.values() if t is not None)
    peak = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - base, 0.0)
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated() / 2**20
    return {"ms_per_token": 1000 * statistics.median(times), "tokens_per_s": 1 / statistics.median(times),
            "state_mb": numbers * 4 / 2**20, "prefill_s": prefill, "peak_mem_mb": peak,
            "params": sum(p.numel() for p in model.parameters())}


def ltm_breakdown(args):
    """Per-segment milliseconds of the ∞-former's LTM parts in one layer (forward)."""
    import torch
    from fairseq_plugins.modules.long_term_memory import LongTermMemory

    device = torch.device(args.device)
    ltm = LongTermMemory(args.width, args.heads, num_basis=args.num_basis, basis_widths=(0.005, 0.01),
                         num_samples=args.num_basis).to(device)
    chunk = torch.randn(args.segment, 1, args.width, device=device)
    valid = torch.ones(1, dtype=torch.bool, device=device)
    # two steps of the memory's own protocol: B fitted, the last read's Gaussians kept (sticky)
    state = ltm.empty_state(1, device)
    for _ in range(2):
        state = ltm.step(chunk, state, chunk).state
    parts = {
        "gate (Conv1d + sigmoid)": lambda: ltm.smooth(chunk),
        "update (sample, contract, re-fit; gate included)": lambda: ltm.update(state, chunk, valid),
        "read (continuous attention)": lambda: ltm(chunk, state),
    }
    out = {}
    with torch.no_grad():
        for name, fn in parts.items():
            for _ in range(2):
                fn()
            times = []
            for _ in range(max(args.repeats, 5)):
                if device.type == "cuda":
                    torch.cuda.synchronize()
                t0 = time.perf_counter()
                fn()
                if device.type == "cuda":
                    torch.cuda.synchronize()
                times.append(time.perf_counter() - t0)
            out[name] = 1000 * statistics.median(times)
    return out


# ---- driver ---------------------------------------------------------------------------


def run_worker(job, args):
    cmd = [sys.executable, __file__, "--worker", json.dumps(job)] + _passthrough(args)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timeout > {args.timeout:.0f}s"}
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
           "--num-basis", str(args.num_basis), "--segment", str(args.segment),
           "--repeats", str(args.repeats), "--warmup", str(args.warmup), "--gen-tokens", str(args.gen_tokens)]
    if args.memory_limit_mb is not None:
        out += ["--memory-limit-mb", str(args.memory_limit_mb)]
    if args.threads is not None:
        out += ["--threads", str(args.threads)]
    return out + (["--fp16"] if args.fp16 else []) + (["--bf16"] if args.bf16 else [])


def main(argv=None):
    args = parse_args(argv)
    if args.worker:
        job = json.loads(args.worker)
        if args.threads is not None:
            import torch
            torch.set_num_threads(args.threads)
        try:
            if job["mode"] == "generate":
                result = measure_generation(job["arm"], job["context"], args)
            else:
                result = measure(job["arm"], job["mode"], job["context"], args)
        except (RuntimeError, MemoryError) as err:  # CUDA/CPU allocation failures
            if not is_out_of_memory(err):
                raise
            result = {"error": "OOM"}
        print(json.dumps(result))
        return
    windows = [int(x) for x in args.windows.split(",")]
    streams = [int(x) for x in args.streams.split(",")]
    contexts = sorted(set(windows) | set(streams))
    rows = []
    arms, modes = args.arms.split(","), args.modes.split(",")
    for mode in ("train", "infer"):
        if mode not in modes:
            continue
        for context in contexts:
            for arm in (a for a in ARMS if a in arms):
                if (_streaming(arm) and context not in streams) or \
                        (not _streaming(arm) and context not in windows):
                    continue
                result = run_worker({"arm": arm, "mode": mode, "context": context}, args)
                rows.append({"mode": mode, "context": context, "arm": arm, **result})
                print(f"{mode:5s} {context:6d} {arm:30s} " + (
                    f"{result['tokens_per_s']:10.0f} tok/s {result['peak_mem_mb']:9.1f} MB"
                    if "error" not in result else result["error"]), flush=True)
    if "generate" in modes:
        rows += generation_rows(args, arms)
    _add_ratios(rows)
    breakdown = ltm_breakdown(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = {"device": args.device, "precision": "fp16" if args.fp16 else "bf16" if args.bf16 else "fp32",
            "machine": _machine(args), "sizes": {k: getattr(args, k) for k in
                                                 ("layers", "width", "heads", "ffn", "vocab", "num_basis",
                                                  "segment", "repeats", "warmup", "memory_limit_mb", "threads")}}
    table = _markdown(rows, breakdown, meta)
    write_files(str(out / "benchmark.md"), table, str(out / "benchmark.json"),
                {"meta": meta, "rows": rows, "ltm_breakdown_ms": breakdown})
    _plot(rows, out / "benchmark.png", meta)
    print(table)
    print(f"wrote {out}/benchmark.md, benchmark.json, benchmark.png")


def generation_rows(args, arms):
    rows = []
    for prompt_len in (int(x) for x in args.prompts.split(",")):
        for arm in (a for a in ARMS if a in arms and a != "infinite_former_lm (LTM off)"):
            if not arm.startswith("infinite") and prompt_len > args.token_prefill_max:
                result = {"error": f"not run: token-by-token prompt > --token-prefill-max {args.token_prefill_max}"}
            else:
                result = run_worker({"arm": arm, "mode": "generate", "context": prompt_len}, args)
            rows.append({"mode": "generate", "context": prompt_len, "arm": arm, **result})
            print(f"generate {prompt_len:6d} {arm:30s} " + (
                f"{result['ms_per_token']:8.2f} ms/token, state {result['state_mb']:8.2f} MB, "
                f"peak {result['peak_mem_mb']:8.1f} MB, prompt read in {result['prefill_s']:.1f} s"
                if "error" not in result else result["error"]), flush=True)
    return rows


GENERATION_COLUMNS = [Column("context", "prompt"), Column("arm", "arm"), Column("ms_per_token", "ms / token", ".2f"),
                      Column("state_mb", "incremental state MB", ".2f"), Column("peak_mem_mb", "peak MB", ".1f"),
                      Column("prefill_s", "prompt read (s)", ".1f")]


def _generation_markdown(rows):
    # a failed measurement: its error in the ms/token column, the others empty
    shown = [{"context": r["context"], "arm": r["arm"], "ms_per_token": r["error"], "state_mb": "",
              "peak_mem_mb": "", "prefill_s": ""} if "error" in r else r for r in rows]
    return ["### generate (incremental decoding after a prompt)", "", markdown(shown, GENERATION_COLUMNS), ""]


def _add_ratios(rows):
    for row in rows:
        ref = next((r for r in rows if r["arm"] == "transformer_lm" and r["mode"] == row["mode"]
                    and r["context"] == row["context"] and "error" not in r), None)
        if ref is not None and "error" not in row:
            row["speed_vs_transformer"] = row["tokens_per_s"] / ref["tokens_per_s"]
            if ref["peak_mem_mb"] >= 1.0:  # below 1 MB the ratio is noise
                row["memory_vs_transformer"] = row["peak_mem_mb"] / ref["peak_mem_mb"]


def _machine(args):
    import platform

    import torch
    if args.device == "cuda":
        return torch.cuda.get_device_name(0)
    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}"


RATIO = {"fmt": ".2f", "missing": "—"}
COLUMNS = [Column("context", "context"), Column("arm", "arm"), Column("tokens_per_s", "tokens/s", ".0f"),
           Column("peak_mem_mb", "peak MB", ".1f"),
           Column("speed_vs_transformer", "speed ÷ transformer_lm", **RATIO),
           Column("memory_vs_transformer", "memory ÷ transformer_lm", **RATIO)]


def _markdown(rows, breakdown, meta):
    lines = [f"Machine: {meta['machine']}; precision {meta['precision']}; sizes {meta['sizes']}", ""]
    for mode in (m for m in ("train", "infer") if any(r["mode"] == m for r in rows)):
        # a failed measurement: its error in the tokens/s column, the others empty
        shown = [{"context": r["context"], "arm": r["arm"], "tokens_per_s": r["error"], "peak_mem_mb": "",
                  "speed_vs_transformer": "", "memory_vs_transformer": ""} if "error" in r else r
                 for r in rows if r["mode"] == mode]
        lines += [f"### {mode} ({'forward + backward' if mode == 'train' else 'forward only'})", "",
                  markdown(shown, COLUMNS), ""]
    if any(r["mode"] == "generate" for r in rows):
        lines += _generation_markdown([r for r in rows if r["mode"] == "generate"])
    lines += ["### ∞-former long-term memory, one layer, one segment (forward, ms)", "",
              markdown([{"part": k, "ms": v} for k, v in breakdown.items()],
                       [Column("part", "part"), Column("ms", "ms", ".2f")])]
    return "\n".join(lines) + "\n"


def _plot(rows, path, meta):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, (key, label) in zip(axes, [("tokens_per_s", "training tokens/s"), ("peak_mem_mb", "training peak MB")]):
        for arm in ARMS:
            pts = [(r["context"], r[key]) for r in rows if r["arm"] == arm and r["mode"] == "train"
                   and "error" not in r]
            if pts:
                ax.plot(*zip(*pts), marker="o", label=arm)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("context (window; ∞-former: stream consumed)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"{meta['machine']} ({meta['precision']})", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
