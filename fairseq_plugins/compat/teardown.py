"""A rank of distributed training leaves as soon as its work is done, skipping the interpreter's shutdown.

fairseq's distributed training (``--distributed-init-method env://`` under torchrun, or its
own spawn) never tears its process group down: after ``main`` and a last barrier each rank
returns to the interpreter, whose finalization then destroys libtorch's and gloo's objects and
stops Python's daemon threads (fairseq's batch prefetcher among them) in an order nobody chose.
Once in a while a rank then ends with ``terminate called without an active exception``
(SIGABRT) after training finished and saved its checkpoint, and torchrun reports the whole run
as failed; destroying the process group in an ``atexit`` handler first does not prevent it.

:func:`install` wraps fairseq's ``distributed_main`` (the function each rank runs, under
torchrun or fairseq's spawn) so that a rank whose training returned runs the ``atexit``
handlers (logging, tensorboard writers, data-loader workers), flushes its output and ends
with ``os._exit(0)``: no destructor runs, so none can abort. A rank that raises is left to
fairseq and the interpreter as before (its traceback and exit status unchanged); a process
that never runs ``distributed_main`` (one process) is not affected.
"""

import atexit
import os
import sys
from typing import Callable, Optional

_ORIGINAL: Optional[Callable] = None  # fairseq's distributed_main, once install() replaced it


def exit_now(status: int = 0) -> None:
    """Run the ``atexit`` handlers, flush stdout and stderr, and end the process with ``status``
    without the interpreter's finalization (``os._exit``). Does not return."""
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed or broken stream: nothing left to keep
            pass
    os._exit(status)


def distributed_main(i, main, cfg, kwargs):
    """fairseq's ``distributed_main`` (rank ``i`` initialises its group, runs ``main``, waits at a
    last barrier), then :func:`exit_now` once it returned."""
    from fairseq.distributed import utils

    original = _ORIGINAL or utils.distributed_main  # in a spawned child install() did not run
    original(i, main, cfg, kwargs)
    exit_now(0)


def install() -> None:
    """Make fairseq's ranks run :func:`distributed_main` (once per process)."""
    global _ORIGINAL
    from fairseq.distributed import utils

    if _ORIGINAL is None:
        _ORIGINAL = utils.distributed_main
        utils.distributed_main = distributed_main
