"""The one way a ``fairseq-longmem`` command reads a fairseq checkpoint.

Every command that reads a checkpoint (``recall score``, ``sorting score``/``signal``, ``analyze
position``/``memory-map``, ``summarize``, ``continue``, ...) reads it here: :func:`read_state`
for what it saved (config, updates, weights), :func:`load` for the model and its task. Both
check the file first as the fairseq tools with the plugin do
(:func:`fairseq_plugins.compat.checkpoint_files.check_readable`): a missing, truncated or
corrupt file, and a torch file that is no fairseq checkpoint (a Hugging Face
``pytorch_model.bin``), are one line naming the file and the fix instead of fairseq's
``KeyError: 'best_loss'`` or ``zipfile`` traceback.
"""

from typing import Dict, Optional


def read_state(checkpoint: str, option: str = "--checkpoint") -> Dict:
    """A fairseq checkpoint's saved dict (``model``, ``cfg``, ``optimizer_history``, ...), read
    with ``torch.load(weights_only=True)`` and fairseq's own ``argparse.Namespace`` allowed, the
    tensors memory-mapped where the file's format allows it (``option``: the command's option
    that named the file, for the message).

    Raises:
        ConfigError: the file is missing, cannot be read, or is no fairseq checkpoint.
    """
    import torch

    from fairseq_plugins.compat.checkpoint_files import check_readable
    from fairseq_plugins.compat.checkpoints import SAFE_GLOBALS

    with torch.serialization.safe_globals(list(SAFE_GLOBALS)):
        return check_readable(checkpoint, tool="longmem", option=option)


def load(checkpoint: str, data: Optional[str] = None, cpu: bool = True, option: str = "--checkpoint",
         arg_overrides: Optional[Dict] = None, task=None):
    """``(model in eval mode, cfg, task)`` of a fairseq checkpoint (fairseq's
    ``checkpoint_utils.load_model_ensemble_and_task``) after :func:`read_state`'s checks: its task
    reads ``data`` (when given) and ``arg_overrides``, or is ``task``; on a GPU unless ``cpu``
    (or none is there).

    Raises:
        ConfigError: the file is missing, cannot be read, or is no fairseq checkpoint; the
            plugin's own refusals while it loads (e.g. a dictionary other than the one it was
            trained with).
    """
    import torch
    from fairseq import checkpoint_utils

    import fairseq_plugins

    read_state(checkpoint, option)
    fairseq_plugins.load_components()
    overrides = dict(arg_overrides or {})
    if data is not None:
        overrides["data"] = data
    models, cfg, task = checkpoint_utils.load_model_ensemble_and_task([checkpoint], arg_overrides=overrides,
                                                                      task=task)
    model = models[0].eval()
    if not cpu and torch.cuda.is_available():
        model = model.cuda()
    return model, cfg, task
