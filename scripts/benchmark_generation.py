"""Generation mode of scripts/benchmark.py (``--modes generate``; docs/generation.md,
docs/benchmark.md): milliseconds per generated token and the memory generation holds after a
prompt of each ``--prompts`` length, every arm with its own incremental decoding
(transformer_lm: fairseq's key/value cache; fastformer_lm: its constant carry;
infinite_former_lm: its segment caches, the prompt read in one call; the other two read it
token by token, so they stop at ``--token-prefill-max``).

Made for a machine shared with other jobs, whose load moves every measurement up or down by
up to 2× for seconds at a time. Two kinds of worker process per arm:

* **time** (one per arm, ``context`` = the list of its prompt lengths): reads the longest
  prompt once, keeping the incremental state after each shorter prompt on the way (the
  prompt-read time of each length is timed apart), then runs ``--warmup`` + ``--repeats``
  rounds; a round generates the same ``--gen-tokens`` greedy tokens from every prompt's state
  in turn (forward, then backward in the next round), one clock reading per block. Warm-up
  rounds are dropped; each prompt reports the median and the minimum over the rounds of the
  block's ms per token, and ``ms ÷ own first``: the median over the rounds of its block's time
  over the shortest prompt's block of the same round, so a change of load between rounds
  cancels. Every block starts from the same state: the state's dictionaries are copied, its
  tensors shared (no decoder changes a cached tensor in place: checked at the end).
* **memory** (one per arm and prompt, ``context`` = that length): a fresh process reads the
  prompt, then generates one block. It reports the peak memory above the built model while
  generating (the state the prompt left, what else of the read is still alive, what the steps
  allocate) and while reading the prompt, and the incremental state's own size after the
  prompt. CUDA: ``torch.cuda.max_memory_allocated``; CPU: the process's peak resident memory,
  reset through ``/proc/self/clear_refs`` after the C allocator has returned what was freed
  (``malloc_trim``), so that memory freed by the read does not count as generation's.

Every row carries its ratios to the same arm's shortest prompt; the goal lines compare the
first and the last prompt of each arm.
"""

import ctypes
import gc
import os
import resource
import statistics
from pathlib import Path

from fairseq_plugins.experiments import arms as arm_registry  # noqa: E402
from bench_memory import clock
from fairseq_plugins.report.table import Column, markdown

FLAT = 0.15  # the ∞-former's goal: per-token time and memory flat within ±15%


# ---- the worker's measurement ---------------------------------------------------------------


def _resident_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _release_freed_memory():
    """Give the memory the C allocator keeps after frees back to the system (glibc's
    ``malloc_trim``), so that the resident memory is what is in use; elsewhere a no-op."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _reset_peak_resident():
    """Reset the process's peak resident memory to the current one (Linux ≥ 4.0); False if refused."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _peak_resident_mb(reset):
    if not reset:  # the lifetime peak
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    with open("/proc/self/status") as f:
        line = next(line for line in f if line.startswith("VmHWM:"))
    return int(line.split()[1]) / 1024


class _Peak:
    """The peak memory since :meth:`start`, in MB above what was in use at the first start
    (CUDA: allocated tensors; CPU: resident memory, the allocator's free memory released)."""

    def __init__(self, device):
        import torch
        self.torch, self.device, self.base = torch, device, None

    def start(self):
        if self.device.type == "cuda":
            self.torch.cuda.synchronize()
            self.torch.cuda.reset_peak_memory_stats(self.device)
            now = self.torch.cuda.memory_allocated(self.device) / 2**20
        else:
            _release_freed_memory()
            self.reset = _reset_peak_resident()
            now = _resident_mb()
        self.base = now if self.base is None else self.base

    def peak(self):
        if self.device.type == "cuda":
            self.torch.cuda.synchronize()
            top = self.torch.cuda.max_memory_allocated(self.device) / 2**20
        else:
            top = _peak_resident_mb(self.reset)
        return max(top - self.base, 0.0)


def _copy_state(state):
    """A fresh incremental state over the same tensors (fairseq's states are dicts of dicts)."""
    return {key: dict(part) for key, part in state.items()}


def _tensors(state):
    return [t for part in state.values() for t in part.values() if t is not None]


def _fingerprint(state):
    """Which tensors the state holds and their version counters (an in-place change bumps it)."""
    return [(t.data_ptr(), t._version) for t in _tensors(state)]


def _prefill(model, arm, buf, state, start, end):
    """Read prompt tokens ``start..end`` into ``state`` (the first ``start`` are in it already)."""
    if arm.startswith("infinite_former_lm"):  # chunked prefill: the new tokens in one call
        model.decoder.prefill(buf[:, :end], state)
    else:  # their incremental decoders read the last token of the prefix only
        for stop in range(start + 1, end + 1):
            model.decoder(buf[:, :stop], incremental_state=state, features_only=True)


def _generate(model, tokens, prompt_len, gen, state):
    """``gen`` greedy tokens after ``tokens[:, :prompt_len + 1]``, written into ``tokens``."""
    for end in range(prompt_len + 1, prompt_len + gen + 1):
        logits, _ = model.decoder(tokens[:, :end], incremental_state=state)
        tokens[:, end] = logits[:, -1].argmax(-1)


def measure_generation(arm, context, args, build):
    """Runs in a worker (see the module docstring): ``context`` is a list of prompt lengths
    (the time worker) or one (the memory worker). ``build(arm, args, context)`` makes the
    model (bench_models.build)."""
    import torch

    torch.manual_seed(0)
    device = torch.device(args.device)
    prompts = sorted(context) if isinstance(context, list) else [context]
    gen = args.gen_tokens
    model = build(arm, args, prompts[-1] + gen + 1).to(device).eval()
    if args.fp16:
        model = model.half()
    buf = torch.randint(4, args.vocab, (1, prompts[-1] + gen + 1), device=device)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    with torch.no_grad():
        if isinstance(context, list):
            return _time_points(model, arm, buf, prompts, gen, args, sync)
        memory, state = _Peak(device), {}
        memory.start()
        _prefill(model, arm, buf, state, 0, context)
        prefill_peak = memory.peak()
        state_mb = sum(t.numel() * t.element_size() for t in _tensors(state)) / 2**20
        memory.start()
        _generate(model, buf, context, gen, state)
        peak = memory.peak()
    return {"state_mb": state_mb, "peak_mem_mb": peak, "prefill_peak_mb": prefill_peak,
            "params": sum(p.numel() for p in model.parameters())}


def _time_points(model, arm, buf, prompts, gen, args, sync):
    """The time worker's measurement (see the module docstring)."""
    import torch

    timer = clock(args.clock)
    snapshots, tokens, prefill, state, done, elapsed = {}, {}, {}, {}, 0, 0.0
    for prompt in prompts:
        t0 = timer()
        _prefill(model, arm, buf, state, done, prompt)
        sync()
        elapsed += timer() - t0
        prefill[prompt], done = elapsed, prompt
        snapshots[prompt] = _copy_state(state)
        tokens[prompt] = buf[:, :prompt + gen + 1].clone()
    fingerprints = {p: _fingerprint(s) for p, s in snapshots.items()}
    ms = {p: [] for p in prompts}
    generated = {}
    for round_ in range(args.warmup + args.repeats):
        for prompt in (prompts if round_ % 2 == 0 else prompts[::-1]):
            state = _copy_state(snapshots[prompt])
            t0 = timer()
            _generate(model, tokens[prompt], prompt, gen, state)
            sync()
            seconds = timer() - t0
            out = tokens[prompt][:, prompt + 1:].clone()
            if generated.setdefault(prompt, out).shape != out.shape or not torch.equal(generated[prompt], out):
                raise RuntimeError(f"{arm}: round {round_} generated other tokens from the same state")
            if round_ >= args.warmup:
                ms[prompt].append(1000 * seconds / gen)
    if {p: _fingerprint(s) for p, s in snapshots.items()} != fingerprints:
        raise RuntimeError(f"{arm}: the decoder changed its cached tensors in place; copy them per block")
    first = ms[prompts[0]]
    return {"points": [{"context": p, "ms_per_token": statistics.median(ms[p]), "ms_per_token_min": min(ms[p]),
                        "ms_vs_first": statistics.median([a / b for a, b in zip(ms[p], first)]),
                        "tokens_per_s": 1000 / statistics.median(ms[p]), "prefill_s": prefill[p],
                        "gen_tokens": gen, "repeats": args.repeats} for p in prompts]}


# ---- the driver: rows, ratios, table, plot --------------------------------------------------


def add_ratios(rows):
    """Each row's peak and state over its arm's at the shortest prompt measured (a peak or
    state below 1 MB there: no ratio, it is noise); ``ms_vs_first`` comes from the time worker."""
    first = {}
    for row in rows:
        if "error" in row:
            continue
        ref = first.setdefault(row["arm"], row)
        for key, ratio in (("peak_mem_mb", "peak_vs_first"), ("state_mb", "state_vs_first")):
            if ref[key] >= 1.0:
                row[ratio] = row[key] / ref[key]


def goal_lines(rows):
    """One line per arm: its ms/token, peak and state from its first to its last prompt."""
    lines = []
    for arm in dict.fromkeys(r["arm"] for r in rows):
        done = [r for r in rows if r["arm"] == arm and "error" not in r]
        if len(done) < 2:
            continue
        a, b = done[0], done[-1]
        peak = (f"×{b['peak_vs_first']:.2f}" if "peak_vs_first" in b
                else f"{a['peak_mem_mb']:.1f} → {b['peak_mem_mb']:.1f} MB")
        text = (f"- {arm}, prompt {a['context']} → {b['context']}: ms/token ×{b['ms_vs_first']:.2f} (min "
                f"×{b['ms_per_token_min'] / a['ms_per_token_min']:.2f}), peak {peak}, state "
                f"{a['state_mb']:.2f} → {b['state_mb']:.2f} MB")
        if arm.startswith("infinite_former_lm"):
            ratios = [r["ms_vs_first"] for r in done] + [r["peak_vs_first"] for r in done if "peak_vs_first" in r]
            met = all(abs(x - 1) <= FLAT for x in ratios)
            text += f"; goal: flat within ±{FLAT:.0%} at every prompt: {'met' if met else 'NOT met'}"
        lines.append(text)
    return lines


def generation_rows(args, arms, run_worker):
    """Per arm, one time worker over its prompts and one memory worker per prompt: the rows
    of the generate table (arm by arm, prompts in order), with their ratios; also writes
    OUT/benchmark_generation.png."""
    prompts = sorted(int(x) for x in args.prompts.split(","))
    rows = []
    for arm in (a for a in arm_registry.names("benchmark") if a in arms and a != "infinite_former_lm (LTM off)"):
        fits = [p for p in prompts if arm.startswith("infinite") or p <= args.token_prefill_max]
        timed = run_worker({"arm": arm, "mode": "generate", "context": fits}, args) if fits else {"points": []}
        points = {p["context"]: p for p in timed.get("points", [])}
        arm_rows = []
        for prompt in prompts:
            if prompt not in fits:
                result = {"error": f"not run: token-by-token prompt > --token-prefill-max {args.token_prefill_max}"}
            elif "error" in timed:
                result = {"error": timed["error"]}
            else:
                memory = run_worker({"arm": arm, "mode": "generate", "context": prompt}, args)
                result = memory if "error" in memory else {**points[prompt], **memory}
            arm_rows.append({"mode": "generate", "context": prompt, "arm": arm, **result})
        add_ratios(arm_rows)
        for row in arm_rows:
            print(f"generate {row['context']:6d} {arm:30s} " + (
                f"{row['ms_per_token']:8.2f} ms/token (min {row['ms_per_token_min']:.2f}, ÷ first "
                f"{row['ms_vs_first']:.2f}), state {row['state_mb']:8.2f} MB, peak {row['peak_mem_mb']:8.1f} MB, "
                f"prompt read in {row['prefill_s']:.1f} s" if "error" not in row else row["error"]), flush=True)
        rows += arm_rows
    plot(rows, Path(args.out) / "benchmark_generation.png")
    return rows


def _ratio(value):
    return f"{value:.2f}"


GENERATION_COLUMNS = [Column("context", "prompt"), Column("arm", "arm"),
                      Column("ms_per_token", "ms / token (median)", ".2f"),
                      Column("ms_per_token_min", "ms / token (min)", ".2f"),
                      Column("ms_vs_first", "ms ÷ own first", _ratio),
                      Column("state_mb", "incremental state MB", ".2f"), Column("peak_mem_mb", "peak MB", ".1f"),
                      Column("peak_vs_first", "peak ÷ own first", _ratio, missing="—"),
                      Column("prefill_s", "prompt read (s)", ".1f"),
                      Column("prefill_peak_mb", "prompt read peak MB", ".1f")]


def markdown_lines(rows):
    """The generate table (a failed measurement: its error in the ms/token column) and the goal lines."""
    shown = [{"context": r["context"], "arm": r["arm"], "ms_per_token": r["error"]} if "error" in r else r
             for r in rows]
    done = [r for r in rows if "error" not in r]
    how = (f"{done[0]['gen_tokens']} greedy tokens per block; median and min over {done[0]['repeats']} rounds, "
           "each generating from every prompt's state in turn (warm-up rounds dropped); ms ÷ own first: the "
           "median over the rounds of the block's time over the shortest prompt's in the same round; peak: "
           "above the built model, while generating (a fresh process per prompt)" if done else "nothing measured")
    return ["### generate (incremental decoding after a prompt)", "", how, "",
            markdown(shown, GENERATION_COLUMNS), "", *goal_lines(rows), ""]


def plot(rows, path):
    """ms/token and peak MB against the prompt length, one line per arm."""
    import logging

    import matplotlib
    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, (key, label) in zip(axes, [("ms_per_token", "ms / generated token (median)"),
                                       ("peak_mem_mb", "peak MB while generating")]):
        for arm in dict.fromkeys(r["arm"] for r in rows):
            pts = [(r["context"], r[key]) for r in rows if r["arm"] == arm and "error" not in r]
            if pts:
                ax.plot(*zip(*pts), marker="o", label=arm)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("prompt tokens")
        ax.set_ylabel(label)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
