"""``--model-overrides`` naming an option that a checkpoint's config predates.

fairseq 0.12 applies ``--model-overrides`` to the configuration saved in the checkpoint
(``checkpoint_utils.load_checkpoint_to_cpu`` through ``overwrite_args_by_name``), which sets
only the keys that configuration already holds and drops the others without a word; the model
is then built with the option's default. A checkpoint saved before a plugin model gained an
option (e.g. the summarizer's ``--memory-wiped``, the memory-wiped control) would so be
evaluated without the override asked for; a misspelled key is dropped the same way.
:func:`install` first adds, to the saved ``model`` node of a plugin model (saved under the
model's name or one of its named architectures), every overridden key that the model's dataclass
declares, with its default, so that fairseq then sets it as asked; then it refuses in one line a
key that names no option anywhere in the configuration (:func:`unknown_keys`), for fairseq's own
models too, and an override of ``memory_read``: a checkpoint keeps the read it was trained with.
"""

from typing import Any, Dict

_ORIGINAL = []  # fairseq's overwrite_args_by_name, once installed


def add_declared_options(cfg, overrides: Dict[str, Any]) -> list:
    """Add to ``cfg.model`` (a checkpoint's configuration, OmegaConf) each key of ``overrides`` that
    the plugin model named there declares and the saved node lacks, with the declared default;
    the keys added, sorted."""
    from fairseq.models import ARCH_MODEL_NAME_REGISTRY, MODEL_DATACLASS_REGISTRY
    from omegaconf import DictConfig, open_dict

    from fairseq_plugins.config import declared_defaults

    model = cfg.get("model") if isinstance(cfg, DictConfig) else None
    if not isinstance(model, DictConfig) or "_name" not in model:
        return []
    name = ARCH_MODEL_NAME_REGISTRY.get(model._name, model._name)  # a named architecture: its model
    declared = MODEL_DATACLASS_REGISTRY.get(name)
    if declared is None or not declared.__module__.startswith("fairseq_plugins."):
        return []
    defaults = declared_defaults(name)
    added = sorted(k for k in overrides if k in defaults and k not in model)
    with open_dict(model):
        for key in added:
            model[key] = defaults[key]
    return added


def unknown_keys(cfg, overrides: Dict[str, Any]) -> list:
    """The keys of ``overrides`` that name no option anywhere in ``cfg`` (a checkpoint's
    configuration, OmegaConf), which fairseq would drop without a word; none when a node of it
    is an argparse namespace (fairseq sets every override on those), sorted."""
    from argparse import Namespace

    from omegaconf import DictConfig

    held, namespaces = set(), []

    def walk(node):
        for key in node.keys():
            held.add(key)
            value = node.get(key) if key in node else None
            if isinstance(value, DictConfig):
                walk(value)
            elif isinstance(value, Namespace):
                namespaces.append(value)

    if not isinstance(cfg, DictConfig):
        return []
    walk(cfg)
    return [] if namespaces else sorted(k for k in overrides if k not in held)


def install() -> None:
    """fairseq's ``--model-overrides`` also sets the options a plugin checkpoint's config predates
    (this process; idempotent)."""
    from fairseq import checkpoint_utils

    if _ORIGINAL:
        return
    _ORIGINAL.append(checkpoint_utils.overwrite_args_by_name)

    def overwrite_args_by_name(cfg, overrides):
        if "memory_read" in overrides:
            from fairseq_plugins.errors import ConfigError
            raise ConfigError("--model-overrides: memory_read is fixed by the checkpoint (its read's parameters were "
                              "trained with one read); evaluate with the read it was trained with, or train another "
                              "checkpoint with --memory-read")
        add_declared_options(cfg, overrides)
        unknown = unknown_keys(cfg, overrides)
        if unknown:
            from fairseq_plugins.errors import ConfigError

            model = cfg.get("model")
            name = model.get("_name") if model is not None and "_name" in model else "this model"
            raise ConfigError(f"--model-overrides: {', '.join(map(repr, unknown))} is no option of the checkpoint's "
                              f"configuration ({name}); fairseq would ignore it. Check the spelling (python -m "
                              f"fairseq_plugins lists the plugin's options)")
        return _ORIGINAL[0](cfg, overrides)

    checkpoint_utils.overwrite_args_by_name = overwrite_args_by_name
