"""What a user sees of fairseq and its libraries inside a ``fairseq-longmem`` process.

fairseq's tools log their whole configuration, the model's module tree and the batch
iterator's bookkeeping, and hydra, torch, omegaconf and fairseq warn about deprecations a user
cannot act on. In the ``fairseq-longmem`` command (the recipes in ``scripts/`` run fairseq's
tools through it, docs/troubleshooting.md) they are hidden in the process itself:

* :func:`quiet_imports` (when the package is imported by the command): no tensorboardX line,
  no library warnings (``warnings.filterwarnings``);
* :func:`quiet_tool` (before a fairseq tool runs, :func:`fairseq_plugins.lab.common.fairseq_tools.run_tool`):
  a :class:`NoiseFilter` on each fairseq logger of :data:`NOISE` drops the records that ask
  nothing of the user, and a warning raised inside an installed package (``site-packages``,
  ``dist-packages``) is not shown.

Everything else is shown as the tool writes it: every progress, validation, checkpoint and
result line, this project's own warnings, errors and tracebacks; the plugin's one-line error
(:mod:`fairseq_plugins.compat.hook`) comes last. The first time something is hidden, one line
on stderr (:data:`NOTE`) says so. ``QUIET=0`` in the environment shows everything. Nothing
here raises: a filter that cannot decide keeps the record.
"""

import logging
import os
import re
import sys
import warnings
from typing import Callable, Optional, Sequence, Tuple

NOTE = "(fairseq's setup messages and the libraries' warnings are hidden; QUIET=0 shows them)"
LIBRARY_PATHS = ("site-packages", "dist-packages")  # a warning raised in an installed package
LIBRARY_MODULES = ("hydra", "torch", "fairseq", "omegaconf")
HYDRA_SCHEMA = r"\s*'config' is validated against ConfigStore schema with the same name"
TOOL_LOGGERS = tuple(f"fairseq_cli.{tool}" for tool in ("train", "eval_lm", "generate", "interactive", "validate"))

# fairseq's records that ask nothing of the user: (logger names, level or None for any, the
# message's start as a regular expression, matched with re.match)
NOISE: Tuple[Tuple[Tuple[str, ...], Optional[int], str], ...] = (
    (("fairseq.tasks.text_to_speech",), None, r"Please install tensorboardX"),
    (TOOL_LOGGERS, None, r"\{'_name': "),  # the whole configuration on one line (the checkpoint keeps it)
    (("fairseq_cli.train",), None, r"[A-Z]\w*\((\n|$)"),  # the model's module tree
    (("fairseq_cli.train",), None, r"num\. expert model params: 0 \(|Start iterating over samples$"),
    (("fairseq.tasks.fairseq_task",), None, r"(can_reuse_epoch_itr|reuse_dataloader|rebuild_batches) = |"
                                            r"creating new batches for epoch "),
    (("fairseq.data.iterators",), None, r"grouped total_num_itrs = "),
    (("fairseq.trainer",), None, r"detected shared parameter: "),
    (("fairseq.checkpoint_utils",), None, r"State of \w+ is ready to be persisted with the checkpoint$"),
    (("fairseq.utils",), None, r"--user-dir=\S+ has already been imported\.$"),  # the command imported it
    (("hydra.core.utils",), logging.DEBUG, r""),
    # the plugin's start-up list of what it changes in fairseq (docs/design/fairseq.md §7)
    (("fairseq_plugins.compat",), logging.INFO, r"fairseq_plugins changes in fairseq for this process: "),
)


def quiet_imports() -> None:
    """Before importing fairseq: no tensorboardX line, no library warnings (unless ``QUIET=0``)."""
    if os.environ.get("QUIET") == "0":
        return
    logging.getLogger("fairseq.tasks.text_to_speech").setLevel(logging.WARNING)
    for module in LIBRARY_MODULES:
        warnings.filterwarnings("ignore", module=rf"{module}(\.|$)")
    # hydra's schema warning, which Python attributes to whoever called fairseq (or to ``sys``)
    warnings.filterwarnings("ignore", message=HYDRA_SCHEMA)


class _Note:
    """The one line that says something is hidden, written once before the first hidden thing."""

    def __init__(self):
        self.written = False

    def __call__(self) -> None:
        if self.written:
            return
        self.written = True
        try:
            sys.stdout.flush()  # what the tool wrote to stdout comes first
            sys.stderr.write(NOTE + "\n")
            sys.stderr.flush()
        except (OSError, ValueError):  # nobody reads any more: nothing to tell
            pass


class NoiseFilter(logging.Filter):
    """Drops the records of :data:`NOISE` of one logger; ``on_drop()`` runs for each dropped one."""

    def __init__(self, rules: Sequence[Tuple[Optional[int], "re.Pattern[str]"]], on_drop: Callable[[], None]):
        super().__init__()
        self.rules = list(rules)
        self.on_drop = on_drop

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
            if any((level is None or record.levelno == level) and pattern.match(message)
                   for level, pattern in self.rules):
                self.on_drop()
                return False
        except Exception:  # noqa: BLE001 - a filter must never cost the user a record, nor raise
            pass
        return True


def library_warning(filename: str, message: object) -> bool:
    """Whether a warning is a library's: raised in an installed package, or hydra's schema
    warning (which Python attributes to ``sys``)."""
    if filename == "sys":
        return "hydra" in str(message).lower()
    return any(part in filename for part in LIBRARY_PATHS)


_installed: Optional[_Note] = None


def quiet_tool() -> None:
    """Hide fairseq's and the libraries' noise in this process (see the module docstring);
    idempotent, and nothing at all with ``QUIET=0`` in the environment."""
    global _installed
    if os.environ.get("QUIET") == "0" or _installed is not None:
        return
    note = _installed = _Note()
    quiet_imports()
    rules = {}
    for names, level, pattern in NOISE:
        for name in names:
            rules.setdefault(name, []).append((level, re.compile(pattern)))
    for name, logger_rules in rules.items():
        logging.getLogger(name).addFilter(NoiseFilter(logger_rules, note))
    shown = warnings.showwarning

    def showwarning(message, category, filename, lineno, file=None, line=None):
        try:
            hide = library_warning(filename, message)
        except Exception:  # noqa: BLE001 - when in doubt, show it
            hide = False
        if hide:
            note()
            return
        shown(message, category, filename, lineno, file, line)

    warnings.showwarning = showwarning


def quiet_config_notices() -> None:
    """Inside a ``fairseq-longmem`` tool that builds fairseq configs: no hydra notices about
    config composition (raised on behalf of the caller, so the module filters of
    :func:`quiet_imports` miss them), unless ``QUIET=0``."""
    if os.environ.get("QUIET") == "0":
        return
    logging.getLogger("hydra").setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", category=UserWarning, message="(?s).*(hydra|ConfigStore|strict flag)")


def quiet_progress_bars() -> None:
    """Inside a ``fairseq-longmem`` tool that saves or loads Hugging Face models: no
    transformers progress bars (unless ``QUIET=0``; imports transformers when it is installed)."""
    if os.environ.get("QUIET") == "0":
        return
    try:
        from transformers.utils import logging as transformers_logging
    except ImportError:
        return
    transformers_logging.disable_progress_bar()
