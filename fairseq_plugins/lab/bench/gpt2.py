"""``fairseq-longmem bench gpt2``: GPT-2 with the ∞-former's memory against transformers' GPT-2,
side by side (docs/benchmark.md, "GPT-2 against transformers").

One random GPT-2 (``GPT2Config`` at ``--layers``/``--width``/``--heads``/``--vocab``/``--positions``,
by default GPT-2 small) is saved and converted by the project's converter; the arms
(:mod:`~fairseq_plugins.lab.bench.gpt2_models`: transformers' ``GPT2LMHeadModel`` and
``infinite_former_gpt2`` with the memory off and on) then run on the same weights, the same
tokens, the same precision and threads. A first worker builds, converts and checks that the
fairseq models read GPT-2's ids as transformers does and that their logits agree within 1e-4;
nothing is timed unless they do. Then (:mod:`~fairseq_plugins.lab.bench.gpt2_measure`):

* ``train``: tokens/s of forward + backward + AdamW step on blocks of ``--segment`` tokens,
  ``--tokens-per-step`` per step, every arm in one process, alternating;
* ``generate``: ms per greedy token (batch 1) after each prompt of ``--prompts`` and seconds to
  read the prompt; transformers keeps the end of a prompt longer than its window;
* ``memory``: each arm's peak memory while reading, generating and training, one process per arm.

Writes OUT/gpt2.md, OUT/gpt2.json (``meta``, ``checked``, ``train``, ``generate``, ``goals``) and
OUT/gpt2.png.
"""

import tempfile
from typing import Dict, List

from fairseq_plugins.lab.bench import flops as flop_count
from fairseq_plugins.lab.bench import gpt2_measure
from fairseq_plugins.lab.bench import gpt2_models
from fairseq_plugins.lab.bench import report
from fairseq_plugins.lab.bench import worker
from fairseq_plugins.errors import ConfigError
from fairseq_plugins.lab.common.table import Column, markdown

PARTS = ("train", "generate", "memory")
# --quick: tiny sizes (the values the shared --quick leaves alone; options given explicitly win)
QUICK = dict(layers=2, width=64, heads=4, positions=64, tokens_per_step=128, gen_tokens=8)
DEFAULTS = dict(layers=12, width=768, heads=12, vocab=50257, positions=1024, num_basis=512, segment=1024,
                tokens_per_step=2048, gen_tokens=16, prompts="256,1024,4096,16384,65536", models="hf,off,on",
                parts="train,generate,memory", timeout=7200)
# the goals of docs/benchmark.md, as (arm, table, key, bound, at least?)
GOALS = [("off", "train", "vs_hf", 1.05, True), ("on", "train", "vs_hf", 0.9, True),
         ("off", "generate", "vs_hf", 1.0, False), ("on", "generate", "vs_hf", 1.2, False)]
FLAT = 0.15  # memory on: ms per token after the longest prompt within ±15% of after --segment tokens


def _names(text: str, known, what: str) -> List[str]:
    names = [x for x in str(text).split(",") if x]
    unknown = [x for x in names if x not in known]
    if unknown or not names:
        raise ConfigError(f"unknown {what} {', '.join(unknown) or repr(text)}; {what}s: {', '.join(known)}")
    return [x for x in known if x in names]


def check(args) -> None:
    """Apply ``--quick``'s sizes; refuse in one line (ConfigError) an unknown model or part, a
    block or a generation longer than the models hold, a step that is no whole number of blocks
    (``--device cuda`` without CUDA is the shared check of every verb). Sets ``args.models``/``args.parts`` to lists."""
    if args.quick:
        for name, value in QUICK.items():
            if getattr(args, name) == DEFAULTS[name]:
                setattr(args, name, value)
    args.models = _names(args.models, gpt2_models.ARMS, "model")
    args.parts = _names(args.parts, PARTS, "part")
    for name in ("layers", "width", "heads", "vocab", "positions", "num_basis"):
        if getattr(args, name) <= 0:
            raise ConfigError(f"--{name.replace('_', '-')} must be positive")
    if args.width % args.heads:
        raise ConfigError(f"--heads ({args.heads}) must divide --width ({args.width})")
    if args.segment > args.positions:
        raise ConfigError(f"--segment {args.segment} exceeds GPT-2's position table (--positions {args.positions}); "
                          f"use {args.positions} or less")
    if gpt2_models.hf_window(args) < 1:
        raise ConfigError(f"--gen-tokens {args.gen_tokens} leaves no prompt in GPT-2's window of {args.positions} "
                          f"positions; use at most {args.positions - 2}")
    if args.tokens_per_step % args.segment:
        raise ConfigError(f"--tokens-per-step ({args.tokens_per_step}) must be a multiple of --segment "
                          f"({args.segment}): each step trains whole blocks")


# ---- measuring ---------------------------------------------------------------------------------


def measure_all(args) -> Dict:
    """Build and check the models, then run every part (each printed): the payload's
    ``checked``, ``train`` (rows), ``generate`` (rows), ``peaks`` (per arm)."""
    with tempfile.TemporaryDirectory(prefix="bench-gpt2-") as folder:
        built = worker.run(gpt2_models.write_models, args, folder=folder)
        if "error" in built:
            raise ConfigError(f"the GPT-2 models could not be built and checked: {built['error']}")
        print(f"gpt2: converted model checked against transformers (logits within {built['checked']:.1e})",
              flush=True)
        paths = {key: built[key] for key in (gpt2_models.HF, gpt2_models.FAIRSEQ)}
        out = {"checked": built["checked"], "train": [], "generate": [], "peaks": {}}
        if "train" in args.parts:
            train = worker.run(gpt2_measure.train_times, args, paths=paths, arms=args.models)
            out["train"] = train.get("rows") or [{"arm": a, "error": train["error"]} for a in args.models]
            for row in out["train"]:
                print(f"gpt2 train {row['arm']:3s} " + (row["error"] if "error" in row else
                      f"{row['tokens_per_s']:9.1f} tokens/s" + (f", ÷ HF {row['vs_hf']:.3f}" if "vs_hf" in row else "")
                      + (f" (FLOP-proportional {row['flop_ratio']:.3f}, efficiency {row['efficiency']:.3f})"
                         if "efficiency" in row else "")),
                      flush=True)
        if "generate" in args.parts:
            gen = worker.run(gpt2_measure.generation_times, args, paths=paths, arms=args.models)
            out["generate"] = gen.get("rows") or [{"arm": a, "context": p, "error": gen["error"]}
                                                  for p in gpt2_measure.prompt_lengths(args) for a in args.models]
            for row in out["generate"]:
                print(f"gpt2 generate {row['context']:6d} {row['arm']:3s} " + (row["error"] if "error" in row else
                      f"{row['ms_per_token']:8.2f} ms/token, prompt read {row['prefill_s']:.1f} s"), flush=True)
        if "memory" in args.parts:
            parts = [p for p in ("generate", "train") if p in args.parts] or ["train", "generate"]
            for arm in args.models:
                out["peaks"][arm] = worker.run(gpt2_measure.peaks, args, paths=paths, arm=arm, parts=parts)
                print(f"gpt2 memory {arm:3s} {out['peaks'][arm]}", flush=True)
    add_peaks(out)
    return out


def add_peaks(out: Dict) -> None:
    """Put each arm's peaks into its training and generation rows (a failed peak worker: its error)."""
    for arm, peak in out["peaks"].items():
        for row in (r for r in out["train"] if r["arm"] == arm and "error" not in r):
            row["model_mb"] = peak.get("model_mb")
            row["peak_mb"] = peak.get("train_peak_mb", peak.get("error"))
        for row in (r for r in out["generate"] if r["arm"] == arm and "error" not in r):
            at = peak.get("generate", {}).get(str(row["context"]), {})
            row["peak_mb"], row["prefill_peak_mb"] = at.get("peak_mb", peak.get("error")), at.get("prefill_peak_mb")


def goal_lines(out: Dict, args) -> List[Dict]:
    """The goals of docs/benchmark.md measured: speed ratios to transformers (training; generation
    at transformers' full window, where every arm holds the same tokens) and the memory-on
    model's ms per token after the longest prompt over after ``--segment`` tokens."""
    window = gpt2_models.hf_window(args)
    goals = []
    for arm, table, key, bound, at_least in GOALS:
        rows = [r for r in out[table] if r["arm"] == arm and key in r and (table == "train" or r["context"] == window)]
        if rows:
            value = rows[0][key]
            what = "training speed ÷ HF's" if table == "train" else f"ms per token ÷ HF's after {window} tokens"
            goals.append({"goal": f"{gpt2_models.LABELS[arm]}: {what} {'≥' if at_least else '≤'} {bound}",
                          "value": value, "met": value >= bound if at_least else value <= bound})
    on = {r["context"]: r for r in out["generate"] if r["arm"] == "on" and "error" not in r}
    if args.segment in on and max(on) > args.segment:
        ratio = on[max(on)]["ms_per_token"] / on[args.segment]["ms_per_token"]
        goals.append({"goal": f"memory on: ms per token after {max(on)} tokens within ±{FLAT:.0%} of after "
                              f"{args.segment}", "value": ratio, "met": abs(ratio - 1) <= FLAT})
    return goals


# ---- the table -----------------------------------------------------------------------------------

TRAIN_COLUMNS = [Column("model", "model"), Column("tokens_per_s", "tokens/s (median)", ".1f"),
                 Column("tokens_per_s_q1", "lower quartile", ".1f"), Column("tokens_per_s_q3", "upper quartile", ".1f"),
                 Column("vs_hf", "speed ÷ HF (median of rounds)", ".3f"), Column("vs_hf_q1", "lower quartile", ".3f"),
                 Column("vs_hf_q3", "upper quartile", ".3f"), Column("loss", "last loss", ".3f"),
                 Column("model_mb", "model MB", ".0f"), Column("peak_mb", "training peak MB", ".0f"),
                 Column("flops", "GFLOP / step", flop_count.gflop),
                 Column("flop_ratio", "FLOP-proportional (FLOPs HF ÷ model's)", ".3f"),
                 Column("efficiency", "efficiency (measured ÷ FLOP-proportional)", ".3f")]
GENERATE_COLUMNS = [Column("context", "prompt"), Column("model", "model"), Column("cached", "tokens attended"),
                    Column("in_memory", "tokens in memory"), Column("ms_per_token", "ms / token (median)", ".2f"),
                    Column("ms_per_token_min", "ms / token (min)", ".2f"),
                    Column("vs_hf", "ms ÷ HF (median of rounds)", ".3f"), Column("prefill_s", "prompt read (s)", ".2f"),
                    Column("peak_mb", "peak MB generating", ".0f"), Column("prefill_peak_mb", "peak MB reading", ".0f")]


def markdown_lines(out: Dict, info: Dict, args) -> List[str]:
    """The training table, the generation table and the goals."""
    bsz = args.tokens_per_step // args.segment
    lines = [report.header(info), "",
             f"Converted model checked before timing: logits within {out['checked']:.1e} of transformers' "
             f"(bound {gpt2_models.TOLERANCE}).", ""]
    if out["train"]:
        lines += [f"### training: forward + backward + AdamW step, {bsz} × {args.segment} tokens per step", "",
                  f"{args.repeats} timed rounds, every model one step per round on the same tokens, in rotating "
                  "order; the memory-on model carries its memory from block to block.", "",
                  flop_count.convention("the model", "HF") + " The AdamW update is timed and counts no FLOP.", "",
                  markdown(report.shown(out["train"], "tokens_per_s", keep=("model",)), TRAIN_COLUMNS), ""]
    if out["generate"]:
        lines += ["### generation: greedy, batch 1", "",
                  f"{args.gen_tokens} greedy tokens per round after each prompt, {args.repeats} timed rounds; HF "
                  f"keeps the last {gpt2_models.hf_window(args)} tokens of a longer prompt (its window of "
                  f"{args.positions} positions less the generated tokens); peak MB above the loaded model.", "",
                  markdown(report.shown(out["generate"], "ms_per_token", keep=("context", "model")),
                           GENERATE_COLUMNS), ""]
    if out["goals"]:
        lines += ["### goals", ""] + [f"- {g['goal']}: {g['value']:.3f}, {'met' if g['met'] else 'NOT met'}"
                                      for g in out["goals"]] + [""]
    return lines


def panels(out: Dict, tokens_per_step: int) -> List[report.Panel]:
    """Generation ms/token, prompt-read seconds and peak MB against the prompt; training tokens/s."""
    gen = [dict(r, label=r["model"]) for r in out["generate"] if "error" not in r]
    measured_peak = [r for r in gen if isinstance(r.get("peak_mb"), (int, float))]
    train = [{"context": tokens_per_step, "label": r["model"], "tokens_per_s": r["tokens_per_s"]}
             for r in out["train"] if "error" not in r]
    return [report.Panel(report.series(gen, "ms_per_token", label="label"), "prompt tokens", "ms / generated token",
                         ylim_zero=True),
            report.Panel(report.series(gen, "prefill_s", label="label"), "prompt tokens",
                         "seconds to read the prompt", legend=False),
            report.Panel(report.series(measured_peak, "peak_mb", label="label"), "prompt tokens",
                         "peak MB generating", legend=False, ylim_zero=True),
            report.Panel(report.series(train, "tokens_per_s", label="label"), "training tokens per step",
                         "training tokens/s", legend=not gen, ylim_zero=True)]


def run(args) -> report.Result:
    """Build, check and measure (printing each part) and return gpt2.{md,json,png}."""
    out = measure_all(args)
    out["goals"] = goal_lines(out, args)
    info = report.meta(args, f"batch {args.tokens_per_step // args.segment} × {args.segment} (training), 1 (generation)")
    info["sizes"].update({k: getattr(args, k) for k in ("positions", "gen_tokens", "models", "parts")})
    table = "\n".join(markdown_lines(out, info, args))
    payload = {"meta": info, "checked": out["checked"], "train": out["train"], "generate": out["generate"],
               "peaks": out["peaks"], "goals": out["goals"]}
    return report.Result(table, payload, panels(out, args.tokens_per_step), title="GPT-2: transformers vs infinite_former_gpt2", dpi=120)
