"""The position analysis as a Markdown table, a sentence per pair and a plot (docs/analysis.md).

Input is the dict of :func:`fairseq_plugins.analysis.position.analyze` (position.json).
"""

from typing import Dict, List


def span_text(start: int, end) -> str:
    """``0–64``, ``1k–4k``, ``16k+``: a bucket's offsets."""
    def short(n: int) -> str:
        return f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else str(n)
    return f"{short(start)}+" if end is None else f"{short(start)}–{short(end)}"


def markdown_table(result: Dict) -> str:
    """One row per bucket: offsets, tokens, documents, each model's perplexity with its 95%
    interval, and each pair's loss difference in bits with its interval; a last row for all."""
    models, diffs = result["models"], result["differences"]
    head = ["offsets", "tokens", "documents"] + [f"{m['label']} ppl [95%]" for m in models]
    head += [f"{d['a']} − {d['b']} bits [95%]" for d in diffs]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for j, first in enumerate(models[0]["buckets"]):
        row = [span_text(first["start"], first["end"]), f"{first['tokens']:,}", str(first["documents"])]
        row += [f"{m['buckets'][j]['ppl']:.2f} [{m['buckets'][j]['ppl_low']:.2f}, {m['buckets'][j]['ppl_high']:.2f}]"
                for m in models]
        row += [f"{d['buckets'][j]['loss_bits_diff']:+.4f} [{d['buckets'][j]['low']:+.4f}, "
                f"{d['buckets'][j]['high']:+.4f}]" for d in diffs]
        lines.append("| " + " | ".join(row) + " |")
    total = ["all", f"{models[0]['tokens']:,}", str(result["documents"])]
    total += [f"{m['ppl']:.2f}" for m in models]
    total += [f"{a['loss_bits'] - b['loss_bits']:+.4f}" for a, b in _pairs(models)]
    lines.append("| " + " | ".join(total) + " |")
    return "\n".join(lines) + "\n"


def _pairs(models: List[Dict]):
    return [(models[a], models[b]) for a in range(len(models)) for b in range(a + 1, len(models))]


def pair_sentence(diff: Dict) -> str:
    """Which offsets benefit, for one pair: where the 95% interval of a − b lies below zero
    (a better), above zero (b better), or neither."""
    better = [span_text(r["start"], r["end"]) for r in diff["buckets"] if r["high"] < 0]
    worse = [span_text(r["start"], r["end"]) for r in diff["buckets"] if r["low"] > 0]
    a, b = diff["a"], diff["b"]
    parts = []
    if better:
        parts.append(f"{a} has the lower loss at offsets {', '.join(better)}")
    if worse:
        parts.append(f"{b} has the lower loss at offsets {', '.join(worse)}")
    if not parts:
        return f"{a} vs {b}: no offset bucket where the 95% interval of the difference excludes zero."
    rest = len(diff["buckets"]) - len(better) - len(worse)
    tail = f"; the other {rest} bucket{'s' if rest != 1 else ''} within the noise" if rest else ""
    return f"{a} vs {b}: {' and '.join(parts)} (95% interval of the difference excludes zero){tail}."


def summary(result: Dict) -> str:
    """One sentence per pair (:func:`pair_sentence`), one per line."""
    return "\n".join(pair_sentence(d) for d in result["differences"])


def plot(result: Dict, path: str) -> None:
    """Perplexity against offset (log x, each bucket at its tokens' mean offset), one line per
    model, its 95% interval shaded; written to ``path`` (PNG)."""
    from matplotlib.figure import Figure  # the Figure's own Agg canvas: no global backend choice

    fig = Figure(figsize=(6.4, 4.0), dpi=120)
    ax = fig.subplots()
    for model in result["models"]:
        xs = [max(1.0, b["mean_offset"]) for b in model["buckets"]]
        ys = [b["ppl"] for b in model["buckets"]]
        line, = ax.plot(xs, ys, marker="o", label=model["label"])
        ax.fill_between(xs, [b["ppl_low"] for b in model["buckets"]], [b["ppl_high"] for b in model["buckets"]],
                        color=line.get_color(), alpha=0.2, linewidth=0)
    ax.set_xscale("log")
    ax.set_xlabel("offset from the start of the document (tokens)")
    ax.set_ylabel(f"perplexity on {result.get('split', 'the split')}")
    ax.set_title("loss by position (95% bootstrap over documents)", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, format="png")
