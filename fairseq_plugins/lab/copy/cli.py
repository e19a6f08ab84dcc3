"""``fairseq-longmem copy``: the copy probe of the summarizer's reads (docs/results/copy.md).

    fairseq-longmem copy train [--arch A] [--set KEY=VALUE ...] [--length L] [--where lead|far|any] ... --out OUT/RUNG/seedS.json
    fairseq-longmem copy table OUT [--rungs R1,R2,...] [--dest DIR] [--force]

train  trains one rung of the ladder with one seed on fresh synthetic documents (a marked value
       before or past the lead window) and writes its learning curve: the accuracy of the first
       value on held-out documents, and with the memory wiped (fairseq_plugins/lab/copy/probe.py).
table  one row per rung found under OUT (OUT/RUNG/seedS.json): the final accuracy over the seeds
       (mean, 95% t-interval, each seed), the wiped control, the first update that reached 0.9;
       writes DEST/copy.md, copy.json and copy.png (every seed's curve), DEST = OUT by default.

Bad input (a count that is not positive, an unknown model option, an existing output without
--force, a folder without runs) is one line ``PROG: error: ...`` (exit 2) and writes nothing.
"""

import argparse
import os
from typing import Dict, List, Optional

from fairseq_plugins.errors import ConfigError
from fairseq_plugins.lab.copy import WHERE


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``fairseq-longmem copy train``."""
    p.add_argument("--arch", default="infinite_former_summarizer", help="a registered translation-kind architecture")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a model option (its config field's name), repeatable; e.g. lead_window=256")
    p.add_argument("--length", type=int, default=1024, help="document length in tokens")
    p.add_argument("--facts", type=int, default=1, help="K marked values per document")
    p.add_argument("--values", type=int, default=8, help="V: the set of values (chance 1/V)")
    p.add_argument("--vocab", type=int, default=64, help="symbols in all (marker, values, filler)")
    p.add_argument("--where", default="far", choices=WHERE, help="where the markers lie (see the description)")
    p.add_argument("--lead-span", type=int, default=256, help="positions counted as the lead")
    p.add_argument("--updates", type=int, default=800, help="Adam updates")
    p.add_argument("--eval-every", type=int, default=100, help="updates between two scorings of the held-out set")
    p.add_argument("--eval-size", type=int, default=256, help="held-out documents")
    p.add_argument("--batch-size", type=int, default=16, help="documents per update")
    p.add_argument("--lr", type=float, default=1e-3, help="Adam's learning rate, betas (0.9, 0.98)")
    p.add_argument("--warmup", type=int, default=1, help="updates of linear warm-up")
    p.add_argument("--schedule", default="constant", choices=("constant", "inverse_sqrt"),
                   help="the learning rate after warm-up")
    p.add_argument("--clip-norm", type=float, default=0.0, help="clip the gradient norm (0: no clipping)")
    p.add_argument("--seed", type=int, default=1, help="the model's and the training batches' seed")
    p.add_argument("--threads", type=int, default=1, help="torch threads")
    p.add_argument("--out", required=True, help="the JSON file written (OUT/RUNG/seedS.json for copy table)")
    p.add_argument("--force", action="store_true", help="overwrite --out")


def check(args) -> Dict[str, str]:
    """The model options of ``--set`` after the checks (one line each; nothing written).

    Raises:
        ConfigError: a non-positive count, a malformed or unknown ``--set``, an existing ``--out``.
    """
    for name in ("length", "facts", "values", "vocab", "lead_span", "updates", "eval_every", "eval_size",
                 "batch_size", "warmup", "threads"):
        if getattr(args, name) < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be a positive integer, got {getattr(args, name)}")
    if args.lr <= 0 or args.clip_norm < 0:
        raise ConfigError("--lr must be positive and --clip-norm >= 0 (0: no clipping)")
    overrides = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set takes KEY=VALUE, got {item!r}")
        overrides[key] = value
    import fairseq_plugins
    from dataclasses import fields
    from fairseq.models import ARCH_MODEL_NAME_REGISTRY, ARCH_MODEL_REGISTRY, MODEL_DATACLASS_REGISTRY

    fairseq_plugins.load_components()
    if args.arch not in ARCH_MODEL_REGISTRY:
        raise ConfigError(f"--arch {args.arch} is not a registered architecture")
    config = MODEL_DATACLASS_REGISTRY.get(ARCH_MODEL_NAME_REGISTRY[args.arch])
    if config is not None and ARCH_MODEL_REGISTRY[args.arch].__module__.startswith("fairseq_plugins."):
        known = {f.name for f in fields(config)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise ConfigError(f"--set {unknown[0]}: {args.arch} has no such option (python -m fairseq_plugins "
                              "lists them, with '_' for '-')")
    if os.path.exists(args.out) and not args.force:
        raise ConfigError(f"{args.out} exists (use --force to overwrite)")
    return overrides


def _parser(prog: str):
    from fairseq_plugins.lab.common.cli import topic_parser

    p, sub = topic_parser(prog, __doc__)
    add_arguments(sub.add_parser("train", help="one rung, one seed: its learning curve -> --out"))
    s = sub.add_parser("table", help="every rung under OUT: table and curves -> DEST/copy.{md,json,png}")
    s.add_argument("out", metavar="OUT", help="the folder of OUT/RUNG/seedS.json")
    s.add_argument("--rungs", help="comma-separated rungs, in the table's order (default: every rung, by name)")
    s.add_argument("--dest", help="where copy.md, copy.json and copy.png go (default: OUT)")
    s.add_argument("--force", action="store_true", help="overwrite them")
    return p


def main(argv: List[str], prog: str) -> Optional[int]:
    from fairseq_plugins.lab.common.cli import parse_verb_args

    args = parse_verb_args(_parser(prog), argv)
    if args.verb == "train":
        check(args)
        from fairseq_plugins.lab.copy.probe import main as train

        return train(args, f"{prog} train")
    from fairseq_plugins.lab.copy.table import write

    rungs = [r for r in (args.rungs or "").split(",") if r] or None
    print(write(args.out, rungs, args.dest or args.out, args.force))
    return 0
