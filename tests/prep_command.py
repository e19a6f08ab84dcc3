"""``fairseq-longmem prep ...`` run inside the test process (the helper-level tests).

:func:`prep` returns what ``subprocess.run(..., capture_output=True, text=True)`` would: the
exit status and the printed stdout and stderr of the dispatcher, without a new interpreter
(importing fairseq takes seconds). :func:`message` is an error line without its program name,
the part a pipeline shows under its own name (data-prep/stages.sh, ``prep``).
"""
import types

from helpers import longmem_in_process


def prep(*args):
    """``fairseq-longmem prep ARGS`` in this process (``helpers.longmem_in_process``)."""
    status, out, err = longmem_in_process("prep", *args)
    return types.SimpleNamespace(returncode=status, stdout=out, stderr=err)


def message(line):
    """``PROG: error: MESSAGE`` -> ``MESSAGE``."""
    return line.split(": error: ", 1)[1]
