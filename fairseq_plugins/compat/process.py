"""Which fairseq command-line tool this process is, and what its command line says.

fairseq's tools import the plugin while they parse their options (``--user-dir``), before
any configuration object exists, so the checks that run then (:mod:`.prechecks`) and the
one-line messages read the command line itself, with one small ``argparse`` parser of the
options they use (:func:`command_line`).
"""

import argparse
import os
import sys
from typing import List, Optional


def running_tool() -> Optional[str]:
    """Which of fairseq's command-line tools this process is (``train``, ``eval_lm``,
    ``generate``, ``interactive``, ...: ``fairseq-<tool>`` or ``python -m fairseq_cli.<tool>``),
    ``longmem`` for this package's ``fairseq-longmem`` (or ``python -m fairseq_plugins.cli``),
    or ``None``."""
    if _module_run() == "fairseq_plugins.cli":  # python -m fairseq_plugins.cli, while it imports the package
        return "longmem"
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    name = str(getattr(spec, "name", "")) if spec is not None else ""
    if name.startswith("fairseq_cli."):
        return name[len("fairseq_cli."):]
    program = os.path.basename(sys.argv[0] if sys.argv else "")
    return program[len("fairseq-"):].replace("-", "_") if program.startswith("fairseq-") else None


def _module_run() -> Optional[str]:
    """The module of ``python -m MODULE`` that started this process (``None`` otherwise)."""
    argv = sys.orig_argv
    return argv[argv.index("-m") + 1] if "-m" in argv[:-1] else None


def running_fairseq_cli() -> bool:
    """True when this process is one of fairseq's command-line tools
    (``fairseq-train`` ..., or ``python -m fairseq_cli.<tool>``)."""
    return running_tool() is not None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    for name in ("--task", "--tokens-per-sample", "--context-window", "--save-dir", "--beam", "--prefix-size",
                 "--required-batch-size-multiple", "--sample-break-mode", "--max-len-a", "--max-len-b",
                 "--path", "--restore-file", "--finetune-from-model", "--optimizer", "--distributed-world-size",
                 "--model-overrides"):
        parser.add_argument(name)
    parser.add_argument("--arch", "-a")
    parser.add_argument("--help", "-h", action="store_true")
    for flag in ("--bf16", "--fp16", "--fp16-no-flatten-grads", "--cpu", "--sampling", "--score-reference",
                 "--memory-wiped"):
        parser.add_argument(flag, action="store_true")
    return parser


def command_line(argv: Optional[List[str]] = None) -> argparse.Namespace:
    """The options of this process's command line (``sys.argv[1:]`` unless ``argv``) that the
    plugin's checks and messages use; an option not given is ``None`` (a flag ``False``)."""
    known, _ = _parser().parse_known_args(sys.argv[1:] if argv is None else argv)
    return known


def cli_option(name: str, default: str) -> str:
    """The value of ``--name`` on this process's command line (``default`` if absent)."""
    value = getattr(command_line(), name.lstrip("-").replace("-", "_"), None)
    return default if value is None else value
