"""What every ``fairseq-longmem`` command shares: the name its messages carry, one-line errors,
argparse parsers whose errors are one line, topics of verbs, and the registration of the plugin's
components (docs/README.md, "Command-line conventions").

A command function takes ``(argv, prog)`` — its own arguments and the name to print in usage and
errors — and returns an exit status (``None`` counts as 0); :func:`run_command` prints a
:class:`~fairseq_plugins.errors.ConfigError` as one line ``PROG: error: ...`` with exit status 2
and an ``OSError`` as one line with the file name and status 1 — never a traceback.
"""

import argparse
import os
import sys
from typing import Callable, List, Optional, Sequence


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
