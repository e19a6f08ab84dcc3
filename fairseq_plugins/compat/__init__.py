"""Every workaround of a fairseq behaviour, in one place, for the fairseq version it answers.

Written for fairseq 0.12 (:data:`FAIRSEQ_SERIES`; docs/design/fairseq.md says which builds
work and why). Importing the package from Python changes nothing global; only in a fairseq
command-line process that loads the plugin (``--user-dir fairseq_plugins``) does
:func:`install` run, before fairseq builds a task or loads a checkpoint:

============================  ===============================================================
module                        the fairseq behaviour it answers
============================  ===============================================================
:mod:`.hook`                  a traceback for a bad option or bad data: one line
                              ``fairseq_plugins: error: ...`` for a ``ConfigError`` in the
                              exception's chain; a refused run's new, empty ``--save-dir`` removed
:mod:`.diagnoses`             faults only fairseq's traceback names (non-finite gradients,
                              bare option assertions, a refused broadcast)
:mod:`.data_files`            a split, dictionary or language pair fairseq's own tasks find
                              missing from the data folder: one line naming what it holds
:mod:`.prechecks`             options fairseq fails on later with another message
                              (``--context-window`` of eval-lm, ``--bf16`` off a GPU): refused
                              from the command line before fairseq starts
:mod:`.checkpoint_files`      a checkpoint fairseq would fail to read deep in its loading
                              (missing, truncated, corrupt, refused by ``weights_only``):
                              refused before fairseq starts
:mod:`.teardown`              a training process or rank left to the interpreter's
                              shutdown, where it may abort after saving: it exits at once
:mod:`.distributed_resume`    several ranks resuming: rank 0's checkpoint sent to the others
                              through a ``torch.load`` that refuses it (each rank reads it)
:mod:`.checkpoints`           ``torch.load(weights_only=True)`` refusing fairseq's own
                              ``argparse.Namespace`` configs (``transformer`` checkpoints)
:mod:`.inference`             generate dropping a last batch of another size (every model);
                              eval-lm skipping samples beyond the model's positions
:mod:`.generation`            ``language_modeling`` prompts that beam search cannot follow, that
                              the length limit cuts, or that are empty: refused before generating
:mod:`.ngram_blocking`        ``--no-repeat-ngram-size`` ignored on a CPU (generate and
                              interactive: the Python blocker compares padding, not the hypothesis)
:mod:`.overrides`             ``--model-overrides`` naming an option a checkpoint's config
                              predates, dropped without a word (generate, interactive, eval-lm)
============================  ===============================================================

:func:`install` logs one line naming every fairseq behaviour it changed in the process
(:data:`CHANGES`). With ``FAIRSEQ_LONGMEM_STOCK=1`` in the environment (:data:`STOCK_ENV`) it
changes none: fairseq runs as shipped with the plugin's components registered, its option
checks and one-line errors kept (they refuse, but change no result); docs/design/fairseq.md §7.

On another fairseq series the patches of fairseq's classes and functions (:mod:`.inference`,
:mod:`.generation`, :mod:`.ngram_blocking`, :mod:`.overrides`) are not installed (one warning says so): they wrap methods whose
behaviour is that of 0.12; the one-line hook, the option checks and the allow-list apply
to any version.

Three modules are what the workarounds share, not workarounds: :mod:`.process` (which tool this
process runs, and its command line), :mod:`.frames` (which functions an exception passed
through) and :mod:`.components` (the one list of the plugin's registered components).
"""

import logging
import os
from typing import List, Optional

from fairseq_plugins.compat.process import command_line, running_fairseq_cli, running_tool

logger = logging.getLogger(__name__)

FAIRSEQ_SERIES = "0.12."
STOCK_ENV = "FAIRSEQ_LONGMEM_STOCK"  # =1: install none of the changes below (stock fairseq behaviour)

# what each change does to fairseq, in the start-up line's words (docs/design/fairseq.md §7)
CHANGES = {
    "checkpoints": "torch.load accepts the argparse.Namespace of fairseq's own checkpoints",
    "teardown": "a training process or rank that finished exits without the interpreter's shutdown",
    "all_ranks_load": "every rank reads the checkpoint it resumes from (--load-checkpoint-on-all-dp-ranks)",
    "every_example": "generate keeps a last batch of any size",
    "prompt_checks": "language_modeling prompts beam search cannot follow, cut by the length limit or empty are "
                     "refused",
    "ngram_blocking": "the CPU --no-repeat-ngram-size blocker reads the hypothesis",
    "skip_empty_lines": "interactive skips empty input lines",
    "no_skipped_samples": "eval-lm refuses samples longer than the model's positions instead of skipping them",
    "declared_overrides": "model overrides also set a plugin model's options that the checkpoint's config predates, "
                          "and one naming no option is refused",
}

__all__ = ["CHANGES", "FAIRSEQ_SERIES", "STOCK_ENV", "install", "running_fairseq_cli", "running_tool"]


def patches_apply(version: str) -> bool:
    """Whether the patches of fairseq's classes were written for fairseq ``version``."""
    return version.startswith(FAIRSEQ_SERIES)


def install(tool: Optional[str] = None) -> None:
    """Install the workarounds for fairseq tool ``tool`` (default: this process's,
    :func:`running_tool`) and run the option checks that can run before fairseq starts.

    Raises:
        ConfigError: a combination of options fairseq cannot run as asked
            (:func:`.prechecks.check`); the hook is installed first, so a CLI prints it as one line.
    """
    import fairseq

    from fairseq_plugins.compat import checkpoints, hook, prechecks

    tool = tool or running_tool()
    hook.install()
    stock = os.environ.get(STOCK_ENV, "") not in ("", "0")
    if not stock:  # before the checks, which read the checkpoints as fairseq will
        checkpoints.allow_fairseq_globals()
    prechecks.check(tool)
    if stock:
        logger.info("fairseq_plugins: %s=1: fairseq's behaviour is unchanged in this process (the plugin's "
                    "components are registered; its option checks and one-line errors stay)", STOCK_ENV)
        return
    changed = ["checkpoints", *_install_changes(tool, fairseq.__version__)]
    logger.info("fairseq_plugins changes in fairseq for this process: %s (%s=1 runs stock fairseq; "
                "docs/design/fairseq.md)", "; ".join(CHANGES[name] for name in changed), STOCK_ENV)


def _install_changes(tool: Optional[str], version: str) -> List[str]:
    """Install the changes of fairseq's behaviour that apply to ``tool``; their names (:data:`CHANGES`)."""
    from fairseq_plugins.compat import distributed_resume, teardown

    changed = []
    if tool == "train":
        teardown.install()
        changed.append("teardown")
        if distributed_resume.all_ranks_load():
            changed.append("all_ranks_load")
    if not patches_apply(version):
        logger.warning("fairseq %s: the plugin's patches for fairseq %sx are not installed (generate may drop "
                       "a last batch; see fairseq_plugins/compat)", version, FAIRSEQ_SERIES)
        return changed
    from fairseq_plugins.compat import generation, inference, ngram_blocking, overrides

    if tool in ("generate", "interactive", "eval_lm"):
        overrides.install()
        changed.append("declared_overrides")
    if tool in ("generate", "interactive"):
        inference.install_every_example()
        generation.install_prompt_checks(interactive=tool == "interactive")
        ngram_blocking.install()
        changed += ["every_example", "prompt_checks", "ngram_blocking"]
    if tool == "interactive" and command_line().task == "language_modeling":
        generation.install_skip_empty_lines()
        changed.append("skip_empty_lines")
    if tool == "eval_lm":
        inference.install_no_skipped_samples()
        changed.append("no_skipped_samples")
    return changed
