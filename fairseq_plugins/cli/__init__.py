"""``fairseq-longmem``: the project's one command (``python -m fairseq_plugins.cli`` is the same).

Every tool around the fairseq command-line programs is a subcommand here::

    fairseq-longmem COMMAND [options]        # fairseq-longmem COMMAND --help: what it reads and writes

The table :data:`COMMANDS` maps a subcommand to ``"module:function"`` and its one-line help.
Only the chosen subcommand's module is imported, and it imports torch, fairseq and the plugin's
components (:func:`load_components`) only once its options are parsed, so that ``fairseq-longmem
--help`` and ``fairseq-longmem COMMAND --help`` answer at once (the fairseq tools' ``--help`` is
fairseq's own: it imports fairseq).
A command function takes ``(argv, prog)`` — its own arguments and the name to print in
usage and errors — and returns an exit status (``None`` counts as 0).

Bad input raises :class:`fairseq_plugins.errors.ConfigError` (the package's one error type);
:func:`main` prints it as one line ``fairseq-longmem COMMAND: error: ...`` with exit status 2,
an ``OSError`` as one line with the file name and status 1 — never a traceback.
"""

import argparse
import importlib
import os
import sys
from typing import Callable, Dict, List, Optional, Sequence, Tuple

PROG = "fairseq-longmem"

# subcommand -> ("module:function", one-line help); grouped by topic, one module per topic
COMMANDS: Dict[str, Tuple[str, str]] = {
    "options": ("fairseq_plugins.cli.options:main",
                "list the options every plugin component adds to the fairseq tools (--markdown FILE)"),
    "arms": ("fairseq_plugins.cli.arms:main",
             "run an experiment arm in this process, or query the registry (arms train|eval|list|budget|train-args ...)"),
    # data preparation (the Python stages of data-prep/*.sh)
    "prep": ("fairseq_plugins.cli.prep:main",
             "the Python stages of the data-prep pipelines: prep {lm,gpt2,summarization,sorting,recall,spm} ..."),
    # fairseq's own tools with --user-dir passed for you (docs/troubleshooting.md)
    "train": ("fairseq_plugins.cli.fairseq_tools:train", "fairseq-train with the plugin (fairseq's options)"),
    "eval-lm": ("fairseq_plugins.cli.fairseq_tools:eval_lm", "fairseq-eval-lm with the plugin (fairseq's options)"),
    "generate": ("fairseq_plugins.cli.fairseq_tools:generate",
                 "fairseq-generate with the plugin (fairseq's options)"),
    "interactive": ("fairseq_plugins.cli.fairseq_tools:interactive",
                    "fairseq-interactive with the plugin (fairseq's options)"),
    # generation on the hub interface (docs/generation.md)
    "continue": ("fairseq_plugins.cli.continue_:main",
                 "continue a text file with an infinite_former_lm checkpoint (prefill, then generate; stdout)"),
    "gpt2": ("fairseq_plugins.cli.gpt2:main",
             "GPT-2 with the memory: gpt2 convert (a Hugging Face folder) | tiny | check | updates (the recipe's)"),
    "precision-check": ("fairseq_plugins.cli.precision:main",
                        "mixed-precision training checks on a CUDA machine (scripts/gpu-checks.sh; --dry-run)"),
    "analyze": ("fairseq_plugins.cli.analyze:main",
                "where the long-term memory pays off and looks: analyze position | memory-map"),
    "bench": ("fairseq_plugins.cli.bench:main",
              "speed and memory of the models: bench train | generate | paired | memory | gpt2 (docs/benchmark.md)"),
    # summarization (docs/summarization.md)
    "summarize": ("fairseq_plugins.cli.summarize:main",
                  "summaries: score (ROUGE, sacreBLEU), lead, decoding-lengths, check-lengths, task-args, hypotheses, "
                  "facts (scores per fact of the facts corpus)"),
    # the comparisons' results (docs/results.md)
    "results": ("fairseq_plugins.cli.results:main",
                "one comparison table from several runs' result files: results lm | summarization ..."),
    "sorting": ("fairseq_plugins.cli.sorting:main",
                "the sorting task: sorting score (answer accuracy) | table | plot of a scripts/sorting.sh run"),
    "recall": ("fairseq_plugins.cli.recall:main",
               "recall by distance: recall score (accuracy per distance) | table | plot of a scripts/recall.sh run"),
}

def _usage() -> str:
    width = max(len(name) for name in COMMANDS)
    lines = [f"usage: {PROG} COMMAND [options]   ({PROG} COMMAND --help for its options)", "",
             "Tools of fairseq-longmem (∞-former and Fastformer for fairseq). Commands:", ""]
    lines += [f"  {name:<{width}}  {help_}" for name, (_, help_) in COMMANDS.items()]
    return "\n".join(lines)


def resolve(name: str) -> Callable[[List[str], str], Optional[int]]:
    """The function of subcommand ``name`` (imports its module)."""
    target, _ = COMMANDS[name]
    module, _, function = target.partition(":")
    return getattr(importlib.import_module(module), function)


def recipe_prog(argv: Sequence[str], prog: str) -> str:
    """The name a command's messages carry: ``--prog NAME`` of ``argv`` (the recipe that runs
    it, e.g. scripts/continue.sh) or ``prog``; read before parsing, so that argparse's own
    errors carry it too."""
    argv = list(argv)
    for i, arg in enumerate(argv):
        if arg == "--prog" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--prog="):
            return arg.split("=", 1)[1]
    return prog


def run_command(function: Callable[[List[str], str], Optional[int]], argv: Sequence[str],
                prog: str) -> int:
    """Call ``function(argv, prog)``; print a ``ConfigError`` or ``OSError`` as one line.

    Returns the function's status (``None``: 0), 2 after a ``ConfigError``, 1 after an
    ``OSError``, 141 (a shell's status for SIGPIPE) when the reader of stdout closed it (e.g.
    ``| head``), printing nothing; ``argparse``'s own exits (``--help``, bad options) pass
    through as they are.
    """
    from fairseq_plugins.errors import ConfigError

    try:
        return function(list(argv), prog) or 0
    except BrokenPipeError:
        # what is left in stdout's buffer goes nowhere, instead of failing again at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except ConfigError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"{prog}: error: {e.strerror or e}: {e.filename or ''}".rstrip(": "), file=sys.stderr)
        return 1


class ArgumentParser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` whose errors are one line, ``PROG: error: MESSAGE (PROG
    --help)``, exit status 2 (the usage block stays behind ``--help``); subparsers inherit it."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} ({self.prog} --help)\n")


def topic_parser(prog: str, doc: str):
    """``(parser, verbs)`` of a topic whose verbs are subparsers: the parser's description is
    ``doc``'s first line and its epilog the rest, as written; ``verbs.add_parser(NAME, help=...)``
    adds a verb (``args.verb`` holds its name; one is required)."""
    parser = ArgumentParser(prog=prog, description=doc.split("\n")[0],
                            formatter_class=argparse.RawDescriptionHelpFormatter,
                            epilog="\n".join(doc.split("\n")[1:]))
    return parser, parser.add_subparsers(dest="verb", required=True, metavar="VERB")


def parse_verb_args(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.Namespace:
    """``parser.parse_args(argv)`` for a topic whose verbs are subparsers (``dest="verb"``), with
    an unknown option reported by the verb's parser (``PROG VERB: error: unrecognized arguments:
    ...``, exit 2) rather than by the topic's."""
    args, extra = parser.parse_known_args(list(argv))
    if extra:
        verbs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        verbs.choices[args.verb].error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def load_components() -> None:
    """Import fairseq and register the plugin's models, tasks and criterions (what a command that
    loads a checkpoint calls after parsing its options)."""
    import fairseq_plugins

    fairseq_plugins.load_components()


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``fairseq-longmem``: dispatch ``argv[0]`` to its subcommand."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage(), file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"{PROG}: error: unknown command '{name}'; choose from {', '.join(COMMANDS)} "
              f"({PROG} --help)", file=sys.stderr)
        return 2
    return run_command(resolve(name), rest, f"{PROG} {name}")
