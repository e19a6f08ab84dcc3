"""Quiet imports of fairseq and its libraries inside a ``fairseq-longmem`` tool.

fairseq logs a tensorboardX hint at import and hydra, torch, omegaconf and fairseq warn about
deprecations a user cannot act on; :func:`quiet_imports` silences those in this process
(``QUIET=0`` in the environment keeps everything, as for the recipes' logs).
"""

import logging
import os
import warnings


def quiet_imports() -> None:
    """Before importing fairseq: no tensorboardX line, no library warnings (unless ``QUIET=0``)."""
    if os.environ.get("QUIET") == "0":
        return
    logging.getLogger("fairseq.tasks.text_to_speech").setLevel(logging.WARNING)
    for module in ("hydra", "torch", "fairseq", "omegaconf"):
        warnings.filterwarnings("ignore", module=rf"{module}(\.|$)")


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
