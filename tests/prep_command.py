"""``fairseq-longmem prep ...`` run inside the test process (the helper-level tests).

:func:`prep` returns what ``subprocess.run(..., capture_output=True, text=True)`` would: the
exit status and the printed stdout and stderr of the dispatcher, without a new interpreter
(importing fairseq takes seconds). :func:`message` is an error line without its program name,
the part a pipeline shows under its own name (data-prep/stages.sh, ``prep``).
"""
import contextlib
import io
import types

from fairseq_plugins.cli import main


def prep(*args):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(["prep", *map(str, args)])
        except SystemExit as e:  # argparse's own exits
            code = e.code
    return types.SimpleNamespace(returncode=code, stdout=out.getvalue(), stderr=err.getvalue())


def message(line):
    """``PROG: error: MESSAGE`` -> ``MESSAGE``."""
    return line.split(": error: ", 1)[1]
