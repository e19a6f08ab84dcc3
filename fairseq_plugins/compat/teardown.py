"""The process group destroyed before the interpreter shuts down.

fairseq's distributed training (``--distributed-init-method env://`` under torchrun, or its
own spawn) never calls ``torch.distributed.destroy_process_group()``. Gloo's worker threads
then outlive the interpreter's finalization, and a rank may end with ``terminate called
without an active exception`` (SIGABRT) after training finished and saved its checkpoint,
which torchrun reports as a failed run. An ``atexit`` handler runs while the interpreter is
still whole and destroys the group first; in a process that never started one it does nothing.
"""

import atexit


def destroy_process_group() -> None:
    """Destroy the default process group if this process initialised one."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def install() -> None:
    """Register :func:`destroy_process_group` to run at exit (once per process)."""
    atexit.unregister(destroy_process_group)
    atexit.register(destroy_process_group)
