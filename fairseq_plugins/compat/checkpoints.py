"""fairseq's own checkpoints under ``torch.load(weights_only=True)``.

Since torch 2.6 ``torch.load`` defaults to ``weights_only=True``, and fairseq 0.12's
``checkpoint_utils.load_checkpoint_to_cpu`` calls it without the argument. A checkpoint
of one of fairseq's argparse-configured models (``transformer``, the summarization
comparison's baseline arm) stores its configuration's ``model`` node as an
``argparse.Namespace``, which that load refuses: resuming such a run, or loading it in
``fairseq-generate``, stops with torch's ``UnpicklingError``. The plugin's own models are
dataclass-configured and store plain containers.

:data:`SAFE_GLOBALS` is exactly what those checkpoints hold beyond tensors and plain
containers; :func:`allow_fairseq_globals` allow-lists it for ``torch.load`` in a fairseq
command-line process that loaded the plugin (``--user-dir fairseq_plugins``).
"""

import argparse

import torch

SAFE_GLOBALS = (argparse.Namespace,)


def allow_fairseq_globals() -> None:
    """Let ``torch.load(weights_only=True)`` rebuild :data:`SAFE_GLOBALS` in this process."""
    torch.serialization.add_safe_globals(list(SAFE_GLOBALS))


def load_with_fairseq_globals(path: str) -> dict:
    """``torch.load(path, weights_only=True)`` with :data:`SAFE_GLOBALS` allowed for this call only,
    memory-mapped where torch's zip format allows it (the tensors' bytes are not read): a
    checkpoint read as a fairseq tool with the plugin reads it, from any process.

    Raises:
        whatever ``torch.load`` raises on a missing, truncated, corrupt or refused file.
    """
    import zipfile

    with torch.serialization.safe_globals(list(SAFE_GLOBALS)):
        return torch.load(path, map_location="cpu", weights_only=True, mmap=zipfile.is_zipfile(path))
