"""The one error type of the project's helper scripts (``scripts/`` and ``data-prep/``).

A helper raises :class:`ScriptError` for bad input (wrong options, missing or
mismatched data); :func:`run_main` prints it as one line ``PROG: error: ...``
(also an ``OSError``: the system's message and the file name) and returns the
exit status, so that no traceback reaches the user. Standard library only: the
data-prep helpers import it without importing fairseq or torch.

The package's own error for the fairseq command-line tools is
``fairseq_plugins.errors.ConfigError``; this one is for the scripts around them.
"""

import sys
from typing import Callable


class ScriptError(Exception):
    """Bad input to a helper script; the message names the problem and the fix."""


def run_main(main: Callable[[], int], prog: str, status: int = 2) -> int:
    """Call ``main()``; print a :class:`ScriptError` or ``OSError`` as one line.

    Returns ``main()``'s own status (``None`` counts as 0), or ``status`` after
    a :class:`ScriptError`, or 1 after an ``OSError``.
    """
    try:
        return main() or 0
    except ScriptError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return status
    except OSError as e:
        print(f"{prog}: error: {e.strerror or e}: {e.filename or ''}".rstrip(": "), file=sys.stderr)
        return 1
