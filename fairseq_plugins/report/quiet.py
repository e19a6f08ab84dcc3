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
