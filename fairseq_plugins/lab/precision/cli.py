"""``fairseq-longmem precision-check``: mixed-precision checks on a CUDA machine
(``scripts/gpu-checks.sh`` is this command; docs/training-at-scale.md).

    fairseq-longmem precision-check [--updates 40] [--keep DIR] [--dry-run]

Trains the four models in fp32, --fp16, --memory-efficient-fp16, --amp and --bf16 on toy data
and prints a table (:mod:`fairseq_plugins.lab.precision.checks`); exit status 1 when a row
fails. Without a CUDA device it prints ``no CUDA device: skipped`` and exits 0. ``--dry-run``
(no CUDA needed) prepares everything and prints each row's fairseq-train command line instead.
The toy data, the tiny GPT-2 and its conversion go to a temporary folder, removed at exit, or
to ``--keep DIR``, kept.
"""

import argparse
import os
import tempfile
from typing import List, Optional

from fairseq_plugins.lab.common import cli
from fairseq_plugins.errors import ConfigError
from fairseq_plugins.lab.common.quiet import quiet_config_notices, quiet_progress_bars


def _parser(prog: str) -> argparse.ArgumentParser:
    p = cli.ArgumentParser(
        prog=prog, description="Mixed-precision checks on a CUDA machine: fairseq-train of infinite_former_lm, "
        "fastformer_lm, the fastformer encoder-decoder and a tiny converted GPT-2 in fp32, --fp16, "
        "--memory-efficient-fp16, --amp and --bf16; prints a table (PASS: finite losses, the run learns, within "
        "0.5 bit of fp32). Writes its toy data into a temporary folder (removed) or --keep DIR.")
    p.add_argument("--updates", type=cli.positive_int, default=40, help="updates of each run [40]")
    p.add_argument("--keep", metavar="DIR", help="prepare into DIR and keep it (the dry run's lines then run)")
    p.add_argument("--dry-run", action="store_true",
                   help="prepare everything (no CUDA needed) and print each row's fairseq-train command line "
                        "(model, precision, command; tab-separated) instead of training")
    p.add_argument("--prog", help="the recipe's name for the error line")
    return p


def main(argv: List[str], prog: str) -> Optional[int]:
    """Run the checks (see the module docstring)."""
    from fairseq_plugins.lab.common.cli import recipe_prog, run_command

    name = recipe_prog(argv, prog)
    args = _parser(name).parse_args(argv)
    quiet_config_notices()
    return run_command(lambda _argv, _prog: _run(args), [], name)


def _run(args: argparse.Namespace) -> int:
    if args.updates <= 0:
        raise ConfigError(f"--updates must be a positive number, got '{args.updates}'")
    try:
        import torch
    except ImportError:
        raise ConfigError("cannot import torch; activate the project's environment (scripts/install.sh)") from None
    if not torch.cuda.is_available() and not args.dry_run:
        print("no CUDA device: skipped")
        return 0
    from fairseq_plugins.lab.precision import checks as precision

    quiet_progress_bars()  # the tiny GPT-2 is saved with transformers
    with tempfile.TemporaryDirectory() as scratch:
        work = args.keep or scratch
        os.makedirs(work, exist_ok=True)
        models, gpt2_skip, common = precision.prepare(work, args.updates)
        if args.dry_run:
            precision.print_command_lines(models, gpt2_skip, common, kept=bool(args.keep))
            return 0
        return 1 if precision.run_checks(models, gpt2_skip, common, args.updates) else 0
