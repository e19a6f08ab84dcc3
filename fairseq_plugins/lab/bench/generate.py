"""``fairseq-longmem bench generate``: generation after a long prompt (docs/benchmark.md,
docs/generation.md).

Milliseconds per generated token and the memory generation holds after a prompt of each
``--prompts`` length, every arm with its own incremental decoding (transformer_lm: fairseq's
key/value cache; fastformer_lm: its constant carry; infinite_former_lm: its segment caches,
the prompt read in one call; the other two read it token by token, so they stop at
``--token-prefill-max``). The memory-off twin of the ∞-former is not measured.

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
  cancels. Every block starts from a copy of the same state (the ∞-former writes its segment
  buffers in place, docs/generation.md; the copy is not timed), and every round must generate
  the same tokens from it.
* **memory** (one per arm and prompt, ``context`` = that length): a fresh process reads the
  prompt, then generates one block. It reports the peak memory above the built model while
  generating (the state the prompt left, what else of the read is still alive, what the steps
  allocate) and while reading the prompt, and the incremental state's own size after the
  prompt (:class:`fairseq_plugins.lab.bench.resources.Peak`).

Every row carries its ratios to the same arm's shortest prompt; the goal lines compare the
first and the last prompt of each arm.
"""

import statistics
from typing import Dict, List, Union

from fairseq_plugins.lab.bench import report
from fairseq_plugins.lab.bench import worker
from fairseq_plugins.lab.bench.models import arm_names, build, is_streaming, memory_off
from fairseq_plugins.lab.bench.resources import Peak, clock, synchronize
from fairseq_plugins.errors import ConfigError
from fairseq_plugins.lab.common.table import Column, markdown

FLAT = 0.15  # the ∞-former's goal: per-token time and memory flat within ±15%


def generating_arms() -> List[str]:
    """The arms this measurement runs: every benchmark arm but the memory-off twin."""
    return [a for a in arm_names() if not memory_off(a)]


def check(args) -> None:
    """Refuse an arm this measurement does not run (ConfigError, one line)."""
    unknown = [a for a in args.arms.split(",") if a not in generating_arms()]
    if unknown:
        raise ConfigError(f"unknown arm {', '.join(unknown)}; arms: {', '.join(generating_arms())}")


def builders(args) -> Dict:
    """``{arm: build}`` of every arm this run builds, at its shortest prompt (each is built once
    before measuring: :func:`fairseq_plugins.lab.bench.models.refuse_unbuildable`)."""
    shortest = min(int(x) for x in args.prompts.split(",") if x)
    return {arm: (lambda arm=arm: build(arm, args, shortest + args.gen_tokens + 1))
            for arm in generating_arms() if arm in args.arms.split(",")}


# ---- the worker's measurement ---------------------------------------------------------------


def _copy_state(state):
    """A copy of an incremental state (fairseq's states are dicts of dicts of tensors)."""
    return {key: {name: t.clone() if t is not None else None for name, t in part.items()}
            for key, part in state.items()}


def _tensors(state):
    return [t for part in state.values() for t in part.values() if t is not None]


def _prefill(model, arm, buf, state, start, end):
    """Read prompt tokens ``start..end`` into ``state`` (the first ``start`` are in it already)."""
    if is_streaming(arm):  # chunked prefill: the new tokens in one call
        model.decoder.prefill(buf[:, :end], state)
    else:  # their incremental decoders read the last token of the prefix only
        for stop in range(start + 1, end + 1):
            model.decoder(buf[:, :stop], incremental_state=state, features_only=True)


def _generate(model, tokens, prompt_len, gen, state):
    """``gen`` greedy tokens after ``tokens[:, :prompt_len + 1]``, written into ``tokens``."""
    for end in range(prompt_len + 1, prompt_len + gen + 1):
        logits, _ = model.decoder(tokens[:, :end], incremental_state=state)
        tokens[:, end] = logits[:, -1].argmax(-1)


def measure(args, arm: str, context: Union[int, List[int]]) -> Dict:
    """In a worker (see the module docstring): ``context`` is a list of prompt lengths (the time
    worker: ``{"points": [...]}``) or one (the memory worker: ``{"state_mb", "peak_mem_mb",
    "prefill_peak_mb", "params"}``)."""
    import torch

    torch.manual_seed(0)
    device = torch.device(args.device)
    prompts = sorted(context) if isinstance(context, list) else [context]
    gen = args.gen_tokens
    model = build(arm, args, prompts[-1] + gen + 1).to(device).eval()
    if args.fp16:
        model = model.half()
    buf = torch.randint(4, args.vocab, (1, prompts[-1] + gen + 1), device=device)

    with torch.no_grad():
        if isinstance(context, list):
            return _time_points(model, arm, buf, prompts, gen, args, device)
        memory, state = Peak(device), {}
        memory.start()
        _prefill(model, arm, buf, state, 0, context)
        prefill_peak = memory.peak()
        state_mb = sum(t.numel() * t.element_size() for t in _tensors(state)) / 2**20
        memory.start()
        _generate(model, buf, context, gen, state)
        peak = memory.peak()
    return {"state_mb": state_mb, "peak_mem_mb": peak, "prefill_peak_mb": prefill_peak,
            "params": sum(p.numel() for p in model.parameters())}


def _time_points(model, arm, buf, prompts, gen, args, device):
    """The time worker's measurement (see the module docstring)."""
    import torch

    timer = clock(args.clock)
    snapshots, tokens, prefill, state, done, elapsed = {}, {}, {}, {}, 0, 0.0
    for prompt in prompts:
        t0 = timer()
        _prefill(model, arm, buf, state, done, prompt)
        synchronize(device)
        elapsed += timer() - t0
        prefill[prompt], done = elapsed, prompt
        snapshots[prompt] = _copy_state(state)
        tokens[prompt] = buf[:, :prompt + gen + 1].clone()
    ms = {p: [] for p in prompts}
    generated = {}
    for round_ in range(args.warmup + args.repeats):
        for prompt in (prompts if round_ % 2 == 0 else prompts[::-1]):
            state = _copy_state(snapshots[prompt])
            t0 = timer()
            _generate(model, tokens[prompt], prompt, gen, state)
            synchronize(device)
            seconds = timer() - t0
            out = tokens[prompt][:, prompt + 1:].clone()
            if generated.setdefault(prompt, out).shape != out.shape or not torch.equal(generated[prompt], out):
                raise RuntimeError(f"{arm}: round {round_} generated other tokens from the same state")
            if round_ >= args.warmup:
                ms[prompt].append(1000 * seconds / gen)
    first = ms[prompts[0]]
    return {"points": [{"context": p, "ms_per_token": statistics.median(ms[p]), "ms_per_token_min": min(ms[p]),
                        "ms_vs_first": statistics.median([a / b for a, b in zip(ms[p], first)]),
                        "tokens_per_s": 1000 / statistics.median(ms[p]), "prefill_s": prefill[p],
                        "gen_tokens": gen, "repeats": args.repeats} for p in prompts]}


# ---- the parent: rows, ratios, table, plot --------------------------------------------------


def add_ratios(rows: List[Dict]) -> None:
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


def goal_lines(rows: List[Dict]) -> List[str]:
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
        if is_streaming(arm):
            ratios = [r["ms_vs_first"] for r in done] + [r["peak_vs_first"] for r in done if "peak_vs_first" in r]
            met = all(abs(x - 1) <= FLAT for x in ratios)
            text += f"; goal: flat within ±{FLAT:.0%} at every prompt: {'met' if met else 'NOT met'}"
        lines.append(text)
    return lines


def measure_all(args) -> List[Dict]:
    """Per arm, one time worker over its prompts and one memory worker per prompt: the rows
    of the generate table (arm by arm, prompts in order), with their ratios, each printed."""
    prompts = sorted(int(x) for x in args.prompts.split(","))
    arms = args.arms.split(",")
    rows = []
    for arm in (a for a in generating_arms() if a in arms):
        fits = [p for p in prompts if is_streaming(arm) or p <= args.token_prefill_max]
        timed = worker.run(measure, args, arm=arm, context=fits) if fits else {"points": []}
        points = {p["context"]: p for p in timed.get("points", [])}
        arm_rows = []
        for prompt in prompts:
            if prompt not in fits:
                result = {"error": f"not run: token-by-token prompt > --token-prefill-max {args.token_prefill_max}"}
            elif "error" in timed:
                result = {"error": timed["error"]}
            else:
                memory = worker.run(measure, args, arm=arm, context=prompt)
                result = memory if "error" in memory else {**points[prompt], **memory}
            arm_rows.append({"mode": "generate", "context": prompt, "arm": arm, **result})
        add_ratios(arm_rows)
        for row in arm_rows:
            print(f"generate {row['context']:6d} {arm:30s} " + (
                f"{row['ms_per_token']:8.2f} ms/token (min {row['ms_per_token_min']:.2f}, ÷ first "
                f"{row['ms_vs_first']:.2f}), state {row['state_mb']:8.2f} MB, peak {row['peak_mem_mb']:8.1f} MB, "
                f"prompt read in {row['prefill_s']:.1f} s" if "error" not in row else row["error"]), flush=True)
        rows += arm_rows
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


def markdown_lines(rows: List[Dict]) -> List[str]:
    """The generate table (a failed measurement: its error in the ms/token column) and the goal lines."""
    shown = report.shown(rows, "ms_per_token", keep=("context", "arm"))
    done = [r for r in rows if "error" not in r]
    how = (f"{done[0]['gen_tokens']} greedy tokens per block; median and min over {done[0]['repeats']} rounds, "
           "each generating from every prompt's state in turn (warm-up rounds dropped); ms ÷ own first: the "
           "median over the rounds of the block's time over the shortest prompt's in the same round; peak: "
           "above the built model, while generating (a fresh process per prompt)" if done else "nothing measured")
    return ["### generate (incremental decoding after a prompt)", "", how, "",
            markdown(shown, GENERATION_COLUMNS), "", *goal_lines(rows), ""]


def panels(rows: List[Dict]) -> List[report.Panel]:
    """ms/token and peak MB against the prompt length, one line per arm."""
    return [report.Panel(report.series(rows, key), "prompt tokens", label, legend=first, ylim_zero=True)
            for first, (key, label) in zip((True, False), [("ms_per_token", "ms / generated token (median)"),
                                                           ("peak_mem_mb", "peak MB while generating")])]


def run(args) -> report.Result:
    """Measure every arm and prompt (printing each row) and return generate.{md,json,png}."""
    rows = measure_all(args)
    info = report.meta(args, "batch 1")
    table = "\n".join([report.header(info), "", *markdown_lines(rows)])
    return report.Result(table, {"meta": info, "rows": rows}, panels(rows), dpi=120)
