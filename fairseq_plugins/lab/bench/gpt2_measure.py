"""The worker side of ``fairseq-longmem bench gpt2`` (docs/benchmark.md, "GPT-2 against transformers").

Three measurements, each a function a worker process runs (:mod:`fairseq_plugins.lab.bench.worker`)
on the models :func:`~fairseq_plugins.lab.bench.gpt2_models.write_models` saved:

* :func:`train_times` — every arm in one process, alternating: round r trains each arm one step
  on the same ``(bsz, L)`` GPT-2 ids (the r-th block of ``bsz`` streams; the memory-on arm carries
  its memory from block to block), the arms' order rotating from round to round. The first
  round (no memory to read yet) and ``--warmup`` rounds are not timed. After the timed rounds
  each arm's FLOPs of one step's forward + backward are counted once
  (:mod:`~fairseq_plugins.lab.bench.flops`; the optimizer's update is elementwise and counts none).
* :func:`generation_times` — every arm in one process: each prompt read once (the fairseq
  memory-on arm reads the longest prompt once, its state kept at every shorter one), then
  rounds that generate ``--gen-tokens`` greedy steps from every (prompt, arm) state in turn.
* :func:`peaks` — one arm per process: the peak resident memory (CUDA: allocated) above the
  loaded model while reading each prompt, while generating after it, and while training.

Before anything is timed, every worker that loads two arms checks that the fairseq models read
GPT-2's ids as transformers does and that their logits agree
(:func:`~fairseq_plugins.lab.bench.gpt2_models.check_agreement`); its result is part of the output.
Times are seconds on ``--clock``; memory in MB (2**20 bytes).
"""

import statistics
from typing import Dict, List

from fairseq_plugins.lab.bench import flops as flop_count
from fairseq_plugins.lab.bench import gpt2_models as g
from fairseq_plugins.lab.bench.resources import Peak, clock, synchronize


def _quartiles(values: List[float]) -> List[float]:
    """Lower quartile, median, upper quartile (inclusive: within the values even for two)."""
    if len(values) == 1:
        return [values[0]] * 3
    q = statistics.quantiles(values, n=4, method="inclusive")
    return [q[0], statistics.median(values), q[2]]


def _setup(args, paths, arms):
    """``(device, {arm: model}, index, largest logit difference or None)``."""
    import torch

    device = torch.device(args.device)
    models = {arm: g.load(arm, args, paths, device) for arm in arms}
    fairseq = [model for arm, model in models.items() if arm != "hf"]
    index = g.gpt2_index(fairseq[0], args.vocab).to(device) if fairseq else None
    checked = g.check_agreement(models, index, args, device) if fairseq and "hf" in models else None
    return device, models, index, checked


def _rotated(items, r: int):
    r %= len(items)
    return list(items[r:]) + list(items[:r])


# ---- training ----------------------------------------------------------------------------------


class _NoUpdate:
    """An optimizer that updates nothing: :func:`~fairseq_plugins.lab.bench.gpt2_models.train_step`'s
    forward + backward, counted without changing the weights."""

    def __init__(self, model):
        self.model = model

    def step(self):
        pass

    def zero_grad(self, set_to_none=True):
        self.model.zero_grad(set_to_none=set_to_none)


def step_flops(arm: str, model, ids, index, args, device) -> int:
    """The FLOPs of one training step's forward + backward on ``ids`` (the weights left as they are)."""
    return flop_count.count(lambda: g.train_step(arm, model, _NoUpdate(model), ids, index, args, device))


def train_times(args, paths: Dict[str, str], arms: List[str]) -> Dict:
    """In a worker (see the module docstring): ``{"checked": largest logit difference, "rows":
    [{"arm", "tokens_per_s" (median), "tokens_per_s_q1", "tokens_per_s_q3", "step_s", "loss",
    "vs_hf", "vs_hf_q1", "vs_hf_q3", "flops", "flop_ratio", "efficiency"}]}``; ``vs_hf`` is the
    median over the rounds of transformers' step time over the arm's in the same round (> 1:
    faster than transformers); ``flops``: one step's forward + backward, counted after the timed
    rounds; ``flop_ratio`` = transformers' FLOPs ÷ the arm's, the ``vs_hf`` time would give if it
    followed the FLOPs; ``efficiency`` = vs_hf ÷ flop_ratio."""
    import torch

    device, models, index, checked = _setup(args, paths, arms)
    optimizers = {arm: torch.optim.AdamW(model.parameters(), lr=5e-5, weight_decay=0.01)
                  for arm, model in models.items()}
    bsz, block = args.tokens_per_step // args.segment, args.segment
    untimed = max(args.warmup, 1)
    generator = torch.Generator().manual_seed(0)
    stream = torch.randint(0, args.vocab, (bsz, (untimed + args.repeats) * block), generator=generator).to(device)
    timer = clock(args.clock)
    seconds = {arm: [] for arm in arms}
    losses = {}
    for r in range(untimed + args.repeats):
        ids = stream[:, r * block:(r + 1) * block]
        for arm in _rotated(arms, r):
            synchronize(device)
            start = timer()
            losses[arm] = g.train_step(arm, models[arm], optimizers[arm], ids, index, args, device)
            synchronize(device)
            if r >= untimed:
                seconds[arm].append(timer() - start)
    last = stream[:, -block:]
    flops = {arm: step_flops(arm, models[arm], last, index, args, device) for arm in arms}
    rows = []
    for arm in arms:
        speeds = [bsz * block / s for s in seconds[arm]]
        row = {"arm": arm, "model": g.LABELS[arm], "step_s": statistics.median(seconds[arm]), "loss": losses[arm]}
        row["tokens_per_s_q1"], row["tokens_per_s"], row["tokens_per_s_q3"] = _quartiles(speeds)
        if "hf" in seconds:
            ratios = [h / a for h, a in zip(seconds["hf"], seconds[arm])]
            row["vs_hf_q1"], row["vs_hf"], row["vs_hf_q3"] = _quartiles(ratios)
        row["flops"] = flops[arm]
        row.update(flop_count.bound(row.get("vs_hf"), flops[arm], flops.get("hf")))
        rows.append(row)
    return {"checked": checked, "rounds": args.repeats, "batch": bsz, "rows": rows}


# ---- generation --------------------------------------------------------------------------------


def prompt_lengths(args) -> List[int]:
    """The prompts of ``--prompts`` and transformers' window (:func:`~fairseq_plugins.lab.bench.gpt2_models.hf_window`),
    where a longer prompt is asked for: the one length at which all arms hold the same context."""
    prompts = sorted(int(x) for x in str(args.prompts).split(","))
    window = g.hf_window(args)
    if prompts[-1] > window and window not in prompts:
        prompts = sorted(prompts + [window])
    return prompts


def reads(arm: str, prompt: int, args) -> bool:
    """Whether ``arm`` is measured after ``prompt`` tokens: the memory-off model keeps nothing of
    a block once it is full, so it runs at prompts of at most one block only."""
    return arm != "off" or prompt <= args.segment


def _read_prompts(arm, model, stream, index, args, device, timer):
    """``{prompt: (state, first token, prompt seconds)}``: transformers and the memory-off model
    read each prompt afresh; the memory-on model reads the longest once, keeping the state at
    each shorter prompt (its seconds: the whole read up to that prompt)."""
    states, state, elapsed = {}, {}, 0.0
    for prompt in (p for p in prompt_lengths(args) if reads(arm, p, args)):
        synchronize(device)
        start = timer()
        if arm == "on":
            state, first = g.prefill(arm, model, stream[:, :prompt], index, state, args, device)
        else:
            state, first = g.prefill(arm, model, stream[:, :prompt], index, {}, args, device)
        synchronize(device)
        elapsed = (elapsed if arm == "on" else 0.0) + timer() - start
        states[prompt] = (g.copy_state(arm, state), first, elapsed)
    return states


def _prefix(arm, stream, prompt, index):
    return stream[:, :prompt] if arm == "hf" else index[stream[:, :prompt]]


def generation_times(args, paths: Dict[str, str], arms: List[str]) -> Dict:
    """In a worker (see the module docstring): ``{"checked", "rows": [{"context", "arm",
    "ms_per_token" (median over rounds), "ms_per_token_min", "vs_hf" (median over rounds of
    transformers' time over the arm's at the same prompt), "prefill_s", "cached", "in_memory"}]}``;
    ``cached``: the tokens the arm attends to when generation starts, ``in_memory``: those in the
    long-term memory."""
    import torch

    device, models, index, checked = _setup(args, paths, arms)
    for model in models.values():
        model.eval()
    prompts = prompt_lengths(args)
    generator = torch.Generator().manual_seed(2)
    stream = torch.randint(0, args.vocab, (1, prompts[-1]), generator=generator).to(device)
    timer = clock(args.clock)
    states = {arm: _read_prompts(arm, models[arm], stream, index, args, device, timer) for arm in arms}
    ms = {(arm, p): [] for arm in arms for p in states[arm]}
    for r in range(args.warmup + args.repeats):
        for prompt in (prompts if r % 2 == 0 else prompts[::-1]):
            for arm in (a for a in _rotated(arms, r) if prompt in states[a]):
                state, first, _ = states[arm][prompt]
                state = g.copy_state(arm, state)
                synchronize(device)
                start = timer()
                g.generate(arm, models[arm], state, first, _prefix(arm, stream, prompt, index), args.gen_tokens,
                           args, device)
                synchronize(device)
                if r >= args.warmup:
                    ms[arm, prompt].append(1000 * (timer() - start) / args.gen_tokens)
    rows = []
    for prompt in prompts:
        for arm in arms:
            row = {"context": prompt, "arm": arm, "model": g.LABELS[arm]}
            if prompt not in states[arm]:
                rows.append({**row, "error": f"not run: memory off keeps one block (--segment {args.segment})"})
                continue
            times = ms[arm, prompt]
            row.update(ms_per_token=statistics.median(times), ms_per_token_min=min(times),
                       prefill_s=states[arm][prompt][2], **_context(arm, prompt, args))
            if ("hf", prompt) in ms:
                row["vs_hf"] = statistics.median([a / h for a, h in zip(times, ms["hf", prompt])])
            rows.append(row)
    return {"checked": checked, "rounds": args.repeats, "rows": rows}


def _context(arm: str, prompt: int, args) -> Dict[str, int]:
    """What the arm holds of a prompt when generation starts (see :func:`generation_times`)."""
    if arm == "hf":
        return {"cached": min(prompt, g.hf_window(args)), "in_memory": 0}
    cached = prompt % args.segment
    return {"cached": cached, "in_memory": prompt - cached if arm == "on" else 0}


# ---- memory ------------------------------------------------------------------------------------


def peaks(args, paths: Dict[str, str], arm: str, parts: List[str]) -> Dict:
    """In a worker, one arm: ``{"model_mb" (its parameters and buffers), "generate": {prompt: {"prefill_peak_mb", "peak_mb"}},
    "train_peak_mb"}`` (the parts of ``parts``: ``generate``, ``train``), each peak above the
    loaded model (:class:`~fairseq_plugins.lab.bench.resources.Peak`); generation first, in
    evaluation mode, then ``max(--warmup, 1) + 1`` training steps."""
    import torch

    device, models, index, _ = _setup(args, paths, [arm])
    model = models[arm]
    tensors = list(model.parameters()) + list(model.buffers())
    out = {"model_mb": sum(t.numel() * t.element_size() for t in tensors) / 2**20}
    memory = Peak(device)
    memory.start()
    if "generate" in parts:
        model.eval()
        generator = torch.Generator().manual_seed(2)
        prompts = [p for p in prompt_lengths(args) if reads(arm, p, args)]
        stream = torch.randint(0, args.vocab, (1, prompts[-1]), generator=generator).to(device)
        out["generate"], state = {}, {}
        for prompt in prompts:
            memory.start()
            state, first = g.prefill(arm, model, stream[:, :prompt], index, state if arm == "on" else {},
                                     args, device)
            read_peak = memory.peak()
            memory.start()
            g.generate(arm, model, g.branch_state(arm, state), first, _prefix(arm, stream, prompt, index),
                       args.gen_tokens, args, device)
            out["generate"][str(prompt)] = {"prefill_peak_mb": read_peak, "peak_mb": memory.peak()}
        del state
        model.train()
    if "train" in parts:
        optimizer = torch.optim.AdamW(model.parameters(), lr=5e-5, weight_decay=0.01)
        bsz = args.tokens_per_step // args.segment
        generator = torch.Generator().manual_seed(0)
        memory.start()
        for _ in range(max(args.warmup, 1) + 1):
            ids = torch.randint(0, args.vocab, (bsz, args.segment), generator=generator).to(device)
            g.train_step(arm, model, optimizer, ids, index, args, device)
        out["train_peak_mb"] = memory.peak()
    return out
