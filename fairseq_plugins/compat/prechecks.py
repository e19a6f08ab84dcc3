"""Option checks that run before fairseq starts.

fairseq's tools import the plugin while they parse the command line (``--user-dir``), before
they build a task or load a checkpoint. The combinations below fail later inside fairseq with
a message about something else, so they are refused here, from the command line alone
(:func:`check`), in one line naming what was passed:

* ``fairseq-eval-lm --context-window W``: fairseq subtracts W from ``--tokens-per-sample``
  before it builds the task, so W ≥ ``--tokens-per-sample`` fails building token blocks
  (``ZeroDivisionError`` at equality, ``ValueError`` beyond), and under ``streaming_lm``
  (whose memory already carries the whole past) the task would see the difference as its
  segment length;
* ``fairseq-train`` without ``--arch``: fairseq's parser ends in a bare ``RuntimeError()``; without
  ``--optimizer``, in a ``ValueError`` traceback; a language model's ``--arch`` without
  ``--task``, in omegaconf's ``InterpolationKeyError`` (its configuration reads
  ``--tokens-per-sample`` from the task, and fairseq-train's default task, translation, has none);
* ``--bf16`` without a CUDA GPU: fairseq takes bf16 off a GPU for a TPU run and stops in
  ``AttributeError: 'NoneType' object has no attribute 'xla_device'``;
* ``--fp16`` without a CUDA GPU: fairseq's fp16 optimizer keeps its flattened fp32 copy of the
  gradients on a CUDA device and stops in ``AssertionError: Torch not compiled with CUDA enabled``;
* ``fairseq-train --distributed-world-size N`` without torchrun on a machine without CUDA
  (or ``--cpu``): fairseq's own launcher spawns one process per GPU and ends in ``Default
  process group has not been initialized``;
* ``--model-overrides`` that is not a Python dict literal (``"{memory_wiped: True}"``,
  ``memory_wiped=True``): fairseq's ``ast.literal_eval`` stops in a ``ValueError`` or
  ``SyntaxError`` traceback;
* a checkpoint the tool will read that is missing, truncated, corrupt or refused by
  ``torch.load(weights_only=True)`` (:mod:`.checkpoint_files`).
"""

import os
from typing import List, Optional

from fairseq_plugins.process import command_line
from fairseq_plugins.errors import ConfigError

# fairseq-eval-lm's default task, and each LM task's default --tokens-per-sample
EVAL_LM_DEFAULT_TASK = "language_modeling"
DEFAULT_TOKENS_PER_SAMPLE = {"language_modeling": 1024, "streaming_lm": 64}


def _int(value: Optional[str]) -> Optional[int]:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None  # fairseq's own parser names it


def check_context_window(args) -> None:
    """Refuse a ``--context-window`` that fairseq-eval-lm cannot honour (see the module docstring)."""
    window = _int(args.context_window) or 0
    if window <= 0:
        return
    task = args.task or EVAL_LM_DEFAULT_TASK
    if task == "streaming_lm":
        raise ConfigError(f"--context-window {window} does not apply to streaming_lm: its memory already carries "
                          f"the whole past of each stream; drop --context-window")
    tokens = _int(args.tokens_per_sample) or DEFAULT_TOKENS_PER_SAMPLE.get(task)
    if tokens is not None and window >= tokens:
        raise ConfigError(
            f"--context-window {window} must be smaller than --tokens-per-sample {tokens}: fairseq-eval-lm scores "
            f"blocks of --tokens-per-sample minus --context-window new tokens, each after that many tokens of "
            f"context; pass e.g. --context-window {tokens // 2}")


def check_bf16(args, cuda_available: bool) -> None:
    """Refuse ``--bf16`` where there is no CUDA GPU to run it (``--cpu``, or none present)."""
    if args.bf16 and (args.cpu or not cuda_available):
        where = "--cpu was passed" if args.cpu else "this machine has no CUDA GPU"
        raise ConfigError(f"--bf16 needs a CUDA GPU ({where}; off a GPU fairseq takes bf16 for a TPU run): drop "
                          f"--bf16: a CPU trains in fp32 (docs/training-at-scale.md)")


def check_fp16(args, cuda_available: bool) -> None:
    """Refuse ``--fp16`` where there is no CUDA GPU (``--cpu``, or none present), unless
    ``--fp16-no-flatten-grads`` keeps the gradients where the model is."""
    if args.fp16 and not args.fp16_no_flatten_grads and (args.cpu or not cuda_available):
        where = "--cpu was passed" if args.cpu else "this machine has no CUDA GPU"
        raise ConfigError(f"--fp16 needs a CUDA GPU ({where}; fairseq keeps the flattened fp16 gradients on one): "
                          f"drop --fp16: a CPU trains in fp32 (docs/training-at-scale.md)")


def check_launcher(args, cuda_available: bool, environ) -> None:
    """Refuse several processes asked of fairseq-train's own launcher where it cannot spawn them:
    ``--distributed-world-size`` above 1 without torchrun (``RANK`` unset), on a CPU."""
    size = _int(args.distributed_world_size) or 1
    if size > 1 and "RANK" not in environ and (args.cpu or not cuda_available):
        raise ConfigError(f"--distributed-world-size {size} without torchrun: fairseq-train starts one process per "
                          f"CUDA GPU itself and cannot on a CPU; start the processes with torchrun: torchrun "
                          f"--nproc_per_node {size} --no-python bash scripts/distributed-train.sh DATA ... --cpu "
                          f"--distributed-backend gloo --ddp-backend legacy_ddp (docs/training-at-scale.md)")


def check_model_and_optimizer(args) -> None:
    """Refuse a fairseq-train command line without ``--arch`` or ``--optimizer`` (``--help`` is
    fairseq's to answer)."""
    if args.help:
        return
    if not args.arch:
        raise ConfigError("fairseq-train needs --arch (the model: e.g. infinite_former_lm, fastformer_lm, "
                          "transformer_lm; `fairseq-longmem options` lists the plugin's with their options)")
    if not args.optimizer:
        raise ConfigError("fairseq-train needs --optimizer (e.g. --optimizer adam --lr 0.001; `fairseq-longmem "
                          "arms train-args lm infinite_former --save-dir DIR` prints a whole command line)")


def check_task(args) -> None:
    """Refuse a fairseq-train command line without ``--task`` whose ``--arch`` (the plugin's or
    fairseq's) reads an option from its task that fairseq's default task, translation, lacks."""
    if args.help or args.task or not args.arch:
        return
    import dataclasses

    from fairseq.models import ARCH_MODEL_REGISTRY
    from fairseq.tasks.translation import TranslationConfig

    from fairseq_plugins import load_components

    load_components()  # the plugin's architectures, in fairseq's registry
    model = ARCH_MODEL_REGISTRY.get(args.arch)
    config = getattr(model, "__dataclass", None)
    if config is None:
        return  # an unknown --arch: fairseq's parser names it
    has = {f.name for f in dataclasses.fields(TranslationConfig)}
    wanted = sorted({str(f.default)[len("${task."):-1] for f in dataclasses.fields(config)
                     if str(f.default).startswith("${task.")} - has)
    if wanted:
        name = "tokens_per_sample" if "tokens_per_sample" in wanted else wanted[0]
        raise ConfigError(f"--arch {args.arch} reads --{name.replace('_', '-')} from its task, and fairseq-train's "
                          f"default task (translation) has none: pass --task streaming_lm (infinite_former_lm, "
                          f"infinite_former_gpt2) or --task language_modeling")


def check_model_overrides(args) -> None:
    """Refuse a ``--model-overrides`` that is not a dict literal (see the module docstring)."""
    import ast

    if args.model_overrides is None:
        return
    try:
        value = ast.literal_eval(args.model_overrides)
    except (ValueError, SyntaxError):
        value = None
    if not isinstance(value, dict):
        raise ConfigError(f"--model-overrides {args.model_overrides!r} is not a Python dict literal; quote the keys, "
                          "e.g. --model-overrides \"{'memory_wiped': True}\"")


def check(tool: str, argv: Optional[List[str]] = None) -> None:
    """Every check that applies to fairseq tool ``tool`` (``train``, ``eval_lm``, ...).

    Raises:
        ConfigError: the first combination of options that fairseq cannot run as asked.
    """
    import torch

    from fairseq_plugins.compat import checkpoint_files

    args = command_line(argv)
    if tool == "eval_lm":
        check_context_window(args)
    if tool == "train":
        check_model_and_optimizer(args)
        check_task(args)
        check_launcher(args, torch.cuda.is_available(), os.environ)
    if tool in ("eval_lm", "generate", "interactive", "validate"):
        check_model_overrides(args)
    check_bf16(args, torch.cuda.is_available())
    check_fp16(args, torch.cuda.is_available())
    checkpoint_files.check(tool, argv)
