"""The package's one error type.

Bad options and bad data raise :class:`ConfigError`, whose message names the
problem and the fix in one line. Inside a fairseq command-line tool the plugin
prints it as ``fairseq_plugins: error: <message>`` instead of a traceback
(:mod:`fairseq_plugins.compat.hook`); from Python it is an ordinary exception.
"""


class ConfigError(ValueError):
    """A user-facing configuration or data error whose message names the fix."""
