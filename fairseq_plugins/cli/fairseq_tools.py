"""``fairseq-longmem train | eval-lm | generate | interactive``: fairseq's own tools with the plugin.

Each runs the fairseq command-line tool of the same name in this process, with fairseq's own
options, and passes ``--user-dir`` itself: fairseq reads a checkpoint's model and task names
before it knows the plugin, so without ``--user-dir`` a plugin checkpoint ends in
``KeyError: "'_name'"`` and ``--task streaming_lm`` in ``invalid choice``
(docs/troubleshooting.md). ``fairseq-longmem eval-lm ARGS`` is ``fairseq-eval-lm ARGS --user-dir
fairseq_plugins``, with the plugin's one-line errors and option checks
(:mod:`fairseq_plugins.compat`).
"""

import importlib
import os
import sys
from typing import List, Optional

from fairseq_plugins.errors import ConfigError

PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# subcommand -> fairseq_cli module (and fairseq's tool name, fairseq-<name>)
TOOLS = {"train": "train", "eval-lm": "eval_lm", "generate": "generate", "interactive": "interactive"}


def run_tool(name: str, argv: List[str]) -> Optional[int]:
    """Run ``fairseq-<name> ARGV --user-dir <this package>`` in this process.

    Raises:
        ConfigError: ``--user-dir`` given (the wrapper passes it), or an option combination
            refused before fairseq starts (:func:`fairseq_plugins.compat.prechecks.check`).
    """
    if any(arg == "--user-dir" or arg.startswith("--user-dir=") for arg in argv):
        raise ConfigError(f"fairseq-longmem {name} passes --user-dir itself ({PACKAGE_DIR}): drop --user-dir "
                          f"(or run fairseq-{name} with it)")
    module = TOOLS[name]
    sys.argv = [f"fairseq-{name}", *argv, "--user-dir", PACKAGE_DIR]
    from fairseq_plugins import compat

    compat.install(module)
    return importlib.import_module(f"fairseq_cli.{module}").cli_main()


def train(argv: List[str], prog: str) -> Optional[int]:
    """``fairseq-longmem train``: ``fairseq-train`` with the plugin."""
    return run_tool("train", argv)


def eval_lm(argv: List[str], prog: str) -> Optional[int]:
    """``fairseq-longmem eval-lm``: ``fairseq-eval-lm`` with the plugin."""
    return run_tool("eval-lm", argv)


def generate(argv: List[str], prog: str) -> Optional[int]:
    """``fairseq-longmem generate``: ``fairseq-generate`` with the plugin."""
    return run_tool("generate", argv)


def interactive(argv: List[str], prog: str) -> Optional[int]:
    """``fairseq-longmem interactive``: ``fairseq-interactive`` with the plugin."""
    return run_tool("interactive", argv)
