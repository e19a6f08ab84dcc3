"""``fairseq-longmem bench memory``: what the ∞-former's long-term memory costs per segment,
part by part (docs/benchmark.md).

One :class:`~fairseq_plugins.modules.memory.continuous.LongTermMemory` layer at the benchmark's
``--width``, ``--heads``, ``--num-basis`` and ``--segment``, one stream, after two steps of its
own protocol (coefficients fitted, the last read's Gaussians kept for sticky sampling): the
median milliseconds of each forward part without gradients, and of the update, the read and
the whole step forward + backward (training), over max(``--repeats``, 5) calls after two untimed.
"""

from typing import Dict

from fairseq_plugins.lab.bench import report
from fairseq_plugins.lab.bench import worker
from fairseq_plugins.lab.bench.resources import clock, median_ms
from fairseq_plugins.errors import ConfigError
from fairseq_plugins.lab.common.table import Column, markdown


def _layer(args):
    """The measured long-term memory layer at the benchmark's sizes (on the CPU)."""
    from fairseq_plugins.modules.memory.continuous import LongTermMemory

    return LongTermMemory(args.width, args.heads, num_basis=args.num_basis, basis_widths=(0.005, 0.01),
                          num_samples=args.num_basis)


def builders(args) -> Dict:
    """``{label: build}`` of the measured layer (built once before measuring:
    :func:`fairseq_plugins.lab.bench.models.refuse_unbuildable`)."""
    return {"the long-term memory layer": lambda: _layer(args)}


def measure(args) -> Dict[str, float]:
    """In a worker: milliseconds per segment of each part (part name → ms)."""
    import torch
    from fairseq_plugins.modules.continuous.basis import sticky_histogram, sticky_positions

    torch.manual_seed(0)
    device = torch.device(args.device)
    ltm = _layer(args).to(device)
    chunk = torch.randn(args.segment, 1, args.width, device=device)
    query = torch.randn(args.segment, 1, args.width, device=device, requires_grad=True)
    valid = torch.ones(1, dtype=torch.bool, device=device)
    # two steps of the memory's own protocol: B fitted, the last read's Gaussians kept (sticky)
    state = ltm.empty_state(1, device)
    for _ in range(2):
        state = ltm.step(query.detach(), state, chunk).state
    read_state = ltm.update(state, chunk, valid).detach()
    hist = sticky_histogram(state.mu, state.sigma, ltm.sticky_bins)

    def backward(*tensors):
        sum(t.float().sum() for t in tensors).backward()

    def step_backward():
        step = ltm.step(query, state, chunk)
        backward(step.out, step.stats.mu, step.stats.sigma2)

    forward_parts = {
        "gate (Conv1d + sigmoid)": lambda: ltm.smooth(chunk),
        "sticky histogram": lambda: sticky_histogram(state.mu, state.sigma, ltm.sticky_bins),
        "sticky positions": lambda: sticky_positions(hist, ltm.num_samples, random=True),
        "update (sample, contract, re-fit; gate included)": lambda: ltm.update(state, chunk, valid),
        "read (continuous attention)": lambda: ltm(query, read_state),
    }
    training_parts = {
        "update, forward + backward": lambda: backward(ltm.update(state, chunk, valid).coefficients),
        "read, forward + backward": lambda: backward(*ltm(query, read_state)),
        "step (update + read), forward + backward": lambda: step_backward(),
    }
    repeats = max(args.repeats, 5)
    ltm.train()
    out = {}
    with torch.no_grad():
        for name, fn in forward_parts.items():
            out[name] = median_ms(fn, repeats, device, clock(args.clock))
    for name, fn in training_parts.items():
        out[name] = median_ms(fn, repeats, device, clock(args.clock))
    return out


def run(args) -> report.Result:
    """Measure the parts in a worker and return memory.{md,json}.

    Raises:
        ConfigError: the worker failed (its error and what to change; nothing is written then).
    """
    breakdown = worker.run(measure, args)
    if "error" in breakdown:
        raise ConfigError(f"the long-term memory breakdown failed: {breakdown['error']} (a time-out: raise "
                          "--timeout; OOM: smaller --width, --num-basis or --segment)")
    info = report.meta(args, "one stream")
    table = "\n".join([report.header(info), "", "### ∞-former long-term memory, one layer, one segment (ms)", "",
                       markdown([{"part": k, "ms": v} for k, v in breakdown.items()],
                                [Column("part", "part"), Column("ms", "ms", ".2f")])])
    return report.Result(table, {"meta": info, "ltm_breakdown_ms": breakdown})
