"""The position analysis as a Markdown table, a sentence per pair and a plot (docs/analysis.md).

Input is the dict of :func:`fairseq_plugins.lab.lm.position.analyze` (position.json).
"""

from typing import Dict, List


def span_text(start: int, end) -> str:
    """``0–64``, ``1k–4k``, ``16k+``: a bucket's offsets."""
    def short(n: int) -> str:
        return f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else str(n)
    return f"{short(start)}+" if end is None else f"{short(start)}–{short(end)}"


def _arm(model: Dict) -> str:
    n = len(model.get("seeds", [None]))
    return model["label"].replace("|", "\\|") + (f" ({n} seeds)" if n > 1 else "")


def _interval(row: Dict) -> str:
    return f"{row['loss_bits_diff']:+.4f} [{row['low']:+.4f}, {row['high']:+.4f}]"


def shown_pairs(result: Dict) -> List[Dict]:
    """The differences the table, the sentences and the plot show: the first arm against every
    other arm, and every other arm against its own wiped control (position.json holds every pair)."""
    first = result["models"][0]["label"]
    wiped = {m["label"] for m in result["models"] if m.get("wiped")}
    return [d for d in result["differences"] if d["b"] == f"{d['a']} wiped"
            or (d["a"] == first and d["b"] not in wiped)]


def markdown_table(result: Dict) -> str:
    """One row per bucket: offsets, tokens, documents, each arm's perplexity (the mean over its
    seeds) with its 95% interval, and the loss difference in bits with its interval of each pair
    :func:`shown_pairs` names; a last row for all tokens."""
    models, diffs = result["models"], shown_pairs(result)
    head = ["offsets", "tokens", "documents"] + [f"{_arm(m)} ppl [95%]" for m in models]
    head += [f"{d['a']} − {d['b']} bits [95%]".replace("|", "\\|") for d in diffs]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for j, first in enumerate(models[0]["buckets"]):
        row = [span_text(first["start"], first["end"]), f"{first['tokens']:,}", str(first["documents"])]
        row += [f"{m['buckets'][j]['ppl']:.2f} [{m['buckets'][j]['ppl_low']:.2f}, {m['buckets'][j]['ppl_high']:.2f}]"
                for m in models]
        row += [_interval(d["buckets"][j]) for d in diffs]
        lines.append("| " + " | ".join(row) + " |")
    total = ["all", f"{models[0]['tokens']:,}", str(result["documents"])]
    total += [f"{m['ppl']:.2f}" for m in models]
    total += [_interval(d["all"]) for d in diffs]
    lines.append("| " + " | ".join(total) + " |")
    return "\n".join(lines) + "\n"


def seed_table(result: Dict) -> str:
    """Each pair's difference seed by seed (seeds both arms have): all tokens with the 95%
    bootstrap interval over documents, and each bucket; empty when every arm has one seed."""
    if all(len(m.get("seeds", [])) <= 1 for m in result["models"]):
        return ""
    spans = [span_text(b["start"], b["end"]) for b in result["models"][0]["buckets"]]
    head = ["pair", "seed", "all tokens, bits [95%, documents]"] + spans
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for d in shown_pairs(result):
        for one in d["seeds"]:
            row = [f"{d['a']} − {d['b']}".replace("|", "\\|"), str(one["seed"]), _interval(one["all"])]
            row += [f"{b['loss_bits_diff']:+.4f}" for b in one["buckets"]]
            lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def coverage(result: Dict) -> str:
    """What the intervals cover (docs/analysis.md, "Seeds")."""
    seeds = sorted({len(m.get("seeds", [])) for m in result["models"]})
    if seeds == [1]:
        text = ("95% intervals: percentile bootstrap over documents (one seed per arm: training noise not "
                "estimated).")
    else:
        text = ("95% intervals over seeds and documents: mean over seeds ± t·√(between-seed variance / seeds + "
                "document-bootstrap variance), Welch–Satterthwaite degrees of freedom; pairs with the same seeds "
                "compared seed by seed.")
        if seeds[0] == 1:
            text += " An arm of one seed adds no training noise to the intervals of its pairs (it cannot be estimated)."
    if result["documents"] < 2:
        text += (" The split holds one document: the intervals hold no test-data noise, and no difference is "
                 "called significant.")
    return text


def pair_sentence(diff: Dict) -> str:
    """Which offsets benefit, for one pair: where the 95% interval of a − b lies below zero
    (a better), above zero (b better), or neither; and over all tokens."""
    better = [span_text(r["start"], r["end"]) for r in diff["buckets"] if r["high"] < 0]
    worse = [span_text(r["start"], r["end"]) for r in diff["buckets"] if r["low"] > 0]
    a, b = diff["a"], diff["b"]
    overall = ""
    if "all" in diff:
        every = diff["all"]
        verdict = (f"{a} lower" if every["high"] < 0 else f"{b} lower" if every["low"] > 0
                   else "not distinguishable from zero")
        overall = f" Over all tokens: {_interval(every)} bits ({verdict})."
    parts = []
    if better:
        parts.append(f"{a} has the lower loss at offsets {', '.join(better)}")
    if worse:
        parts.append(f"{b} has the lower loss at offsets {', '.join(worse)}")
    if not parts:
        return f"{a} vs {b}: no offset bucket where the 95% interval of the difference excludes zero.{overall}"
    rest = len(diff["buckets"]) - len(better) - len(worse)
    tail = f"; the other {rest} bucket{'s' if rest != 1 else ''} within the noise" if rest else ""
    return f"{a} vs {b}: {' and '.join(parts)} (95% interval of the difference excludes zero){tail}.{overall}"


def summary(result: Dict) -> str:
    """One sentence per pair of :func:`shown_pairs` (:func:`pair_sentence`), one per line; none
    for a split of one document (no test-data noise to judge a difference by)."""
    if result["documents"] < 2:
        return ""
    return "\n".join(pair_sentence(d) for d in shown_pairs(result))


def plot(result: Dict, path: str) -> None:
    """Two panels against offset (log x, each bucket at its tokens' mean offset): each arm's
    perplexity with its 95% interval shaded; below, the paired difference in bits per token of
    the first arm against each other arm (negative: the first arm is better), with its interval.
    Written to ``path`` (PNG)."""
    from matplotlib.figure import Figure  # the Figure's own Agg canvas: no global backend choice

    fig = Figure(figsize=(6.4, 6.4), dpi=120)
    top, bottom = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [3, 2]})
    colors = {}
    for model in result["models"]:
        xs = [max(1.0, b["mean_offset"]) for b in model["buckets"]]
        line, = top.plot(xs, [b["ppl"] for b in model["buckets"]], marker="o", label=_arm(model))
        colors[model["label"]] = line.get_color()
        top.fill_between(xs, [b["ppl_low"] for b in model["buckets"]], [b["ppl_high"] for b in model["buckets"]],
                         color=line.get_color(), alpha=0.2, linewidth=0)
    xs = [max(1.0, b["mean_offset"]) for b in result["models"][0]["buckets"]]
    first = result["models"][0]["label"]
    for diff in shown_pairs(result):
        if diff["a"] != first:
            continue
        ys = [r["loss_bits_diff"] for r in diff["buckets"]]
        color = colors.get(diff["b"])
        bottom.plot(xs, ys, marker="o", color=color, label=f"{first} − {diff['b']}")
        bottom.fill_between(xs, [r["low"] for r in diff["buckets"]], [r["high"] for r in diff["buckets"]],
                            color=color, alpha=0.2, linewidth=0)
    bottom.axhline(0.0, color="black", linewidth=0.8)
    top.set_xscale("log")
    top.set_yscale("log")
    bottom.set_xlabel("offset from the start of the document (tokens)")
    top.set_ylabel(f"perplexity on {result.get('split', 'the split')}")
    bottom.set_ylabel("difference, bits per token")
    seeds = max(len(m.get("seeds", [1])) for m in result["models"])
    what = f"over {seeds} seeds and documents" if seeds > 1 else "bootstrap over documents"
    top.set_title(f"loss by position (95% intervals {what})", fontsize=10)
    for ax in (top, bottom):
        ax.grid(True, which="both", alpha=0.3)
        if ax.get_legend_handles_labels()[0]:  # one arm alone has no difference to draw
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, format="png")
