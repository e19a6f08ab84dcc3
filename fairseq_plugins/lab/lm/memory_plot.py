"""Figures of a :class:`~fairseq_plugins.lab.lm.memory_map.MemoryMap` (docs/analysis.md).

``memory_map.png``: per layer, query position (rows) against the document tokens the memory
holds (columns), the head-averaged share of each read on each token as a logarithmic heat map,
segment boundaries as thin lines, the diagonal (the query itself) as a dashed line; the memory
only holds tokens of earlier segments, so the map lies left of the query's segment.
``query_token.png``: for one query, per layer, the share of the read on each document token,
the top tokens marked.
"""

import torch

FLOOR = 1e-5  # shares below this are drawn as the background


def _segment_lines(ax, result, n, horizontal=True):
    for b in range(result.segment_length, n, result.segment_length):
        ax.axvline(b - 0.5, color="white", linewidth=0.4, alpha=0.7)
        if horizontal:
            ax.axhline(b - 0.5, color="white", linewidth=0.4, alpha=0.7)


def plot_map(result, path: str) -> None:
    """Write ``memory_map.png`` (module docstring) to ``path``."""
    from matplotlib.colors import LogNorm
    from matplotlib.figure import Figure

    n, layers = len(result.pieces), result.num_layers
    fig = Figure(figsize=(5.0 * layers + 1.0, 5.0), dpi=110)
    axes = fig.subplots(1, layers, squeeze=False)[0]
    image = None
    for layer, ax in enumerate(axes):
        heat = result.heat_map(layer).clamp_min(FLOOR).numpy()
        image = ax.imshow(heat, origin="upper", aspect="auto", interpolation="nearest", cmap="magma",
                          norm=LogNorm(vmin=FLOOR, vmax=1.0), extent=(-0.5, n - 0.5, n - 0.5, -0.5))
        _segment_lines(ax, result, n)
        ax.plot([0, n], [0, n], linestyle="--", color="cyan", linewidth=0.6)
        ax.set_title(f"layer {layer}: share of each long-term read", fontsize=10)
        ax.set_xlabel("memory position (token of the document)")
        ax.set_ylabel("query position (token)")
    fig.colorbar(image, ax=list(axes), fraction=0.03, label="share of the read (mean over heads)")
    fig.suptitle(f"where the long-term memory looks (segments of {result.segment_length}, τ = {result.tau})",
                 fontsize=11)
    fig.savefig(path, format="png")


def plot_query(result, token: int, path: str, top_k: int = 10) -> None:
    """Write ``query_token.png``: the read of the query at ``token`` over the document, per layer."""
    from matplotlib.figure import Figure

    n, layers = len(result.pieces), result.num_layers
    fig = Figure(figsize=(10.0, 2.6 * layers), dpi=110)
    axes = fig.subplots(layers, 1, squeeze=False)[:, 0]
    for layer, ax in enumerate(axes):
        mass = result.mass(layer, token).mean(0)
        ax.plot(range(n), mass.numpy(), linewidth=0.8)
        top = torch.topk(mass, min(top_k, n)).indices.tolist()
        ax.scatter(top, mass[top].numpy(), color="red", s=10, zorder=3, label=f"top {len(top)}")
        for b in range(result.segment_length, n, result.segment_length):
            ax.axvline(b - 0.5, color="grey", linewidth=0.4, alpha=0.5)
        ax.axvline(token, color="black", linestyle="--", linewidth=0.8, label="the query")
        ax.set_xlim(-0.5, n - 0.5)
        ax.set_ylabel(f"layer {layer}\nshare")
        ax.legend(loc="upper left", fontsize=8)
    axes[-1].set_xlabel("token of the document")
    fig.suptitle(f"the long-term read of the query at token {token} ({result.pieces[token]!r})", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, format="png")
