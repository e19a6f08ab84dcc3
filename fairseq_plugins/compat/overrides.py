"""``--model-overrides`` naming an option that a checkpoint's config predates.

fairseq 0.12 applies ``--model-overrides`` to the configuration saved in the checkpoint
(``checkpoint_utils.load_checkpoint_to_cpu`` through ``overwrite_args_by_name``), which sets
only the keys that configuration already holds and drops the others without a word; the model
is then built with the option's default. A checkpoint saved before a plugin model gained an
option (e.g. the summarizer's ``--memory-wiped``, the memory-wiped control) would so be
evaluated without the override asked for. :func:`install` first adds, to the saved ``model``
node of a plugin model, every overridden key that the model's dataclass declares, with its
default, so that fairseq then sets it as asked. Keys the model does not declare, and fairseq's
own models, are left to fairseq as they are.
"""

from typing import Any, Dict

_ORIGINAL = []  # fairseq's overwrite_args_by_name, once installed


def add_declared_options(cfg, overrides: Dict[str, Any]) -> list:
    """Add to ``cfg.model`` (a checkpoint's configuration, OmegaConf) each key of ``overrides`` that
    the plugin model named there declares and the saved node lacks, with the declared default;
    the keys added, sorted."""
    from dataclasses import MISSING, fields

    from fairseq.models import MODEL_DATACLASS_REGISTRY
    from omegaconf import DictConfig, open_dict

    model = cfg.get("model") if isinstance(cfg, DictConfig) else None
    if not isinstance(model, DictConfig) or "_name" not in model:
        return []
    declared = MODEL_DATACLASS_REGISTRY.get(model._name)
    if declared is None or not declared.__module__.startswith("fairseq_plugins."):
        return []
    defaults = {f.name: f.default for f in fields(declared) if f.default is not MISSING}
    added = sorted(k for k in overrides if k in defaults and k not in model)
    with open_dict(model):
        for key in added:
            model[key] = defaults[key]
    return added


def install() -> None:
    """fairseq's ``--model-overrides`` also sets the options a plugin checkpoint's config predates
    (this process; idempotent)."""
    from fairseq import checkpoint_utils

    if _ORIGINAL:
        return
    _ORIGINAL.append(checkpoint_utils.overwrite_args_by_name)

    def overwrite_args_by_name(cfg, overrides):
        add_declared_options(cfg, overrides)
        return _ORIGINAL[0](cfg, overrides)

    checkpoint_utils.overwrite_args_by_name = overwrite_args_by_name
