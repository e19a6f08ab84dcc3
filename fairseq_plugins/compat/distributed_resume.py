"""Several processes resuming a run (docs/training-at-scale.md, "Several processes, GPUs and nodes").

fairseq-train resumes from ``checkpoint_last.pt`` on rank 0 only and sends what it loaded to
the other ranks through ``torch.load(weights_only=True)`` (``broadcast_object``), which
refuses the OmegaConf config it holds since torch 2.6: every rank but 0 stops. With
``--load-checkpoint-on-all-dp-ranks`` every rank reads the file itself and the run resumes
exactly (each rank then takes its own streams' memory from it). :func:`all_ranks_load` adds that
option to a training process of several ranks (started by torchrun, or with
``--distributed-world-size`` above 1) before fairseq parses its command line.
"""

import os
import sys
from typing import List, Mapping, Optional

OPTION = "--load-checkpoint-on-all-dp-ranks"


def several_ranks(argv: List[str], environ: Mapping[str, str]) -> bool:
    """Whether a fairseq-train command line ``argv`` (without the program) runs as one of several
    processes: torchrun's ``WORLD_SIZE`` above 1, or ``--distributed-world-size`` above 1."""
    from fairseq_plugins.compat.process import command_line

    size = command_line(argv).distributed_world_size
    try:
        return int(environ.get("WORLD_SIZE", "1")) > 1 or (size is not None and int(size) > 1)
    except ValueError:
        return False  # fairseq's own parser names a bad value


def all_ranks_load(argv: Optional[List[str]] = None, environ: Optional[Mapping[str, str]] = None) -> bool:
    """Append :data:`OPTION` to ``argv`` (default: ``sys.argv``, which fairseq parses after it
    loaded the plugin) when it runs as one of several ranks and lacks it; whether it did."""
    argv = sys.argv if argv is None else argv
    environ = os.environ if environ is None else environ
    if OPTION in argv or not several_ranks(argv[1:], environ):
        return False
    argv.append(OPTION)
    return True
