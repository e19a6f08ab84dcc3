"""The one error type of the project's helper scripts (``scripts/`` and ``data-prep/``).

A helper raises :class:`ScriptError` for bad input (wrong options, missing or
mismatched data); :func:`run_main` prints it, or the package's
``fairseq_plugins.errors.ConfigError`` raised by the package code a script calls, as one
line ``PROG: error: ...`` (also an ``OSError``: the system's message and the file name)
and returns the exit status, so that no traceback reaches the user. Standard library
only: a script that needs neither fairseq nor torch (the arms registry) starts without
importing them.
"""

import logging
import sys
from typing import Callable, Tuple, Type

# a script that imports the package imports fairseq, whose text-to-speech task logs a
# tensorboardX hint at import: a script's output holds only its own lines
logging.getLogger("fairseq.tasks.text_to_speech").setLevel(logging.WARNING)


class ScriptError(Exception):
    """Bad input to a helper script; the message names the problem and the fix."""


def _input_errors() -> Tuple[Type[BaseException], ...]:
    """:class:`ScriptError`, and the package's ``ConfigError`` once the script has imported it."""
    errors = sys.modules.get("fairseq_plugins.errors")
    return (ScriptError,) if errors is None else (ScriptError, errors.ConfigError)


def run_main(main: Callable[[], int], prog: str, status: int = 2) -> int:
    """Call ``main()``; print a :class:`ScriptError` (or the package's ``ConfigError``) or
    an ``OSError`` as one line.

    Returns ``main()``'s own status (``None`` counts as 0), or ``status`` after
    an input error, or 1 after an ``OSError``.
    """
    try:
        return main() or 0
    except OSError as e:
        print(f"{prog}: error: {e.strerror or e}: {e.filename or ''}".rstrip(": "), file=sys.stderr)
        return 1
    except Exception as e:  # noqa: BLE001 (re-raised unless it is an input error)
        if not isinstance(e, _input_errors()):
            raise
        print(f"{prog}: error: {e}", file=sys.stderr)
        return status
