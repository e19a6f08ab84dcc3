"""The one small hook: an exception's chain printed as one line in a fairseq CLI process.

:func:`excepthook` prints ``fairseq_plugins: error: <message>`` for a
:class:`~fairseq_plugins.errors.ConfigError` anywhere in the exception's chain (fairseq
re-raises some errors as a bare ``Exception``) and for the faults that only fairseq's
traceback can name (:mod:`.diagnoses`); every other exception keeps Python's report.
Either way the line comes last (after whatever fairseq logged to stdout), and a save
directory that this process created and left empty (``fairseq-train`` makes ``--save-dir``
before the plugin's checks run) is removed again, so that a refused run leaves nothing
behind; a folder that existed before the process loaded the plugin is never touched.
"""

import os
import sys
from typing import Optional

from fairseq_plugins.compat.diagnoses import chain, fault_message
from fairseq_plugins.compat.process import cli_option
from fairseq_plugins.errors import ConfigError

PREFIX = "fairseq_plugins: error: "


def one_line_message(exc: BaseException) -> Optional[str]:
    """What :func:`excepthook` prints for ``exc`` (without the prefix), or ``None`` to
    keep Python's traceback."""
    found = next((link for link in chain(exc) if isinstance(link, ConfigError)), None)
    if found is not None:
        return str(found)
    return fault_message(exc)


# the outermost folder of --save-dir that did not exist when install() ran (None: it all existed)
_new_save_dir: Optional[str] = None


def _first_missing_folder(path: str) -> Optional[str]:
    """The outermost folder of ``path`` that does not exist (``path`` itself, or an ancestor)."""
    path = os.path.abspath(path)
    if os.path.exists(path):
        return None
    while not os.path.exists(os.path.dirname(path)):
        path = os.path.dirname(path)
    return path


def remove_new_empty_save_dir() -> None:
    """Remove the folders of ``--save-dir`` created since :func:`install` if they are
    still empty (innermost first; ``os.rmdir`` never removes a folder with anything in it)."""
    if _new_save_dir is None:
        return
    folder = os.path.abspath(cli_option("--save-dir", "checkpoints"))
    while True:
        try:
            os.rmdir(folder)
        except OSError:  # not empty, already gone, or not ours to remove
            return
        if folder == _new_save_dir:
            return
        folder = os.path.dirname(folder)


def excepthook(exc_type, exc, tb) -> None:
    """``sys.excepthook`` of a fairseq CLI process (see the module docstring)."""
    remove_new_empty_save_dir()
    message = one_line_message(exc)
    sys.stdout.flush()  # fairseq logs to stdout: everything it wrote comes before the error
    if message is not None:
        sys.stderr.flush()
        print(PREFIX + message, file=sys.stderr, flush=True)
        return
    sys.__excepthook__(exc_type, exc, tb)


def install() -> None:
    """Print one-line errors in this process, and remember whether ``--save-dir`` exists yet
    (see :func:`remove_new_empty_save_dir`)."""
    global _new_save_dir
    _new_save_dir = _first_missing_folder(cli_option("--save-dir", "checkpoints"))
    sys.excepthook = excepthook
