"""``fairseq-longmem train | eval-lm | generate | interactive``: fairseq's own tools with the plugin.

Each runs the fairseq command-line tool of the same name in this process, with fairseq's own
options, and passes ``--user-dir`` itself: fairseq reads a checkpoint's model and task names
before it knows the plugin, so without ``--user-dir`` a plugin checkpoint ends in
``KeyError: "'_name'"`` and ``--task streaming_lm`` in ``invalid choice``
(docs/troubleshooting.md). ``fairseq-longmem eval-lm ARGS`` is ``fairseq-eval-lm ARGS --user-dir
fairseq_plugins``, with the plugin's one-line errors and option checks
(:mod:`fairseq_plugins.compat`), without fairseq's setup messages (:mod:`fairseq_plugins.lab.common.quiet`);
Ctrl-C is one line saying what the run kept (:func:`interrupted_message`), exit status 130.
The recipes in ``scripts/`` run an experiment arm through :func:`run_tool` as well
(``fairseq-longmem arms train|eval``, :mod:`fairseq_plugins.lab.common.arms_cli`).
"""

import importlib
import os
import sys
from typing import List

import fairseq_plugins
from fairseq_plugins.errors import ConfigError

PACKAGE_DIR = os.path.dirname(os.path.abspath(fairseq_plugins.__file__))

# subcommand -> fairseq_cli module (and fairseq's tool name, fairseq-<name>)
TOOLS = {"train": "train", "eval-lm": "eval_lm", "generate": "generate", "interactive": "interactive"}


def interrupted_message(name: str, argv: List[str]) -> str:
    """What ``fairseq-<name> ARGV`` leaves when Ctrl-C stops it, in one line: fairseq-train's
    checkpoints (each written under a temporary name, then renamed: whole), fairseq-generate's
    ``--results-path`` files (cut at the interrupt); the other tools write nothing."""
    import argparse

    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--save-dir", default="checkpoints")
    parser.add_argument("--results-path")
    given, _ = parser.parse_known_args(argv)
    if name == "train":
        save = given.save_dir
        kept = sorted(n for n in os.listdir(save) if n.endswith(".pt")) if os.path.isdir(save) else []
        if not kept:
            return "interrupted; no checkpoint saved yet"
        return (f"interrupted; kept in {save}: {', '.join(kept)} (each saved whole); the same command again resumes "
                "from checkpoint_last.pt")
    if name == "generate" and given.results_path and os.path.isdir(given.results_path):
        return (f"interrupted; the files in --results-path {given.results_path} hold the hypotheses written before "
                "it only")
    return "interrupted; nothing written"


def run_tool(name: str, argv: List[str]) -> int:
    """Run ``fairseq-<name> ARGV --user-dir <this package>`` in this process; its exit status.

    fairseq's setup messages and the libraries' warnings are hidden
    (:func:`fairseq_plugins.lab.common.quiet.quiet_tool`; ``QUIET=0`` shows them). The tool's own
    module is imported first, so that its logging goes where the fairseq tool sends it
    (``fairseq-train``: stdout). A fault of the run is printed as ``fairseq_plugins: error: ...``
    (:mod:`fairseq_plugins.compat.hook`, status 1), as the fairseq tool with ``--user-dir`` prints it;
    Ctrl-C as ``fairseq-longmem NAME: interrupted; ...`` (:func:`interrupted_message`), then the process ends
    at once with status 130 (``os._exit``: native threads of the interrupted tool cannot abort the exit).

    Raises:
        ConfigError: ``--user-dir`` given (the wrapper passes it).
    """
    if any(arg == "--user-dir" or arg.startswith("--user-dir=") for arg in argv):
        raise ConfigError(f"fairseq-longmem {name} passes --user-dir itself ({PACKAGE_DIR}): drop --user-dir "
                          f"(or run fairseq-{name} with it)")
    module = TOOLS[name]
    sys.argv = [f"fairseq-{name}", *argv, "--user-dir", PACKAGE_DIR]
    from fairseq_plugins.lab.common.quiet import quiet_tool

    quiet_tool()
    tool = importlib.import_module(f"fairseq_cli.{module}")
    import fairseq_plugins
    from fairseq_plugins import compat
    from fairseq_plugins.compat import hook

    fairseq_plugins.load_components()
    try:
        compat.install(module)
        tool.cli_main()
    except KeyboardInterrupt:
        from fairseq_plugins.lab.common.cli import INTERRUPTED

        hook.remove_new_empty_save_dir()  # a --save-dir this run made and left empty
        sys.stdout.flush()
        print(f"fairseq-longmem {name}: {interrupted_message(name, argv)}", file=sys.stderr, flush=True)
        # ends here: the interrupted tool can leave native threads running (the autograd engine's,
        # the data loader's), and an ordinary interpreter exit then aborts on them ("terminate
        # called without an active exception", status -6); everything it wrote is closed by now
        os._exit(INTERRUPTED)
    except Exception as exc:  # noqa: BLE001 - the hook prints it as fairseq's tool would end (one line or a traceback)
        hook.excepthook(type(exc), exc, exc.__traceback__)
        return 1
    return 0


def train(argv: List[str], prog: str) -> int:
    """``fairseq-longmem train``: ``fairseq-train`` with the plugin."""
    return run_tool("train", argv)


def eval_lm(argv: List[str], prog: str) -> int:
    """``fairseq-longmem eval-lm``: ``fairseq-eval-lm`` with the plugin."""
    return run_tool("eval-lm", argv)


def generate(argv: List[str], prog: str) -> int:
    """``fairseq-longmem generate``: ``fairseq-generate`` with the plugin."""
    return run_tool("generate", argv)


def interactive(argv: List[str], prog: str) -> int:
    """``fairseq-longmem interactive``: ``fairseq-interactive`` with the plugin."""
    return run_tool("interactive", argv)
