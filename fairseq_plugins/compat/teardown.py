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
with ``os._exit(0)``: no destructor runs, so none can abort. Training in one process ends the
same way after fairseq's ``call_main`` returned (its finalization aborts now and then too, after
the checkpoint is saved: ``terminate called without an active exception``). A rank or process
that raises is left to fairseq and the interpreter as before (its traceback and exit status
unchanged).
"""

import atexit
import os
import sys
from typing import Callable, Optional

_ORIGINAL: Optional[Callable] = None  # fairseq's distributed_main, once install() replaced it
_ORIGINAL_CALL_MAIN: Optional[Callable] = None  # fairseq's call_main, likewise


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


def call_main(cfg, main, **kwargs):
    """fairseq's ``call_main`` (one process runs ``main``; several are spawned or, under torchrun,
    this is one rank), then :func:`exit_now` once it returned."""
    from fairseq.distributed import utils

    (_ORIGINAL_CALL_MAIN or utils.call_main)(cfg, main, **kwargs)
    exit_now(0)


def install() -> None:
    """Make fairseq's ranks run :func:`distributed_main` and its training entry :func:`call_main`
    (once per process)."""
    global _ORIGINAL, _ORIGINAL_CALL_MAIN
    from fairseq.distributed import utils

    if _ORIGINAL is None:
        _ORIGINAL = utils.distributed_main
        utils.distributed_main = distributed_main
    if _ORIGINAL_CALL_MAIN is None:
        _ORIGINAL_CALL_MAIN = utils.call_main
        utils.call_main = call_main
