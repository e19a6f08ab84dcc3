"""What every ``fairseq-longmem`` command shares: the name its messages carry, one-line errors,
argparse parsers whose errors are one line, topics of verbs, and the registration of the plugin's
components (docs/README.md, "Command-line conventions").

A command function takes ``(argv, prog)`` — its own arguments and the name to print in usage and
errors — and returns an exit status (``None`` counts as 0); :func:`run_command` prints a
:class:`~fairseq_plugins.errors.ConfigError` as one line ``PROG: error: ...`` with exit status 2,
an ``OSError`` as one line with the file name and status 1, and Ctrl-C as one line saying what
was kept, status 130 — never a traceback.

Numbers are checked where an option is declared: ``type=positive_int`` (and
:func:`non_negative_int`, :func:`positive_float`) makes argparse refuse a bad value in its one
line, ``PROG: error: argument --batch-size: must be a positive integer, got '0'``, before any work.
"""

import argparse
import math
import os
import re
import sys
from typing import Callable, List, Optional, Sequence

# the exit status of a process a shell stopped with Ctrl-C (128 + SIGINT)
INTERRUPTED = 130


def _number(text: str, kind: type, minimum: float, strict: bool):
    """``kind(text)`` if it is finite and at least (``strict``: above) ``minimum``.

    Raises:
        argparse.ArgumentTypeError: naming what the option takes (argparse prefixes the option).
    """
    what = {(int, True): "a positive integer", (int, False): "an integer >= 0",
            (float, True): "a positive number", (float, False): "a number >= 0"}[kind, strict]
    try:
        value = kind(text)
    except (TypeError, ValueError):
        value = None
    if value is None or (kind is float and not math.isfinite(value)) or value < minimum or \
            (strict and value == minimum):
        raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}")
    return value


def positive_int(text: str) -> int:
    """argparse ``type``: an integer ≥ 1 (a count: examples, a batch, repeats, a size).

    Raises:
        argparse.ArgumentTypeError: anything else (argparse prints it as its one-line error).
    """
    return _number(text, int, 0, True)


def non_negative_int(text: str) -> int:
    """argparse ``type``: an integer ≥ 0 (a seed, untimed repeats, a count where 0 means none).

    Raises:
        argparse.ArgumentTypeError: anything else (argparse prints it as its one-line error).
    """
    return _number(text, int, 0, False)


def positive_float(text: str) -> float:
    """argparse ``type``: a finite number > 0 (seconds, megabytes, a temperature).

    Raises:
        argparse.ArgumentTypeError: anything else (argparse prints it as its one-line error).
    """
    return _number(text, float, 0.0, True)


def interrupted_message(written: Sequence[str], in_place: Sequence[str] = ()) -> str:
    """What Ctrl-C leaves, in words: ``written`` are the outputs renamed into place before it
    (:func:`fairseq_plugins.lab.common.files.write_atomically`: each whole), ``in_place`` those
    written in place (:func:`~fairseq_plugins.lab.common.files.written_in_place`: maybe cut short)."""
    parts = []
    if written:
        parts.append(f"written whole before it: {', '.join(written)}")
    cut = [p for p in dict.fromkeys(in_place) if p not in written]
    if cut:
        parts.append(f"left incomplete: {', '.join(cut)} (run the command again to rebuild them)")
    return "interrupted; " + ("; ".join(parts) if parts else "nothing written")


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
    """Call ``function(argv, prog)``; print a ``ConfigError``, an ``OSError`` or Ctrl-C as one line.

    Returns the function's status (``None``: 0), 2 after a ``ConfigError``, 1 after an
    ``OSError``, 130 after Ctrl-C (``PROG: interrupted; nothing written``, or the outputs
    written whole before it: :func:`interrupted_message`), 141 (a shell's status for SIGPIPE)
    when the reader of stdout closed it (e.g. ``| head``), printing nothing; ``argparse``'s own
    exits (``--help``, bad options) pass through as they are.
    """
    from fairseq_plugins.errors import ConfigError
    from fairseq_plugins.lab.common import files

    before, in_place = len(files.WRITTEN), len(files.IN_PLACE)
    try:
        return function(list(argv), prog) or 0
    except KeyboardInterrupt:
        message = interrupted_message(files.WRITTEN[before:], files.IN_PLACE[in_place:])
        print(f"{prog}: {message}", file=sys.stderr, flush=True)
        return INTERRUPTED
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


def plain(text: Optional[str]) -> Optional[str]:
    """``text`` (a docstring's lines) as a terminal shows it: reST roles and literals without their
    markup (``:mod:`~a.b``` -> ``b``, ````x```` -> ``x``)."""
    if not text:
        return text
    text = re.sub(r":[a-z]+:`~[\w.]*?\.?(\w+)`", r"\1", text)
    text = re.sub(r":[a-z]+:`([^`]+)`", r"\1", text)
    return re.sub(r"``([^`]+)``", r"\1", text)


class ArgumentParser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` whose errors are one line, ``PROG: error: MESSAGE (PROG
    --help)``, exit status 2 (the usage block stays behind ``--help``); subparsers inherit it.
    Its description and epilog are shown without reST markup (:func:`plain`)."""

    def __init__(self, *args, **kwargs):
        for key in ("description", "epilog"):
            if key in kwargs:
                kwargs[key] = plain(kwargs[key])
        super().__init__(*args, **kwargs)

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
