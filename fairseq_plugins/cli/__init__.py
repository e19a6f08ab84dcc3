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

import importlib
import sys
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from fairseq_plugins.lab.common.cli import run_command

PROG = "fairseq-longmem"

# subcommand -> ("module:function", one-line help); grouped by topic, one module per topic
COMMANDS: Dict[str, Tuple[str, str]] = {
    "options": ("fairseq_plugins.cli.options:main",
                "list the options every plugin component adds to the fairseq tools (--markdown FILE)"),
    "arms": ("fairseq_plugins.lab.common.arms_cli:main",
             "run an experiment arm in this process, or query the registry (arms train|eval|list|budget|train-args ...)"),
    # data preparation (the Python stages of data-prep/*.sh)
    "prep": ("fairseq_plugins.cli.prep:main",
             "the Python stages of the data-prep pipelines: prep {lm,gpt2,summarization,sorting,recall,spm} ..."),
    # fairseq's own tools with --user-dir passed for you (docs/troubleshooting.md)
    "train": ("fairseq_plugins.lab.common.fairseq_tools:train", "fairseq-train with the plugin (fairseq's options)"),
    "eval-lm": ("fairseq_plugins.lab.common.fairseq_tools:eval_lm", "fairseq-eval-lm with the plugin (fairseq's options)"),
    "generate": ("fairseq_plugins.lab.common.fairseq_tools:generate",
                 "fairseq-generate with the plugin (fairseq's options)"),
    "interactive": ("fairseq_plugins.lab.common.fairseq_tools:interactive",
                    "fairseq-interactive with the plugin (fairseq's options)"),
    # generation on the hub interface (docs/generation.md)
    "continue": ("fairseq_plugins.lab.generation.cli:main",
                 "continue a text file with an infinite_former_lm checkpoint (prefill, then generate; stdout)"),
    "gpt2": ("fairseq_plugins.lab.gpt2.cli:main",
             "GPT-2 with the memory: gpt2 convert (a Hugging Face folder) | tiny | check | updates (the recipe's)"),
    "precision-check": ("fairseq_plugins.lab.precision.cli:main",
                        "mixed-precision training checks on a CUDA machine (scripts/gpu-checks.sh; --dry-run)"),
    "analyze": ("fairseq_plugins.lab.lm.cli:main",
                "where the long-term memory pays off and looks: analyze position | memory-map"),
    "bench": ("fairseq_plugins.lab.bench.cli:main",
              "speed and memory of the models: bench train | generate | paired | memory | gpt2 (docs/benchmark.md)"),
    # summarization (docs/summarization.md)
    "summarize": ("fairseq_plugins.lab.summarization.cli:main",
                  "summaries: score (ROUGE, sacreBLEU), lead, decoding-lengths, check-lengths, task-args, hypotheses, "
                  "facts (scores per fact of the facts corpus)"),
    # the comparisons' results (docs/results/)
    "results": ("fairseq_plugins.cli.results:main",
                "one comparison table from several runs' result files: results lm | summarization ..."),
    "sorting": ("fairseq_plugins.lab.sorting.cli:main",
                "the sorting task: sorting score (answer accuracy) | table | plot of a fairseq_plugins/lab/sorting/sorting.sh run"),
    "copy": ("fairseq_plugins.lab.copy.cli:main",
             "the copy probe of the summarizer's reads: copy train (one rung, one seed) | table (docs/results/copy.md)"),
    "recall": ("fairseq_plugins.lab.recall.cli:main",
               "recall by distance: recall score (accuracy per distance) | table | plot of a fairseq_plugins/lab/recall/recall.sh run"),
    "mqar": ("fairseq_plugins.lab.mqar.cli:main", "multi-query associative recall: mqar score | table | plot"),
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


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Dispatch ``argv[0]`` to its subcommand (what the ``fairseq-longmem`` process runs after
    :func:`entry`)."""
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


def entry() -> int:
    """The ``fairseq-longmem`` process: quiet the libraries' import-time messages (before any is
    imported: they are not the user's; ``QUIET=0`` keeps them), then :func:`main`."""
    from fairseq_plugins.lab.common.quiet import quiet_imports

    quiet_imports()
    return main()
