"""Where the training signal of a synthetic task goes: answer tokens per update, the loss, and the
gradient norm of each part of the model (docs/results/sorting.md, "Why the paper's alphabet was not learned").

:func:`profile` loads a checkpoint of a streaming arm (``infinite_former_lm``, with or without its
long-term memory) with fairseq's ``checkpoint_utils``, reads the first ``updates`` batches of a split
exactly as ``fairseq-train`` does (the ``streaming_lm`` task's streams, one segment of every stream
per batch, memory carried), and for each batch computes the checkpoint's own criterion (for the
sorting task the loss on the answer only) and its gradient, normalised as fairseq's trainer does
(divided by the batch's sample size), in training mode (dropout on). Parameters are grouped by
role: ``embed`` (token embedding, tied output), ``layer L attention``, ``layer L long-term memory``
(the read: μ, σ² projections, its K/V/output projections, the gate), ``layer L ffn``, ``norms``;
and every long-term-memory parameter is also reported alone, so that a read that receives no
gradient shows as 0. The weights do not change. Run as ``fairseq-longmem sorting signal``
(:mod:`fairseq_plugins.lab.sorting.cli`).
"""

import math
import re
from collections import defaultdict
from typing import Dict

from fairseq_plugins.errors import ConfigError
from fairseq_plugins.lab.common.answers import arm_of, load_checkpoint
from fairseq_plugins.lab.sorting.score import check_checkpoint_for

_LAYER = re.compile(r"layers\.(\d+)\.(.*)")


def group_of(name: str) -> str:
    """The role of a parameter named as in the plugin's decoders (module docstring)."""
    if "embed_tokens" in name or "output_projection" in name:
        return "embed"
    match = _LAYER.search(name)
    if match is None:
        return "norms"
    layer, rest = match.groups()
    if rest.startswith("long_term_memory."):
        return f"layer {layer} long-term memory"
    if rest.startswith("self_attn."):
        return f"layer {layer} attention"
    if rest.startswith("ffn."):
        return f"layer {layer} ffn"
    return "norms"


def profile(checkpoint: str, data: str, updates: int = 20, split: str = "train") -> Dict:
    """``{"arm", "updates", "answer_tokens_per_update", "loss_bits" (per answer token), "grad_norm"
    (of the whole model, mean over the batches), "groups": {group: mean norm}, "long_term_memory":
    {parameter: mean norm}, "per_update": [{"update", "answer_tokens", "grad_norm", "groups"}]}`` over the
    first ``updates`` batches of ``split`` (``update`` counts from 1, as fairseq-train does); the means are
    over the ``batches_with_answers`` (0: ``loss_bits`` and ``grad_norm`` None, no group).

    Raises:
        ConfigError: a model that is not a streaming arm, a missing checkpoint, data that is not the
            sorting task's, a checkpoint of another alphabet, ``updates`` < 1, a split with fewer batches.
    """
    import os

    from fairseq_plugins.modules.memory_bank import StreamingMemoryModel

    if updates < 1:
        raise ConfigError(f"--updates must be a positive integer, not {updates}")
    if not os.path.isfile(os.path.join(data, f"{split}.idx")):
        raise ConfigError(f"split '{split}' not found in {data} (no {split}.bin/.idx); pass --split train, valid or "
                          "test of a fairseq_plugins/lab/sorting/make-sorting.sh bin/ folder")
    check_checkpoint_for(checkpoint, data, split)
    model, cfg, task = load_checkpoint(checkpoint, data, cpu=True)
    if not isinstance(model, StreamingMemoryModel):
        raise ConfigError(f"{checkpoint} is a {arm_of(cfg)}: sorting signal profiles the streaming arms "
                          "(infinite_former, memory_off), which fairseq-train feeds segment by segment")
    task.load_dataset(split)
    dataset = task.dataset(split)
    if len(dataset) < updates:
        raise ConfigError(f"{split} has {len(dataset)} batches, fewer than --updates {updates}")
    criterion = task.build_criterion(cfg.criterion)
    model.train()
    model.reset_memory()
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    sums: Dict[str, float] = defaultdict(float)
    singles: Dict[str, float] = defaultdict(float)
    tokens = loss_sum = total = 0.0
    counted = 0
    per_update = []
    for i in range(updates):
        sample = dataset.collater([dataset[i]])
        model.zero_grad()
        loss, sample_size, log = criterion(model, sample)
        if sample_size == 0:
            continue  # a batch without answer tokens: fairseq-train's update is empty too
        (loss / sample_size).backward()
        squares: Dict[str, float] = defaultdict(float)
        for name, p in params:
            sq = float(p.grad.double().pow(2).sum()) if p.grad is not None else 0.0
            squares[group_of(name)] += sq
            if ".long_term_memory." in name:
                singles[name] += math.sqrt(sq)
        for group, sq in squares.items():
            sums[group] += math.sqrt(sq)
        total += math.sqrt(sum(squares.values()))
        per_update.append({"update": i + 1, "answer_tokens": int(sample_size),
                           "grad_norm": math.sqrt(sum(squares.values())),
                           "groups": {g: math.sqrt(sq) for g, sq in sorted(squares.items())}})
        tokens += float(sample_size)
        loss_sum += float(log["nll_loss"]) / math.log(2)
        counted += 1
    model.zero_grad()
    return {"arm": arm_of(cfg), "updates": updates, "batches_with_answers": counted,
            "answer_tokens_per_update": tokens / updates, "loss_bits": loss_sum / tokens if counted else None,
            "grad_norm": total / counted if counted else None,
            "groups": {g: v / counted for g, v in sorted(sums.items())},
            "long_term_memory": {n: v / counted for n, v in sorted(singles.items())}, "per_update": per_update}
