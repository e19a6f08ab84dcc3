"""One-line user errors.

Bad options and bad data raise :class:`ConfigError`. When a fairseq command
line tool fails with one, the plugin's exception hook prints a single line
``fairseq_plugins: error: <what is wrong and how to fix it>`` instead of a
traceback; every other exception keeps Python's normal report.
"""

import sys


class ConfigError(ValueError):
    """A user-facing configuration or data error whose message names the fix."""


def _excepthook(exc_type, exc, tb, _previous=sys.excepthook):
    if issubclass(exc_type, ConfigError):
        print(f"fairseq_plugins: error: {exc}", file=sys.stderr)
        return
    _previous(exc_type, exc, tb)


def install_excepthook() -> None:
    """Print :class:`ConfigError` as one line (idempotent)."""
    if getattr(sys.excepthook, "__name__", "") != "_excepthook":
        sys.excepthook = _excepthook
