"""Which fairseq command-line tool this process is, and what its command line says.

fairseq's tools import the plugin while they parse their options (``--user-dir``), before
any configuration object exists, so the checks that run then (:mod:`.prechecks`) and the
one-line messages read the command line itself, with one small ``argparse`` parser of the
options they use (:func:`command_line`); where a check needs what fairseq makes of the whole
line (defaults, the positional data folder), :func:`fairseq_command_line` asks fairseq's own
parser of the tool.
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


# fairseq's parser of each tool (a name in fairseq.options)
FAIRSEQ_PARSERS = {"train": "get_training_parser", "eval_lm": "get_eval_lm_parser",
                   "generate": "get_generation_parser", "interactive": "get_interactive_generation_parser",
                   "validate": "get_validation_parser"}


def fairseq_command_line(tool: Optional[str], argv: Optional[List[str]] = None, strict: bool = False):
    """fairseq's own parse of this process's command line (``sys.argv[1:]`` unless ``argv``) as
    fairseq tool ``tool`` parses it: an ``argparse.Namespace`` with every default, or ``None``
    for another tool or where fairseq's parser refuses the line (it then says why itself, when
    the tool runs). ``strict``: refuse unknown options, as the tools do; otherwise ignore them.
    The plugin's architectures must be registered (``--arch`` and its options)."""
    import contextlib
    import io

    name = FAIRSEQ_PARSERS.get(tool or "")
    if name is None:
        return None
    from fairseq import options

    # without --user-dir: the plugin is imported already, and fairseq would log so once more (its
    # parser builders read --user-dir from sys.argv itself, hence the swap, undone at once)
    given, line = sys.argv[1:] if argv is None else argv, []
    for i, arg in enumerate(given):
        if arg.startswith("--user-dir=") or arg == "--user-dir" or (i and given[i - 1] == "--user-dir"):
            continue
        line.append(arg)
    saved = sys.argv
    try:
        sys.argv = [saved[0] if saved else "fairseq", *line]
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            parsed = options.parse_args_and_arch(getattr(options, name)(), line, parse_known=not strict)
    except (SystemExit, Exception):  # noqa: BLE001 - fairseq's own parse reports it
        return None
    finally:
        sys.argv = saved
    return parsed if strict else parsed[0]
