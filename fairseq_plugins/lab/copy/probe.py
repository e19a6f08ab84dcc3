"""The copy probe: does a summarizer learn to copy a marked value from its document, and
from which part of it? (docs/results/copy.md)

A document of ``--length`` random filler tokens holds ``--facts`` K markers, each followed by a
value (one of ``--values`` V symbols, distinct within a document); the summary is the K values
in order of appearance, then ``</s>``. Where the markers go is ``--where``: ``lead`` (inside
the first ``--lead-span`` positions), ``far`` (past them, up to ``--length`` − 2) or ``any``.
A decoder that reads nothing of the document is at chance 1/V on the first value.

The model is trained with Adam on fresh batches (no epoch, so no memorisation) and scored
every ``--eval-every`` updates on a fixed held-out set: the accuracy of the first value (its
greedy prediction after ``</s>``, teacher-forced) and, for an ∞-former summarizer, the same
with its memory wiped (``memory_wiped``: every read of B adds zero), which tells the memory's
share from the lead window's. The model is any registered fairseq architecture of the
translation kind built by fairseq itself (``--arch``; ``--set KEY=VALUE`` sets any option of
its config), so a probe row is the model a recipe trains, at the probe's sizes.

Output: one JSON file with the options, the parameter count and the curve
``[{"update", "loss", "accuracy", "wiped_accuracy"}]``.
"""

import json
import math
import os
import time
from types import SimpleNamespace
from typing import Dict, List

import torch
import torch.nn.functional as F
from fairseq.data import Dictionary

from fairseq_plugins.errors import ConfigError
from fairseq_plugins.lab.common.files import text_writer, write_atomically
from fairseq_plugins.lab.common.table import to_json

from fairseq_plugins.lab.copy import WHERE


def dictionary(size: int) -> Dictionary:
    """A fairseq dictionary of the 4 specials and ``size`` symbols ``w0``, ``w1``, …"""
    d = Dictionary()
    for i in range(size):
        d.add_symbol(f"w{i}")
    return d


class Documents:
    """Draws probe examples (see the module docstring) from a seeded generator.

    Symbols: ``d.nspecial`` is the marker, the next ``values`` symbols are the values, the
    rest is filler.

    Raises:
        ConfigError: a span that cannot hold the markers (one line naming the option).
    """

    def __init__(self, d: Dictionary, length: int, facts: int, values: int, where: str, lead_span: int):
        if where not in WHERE:
            raise ConfigError(f"--where must be one of {', '.join(WHERE)}, got {where!r}")
        if facts < 1 or facts > values:
            raise ConfigError(f"--facts must be between 1 and --values ({values}), got {facts}")
        lo, hi = {"lead": (0, lead_span - 2), "far": (lead_span, length - 2), "any": (0, length - 2)}[where]
        if hi - lo < 2 * facts:
            raise ConfigError(f"--where {where} leaves positions [{lo}, {hi}) for {facts} markers; "
                              "use a longer --length or another --lead-span")
        self.d, self.length, self.facts, self.values, self.span = d, length, facts, values, (lo, hi)
        self.marker = d.nspecial
        if len(d) - (self.marker + 1 + values) < 2:
            raise ConfigError("the dictionary leaves no filler symbols; use a larger --vocab")

    def batch(self, size: int, generator: torch.Generator):
        """``(src (size, L), prev_output_tokens (size, K + 1), target (size, K + 1))``."""
        first_value, filler = self.marker + 1, self.marker + 1 + self.values
        src = torch.randint(filler, len(self.d), (size, self.length), generator=generator)
        lo, hi = self.span
        # K marker positions at even offsets of [lo, hi), distinct, in order (a marker and its value never overlap)
        slots = torch.rand(size, (hi - lo) // 2, generator=generator).argsort(dim=1)[:, : self.facts]
        where = lo + 2 * slots.sort(dim=1).values
        values = first_value + torch.rand(size, self.values, generator=generator).argsort(dim=1)[:, : self.facts]
        rows = torch.arange(size)[:, None]
        src[rows, where], src[rows, where + 1] = self.marker, values
        eos = torch.full((size, 1), self.d.eos())
        return src, torch.cat([eos, values], 1), torch.cat([values, eos], 1)


def build_model(arch: str, d: Dictionary, overrides: Dict[str, str], max_source: int):
    """The registered fairseq model ``arch`` built by fairseq from its declared defaults, the
    architecture's and ``overrides`` (strings parsed as fairseq parses options)."""
    from fairseq import models, options
    from fairseq.models import ARCH_MODEL_REGISTRY

    import fairseq_plugins  # noqa: F401  (registers the plugin's models)
    fairseq_plugins.load_components()
    if arch not in ARCH_MODEL_REGISTRY:
        raise ConfigError(f"--arch {arch} is not a registered architecture")
    argv = ["data", "--task", "translation", "--arch", arch, "--max-source-positions", str(max_source),
            "--max-target-positions", "64"]
    for key, value in overrides.items():
        flag = "--" + key.replace("_", "-")
        argv += [flag] if value.lower() == "true" else ([] if value.lower() == "false" else [flag, value])
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, argv)
    task = SimpleNamespace(source_dictionary=d, target_dictionary=d, args=args)
    return models.build_model(args, task)


def reads_a_memory(model) -> bool:
    """Whether ``model`` is a summarizer that reads a document memory or retrieves from every
    encoder state (and so has a wiped control)."""
    from fairseq_plugins.models.infinite_former_summarizer import InfiniteFormerSummarizerModel

    return isinstance(model, InfiniteFormerSummarizerModel) and (model.encoder.signal is not None
                                                                  or model.encoder.keep_states)


def _wiped_twin(model, arch, d, overrides, max_source):
    """The same weights with every read of the document memory empty (``memory_wiped``)."""
    twin = build_model(arch, d, {**overrides, "memory_wiped": "true"}, max_source)
    twin.load_state_dict(model.state_dict())
    return twin.eval()


@torch.no_grad()
def first_value_accuracy(model, batch) -> float:
    src, prev, target = batch
    model.eval()
    out = model(src, torch.full((src.size(0),), src.size(1)), prev)
    return (out[0][:, 0].argmax(-1) == target[:, 0]).float().mean().item()


def train(args) -> dict:
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    d = dictionary(args.vocab)
    docs = Documents(d, args.length, args.facts, args.values, args.where, args.lead_span)
    overrides = dict(kv.split("=", 1) for kv in args.set)
    max_source = args.length + 8
    model = build_model(args.arch, d, overrides, max_source)
    has_memory = reads_a_memory(model) and overrides.get("memory_wiped", "false").lower() != "true"
    params = sum(p.numel() for p in model.parameters())
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, betas=(0.9, 0.98))
    warmup = max(args.warmup, 1)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min((step + 1) / warmup, 1.0) if args.schedule == "constant"
        else min((step + 1) / warmup, math.sqrt(warmup / (step + 1))))
    generator = torch.Generator().manual_seed(10_000 + args.seed)
    held_out = docs.batch(args.eval_size, torch.Generator().manual_seed(99))
    curve: List[dict] = []
    started, losses = time.time(), []
    for update in range(1, args.updates + 1):
        model.train()
        src, prev, target = docs.batch(args.batch_size, generator)
        out = model(src, torch.full((args.batch_size,), args.length), prev)
        lprobs = model.get_normalized_probs(out, log_probs=True)
        loss = F.nll_loss(lprobs.reshape(-1, lprobs.size(-1)), target.reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        if args.clip_norm > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip_norm)
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
        if update % args.eval_every == 0 or update == args.updates:
            row = {"update": update, "loss": sum(losses) / len(losses), "accuracy": first_value_accuracy(model, held_out),
                   "seconds": round(time.time() - started, 1)}
            losses = []
            if has_memory:
                twin = _wiped_twin(model, args.arch, d, overrides, max_source)
                row["wiped_accuracy"] = first_value_accuracy(twin, held_out)
            curve.append(row)
            print(json.dumps(row), flush=True)  # the curve as it is scored
    options = {k: v for k, v in vars(args).items() if k not in ("verb", "prog", "force")}
    return {"options": options, "parameters": params, "chance": 1.0 / args.values, "curve": curve}


def main(args, prog: str) -> int:
    """Train and score one rung with one seed (options checked by
    :func:`fairseq_plugins.lab.copy.cli.check`); write ``--out`` whole."""
    result = train(args)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    write_atomically({args.out: text_writer(to_json(result))})
    print(f"{prog}: wrote {args.out} (final accuracy {result['curve'][-1]['accuracy']:.3f}, chance "
          f"{result['chance']:.3f})")
    return 0
