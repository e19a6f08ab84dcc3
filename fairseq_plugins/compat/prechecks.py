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
* ``fairseq-train --memory-wiped``: the evaluation control (every read of the long-term memory
  sees an empty memory) would be trained with, so the memory learns nothing (:func:`check_training_controls`);
* ``fairseq-train --task translation`` whose every training example is longer than
  ``--max-source-positions`` or ``--max-target-positions``: fairseq drops them all and stops in
  ``Exception: The dataset is empty`` (:func:`check_translation_lengths`);
* a checkpoint the tool will read that is missing, truncated, corrupt, refused by
  ``torch.load(weights_only=True)`` or no fairseq checkpoint (:mod:`.checkpoint_files`).

One combination runs as asked but measures something else, so it gets one warning instead:
``fairseq-eval-lm`` of a model that carries memory between segments (a
:class:`~fairseq_plugins.modules.memory_bank.StreamingMemoryModel`) under a task other than
``streaming_lm`` scores every block from an empty memory (:func:`warn_memory_not_carried`).
"""

import logging
import os
from typing import List, Optional, Sequence

from fairseq_plugins.compat.components import register as register_components
from fairseq_plugins.compat.process import command_line, fairseq_command_line
from fairseq_plugins.errors import ConfigError

logger = logging.getLogger(__name__)

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

    register_components()
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


def warn_memory_not_carried(argv: Optional[List[str]], checkpoints: Sequence[dict]) -> None:
    """One warning when ``fairseq-eval-lm`` scores a model that carries memory between segments
    under another task than ``streaming_lm`` (``argv``: its command line, default
    ``sys.argv[1:]``; ``checkpoints``: what each ``--path`` file holds,
    :func:`~fairseq_plugins.compat.checkpoint_files.check`): that task scores each block of
    ``--tokens-per-sample`` from an empty memory, the perplexity of the model without what it
    carries (docs/design/architecture.md, "Memory bank"). Nothing for a command line that
    fairseq's parser refuses: its own error is then the one line."""
    from fairseq.models import ARCH_MODEL_REGISTRY

    from fairseq_plugins.modules.memory_bank import StreamingMemoryModel

    register_components()
    for state in checkpoints:
        model = (state.get("cfg") or {}).get("model") or {}
        arch = model.get("_name") if isinstance(model, dict) else None
        arch = arch or getattr(state.get("args"), "arch", None)
        cls = ARCH_MODEL_REGISTRY.get(arch)
        if isinstance(cls, type) and issubclass(cls, StreamingMemoryModel):
            parsed = fairseq_command_line("eval_lm", argv, strict=True)
            if parsed is not None and parsed.task != "streaming_lm":
                logger.warning("%s under --task %s scores each block of --tokens-per-sample from an empty memory "
                               "(nothing is carried between blocks); pass --task streaming_lm to carry its memory "
                               "through every document", arch, parsed.task)
            return


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


def check_training_controls(args) -> None:
    """Refuse an evaluation control on fairseq-train's command line (``--memory-wiped``)."""
    if args.memory_wiped:
        raise ConfigError("--memory-wiped is an evaluation control (every read of the memory sees it empty): trained "
                          "with it, the memory would learn nothing; drop it from fairseq-train and score the trained "
                          "checkpoint with it instead (fairseq-eval-lm --model-overrides \"{'memory_wiped': True}\", "
                          "or the analysis commands' --memory-wiped)")


def _full_command_line(argv: Optional[List[str]]):
    """fairseq-train's own parse of its command line (``argv``, default ``sys.argv[1:]``), or
    ``None`` where it fails (fairseq's parser then says why, when fairseq-train runs)."""
    register_components()
    return fairseq_command_line("train", argv)


def _split_sizes(data: str, split: str, src: str, tgt: str):
    """``(source sizes, target sizes)`` of a binarized translation split (tokens with ``</s>``),
    or ``None`` where fairseq would not find it (its own error names it)."""
    from fairseq.data import data_utils

    for pair in (f"{src}-{tgt}", f"{tgt}-{src}"):
        prefix = os.path.join(data, f"{split}.{pair}.")
        if os.path.exists(prefix + f"{src}.idx") and os.path.exists(prefix + f"{tgt}.idx"):
            source = data_utils.load_indexed_dataset(prefix + src, None)
            target = data_utils.load_indexed_dataset(prefix + tgt, None)
            if source is None or target is None:
                return None
            # copied out of the memory map, which closes with its dataset
            return source.sizes.astype("int64"), target.sizes.astype("int64")
    return None


def _translation_limits(args) -> tuple:
    """``(max source, max target positions)`` fairseq-train will use: the parsed options, or the
    translation task's defaults where the parse leaves them out (fairseq's ``transformer`` and
    the task both declare them, and the parse then keeps neither)."""
    from fairseq.tasks.translation import TranslationConfig

    return (getattr(args, "max_source_positions", None) or TranslationConfig.max_source_positions,
            getattr(args, "max_target_positions", None) or TranslationConfig.max_target_positions)


def check_translation_lengths(args) -> None:
    """Refuse a ``translation`` training split every example of which fairseq-train would drop as
    longer than ``--max-source-positions`` or ``--max-target-positions`` (``args``: fairseq-train's
    own parse, :func:`_full_command_line`).

    Raises:
        ConfigError: naming the longest source or target and the option to raise.
    """
    from fairseq.data import data_utils

    if getattr(args, "task", None) != "translation" or not getattr(args, "data", None):
        return
    data = args.data.split(os.pathsep)[0]
    if not os.path.isdir(data):
        return  # fairseq names it
    src, tgt = args.source_lang, args.target_lang
    if src is None or tgt is None:
        src, tgt = data_utils.infer_language_pair(data)
    split = (getattr(args, "train_subset", None) or "train").split(",")[0]
    if not src or not tgt:
        return
    found = _split_sizes(data, split, src, tgt)
    if found is None:
        return
    sources, targets = found
    if not len(sources):
        return
    longest_source, longest_target = int(sources.max()), int(targets.max())
    limits = _translation_limits(args)
    truncated = bool(getattr(args, "truncate_source", False))  # every source is cut to fit
    fits_source = (sources >= 0) if truncated else (sources <= limits[0])
    if (fits_source & (targets <= limits[1])).any():
        return
    if not fits_source.any():
        raise ConfigError(f"every one of the {len(sources)} {split} sources is longer than --max-source-positions "
                          f"{limits[0]} (the longest: {longest_source} tokens with </s>, in "
                          f"{os.path.join(data, split)}.{src}-{tgt}.{src}), so fairseq-train would drop them all and "
                          f"stop in 'The dataset is empty'; pass --max-source-positions {longest_source} (or "
                          f"--truncate-source to cut the sources)")
    raise ConfigError(f"no {split} example fits --max-source-positions {limits[0]} and "
                      f"--max-target-positions {limits[1]} (the longest target: {longest_target} "
                      f"tokens with </s>), so fairseq-train would drop them all and stop in 'The dataset is empty'; "
                      f"pass --max-target-positions {longest_target}")


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
        check_training_controls(args)
        if (args.task or "translation") == "translation" and not args.help:  # fairseq-train's default task
            full = _full_command_line(argv)
            if full is not None:
                check_translation_lengths(full)
    if tool in ("eval_lm", "generate", "interactive", "validate"):
        check_model_overrides(args)
    check_bf16(args, torch.cuda.is_available())
    check_fp16(args, torch.cuda.is_available())
    checkpoints = checkpoint_files.check(tool, argv)
    if tool == "eval_lm":
        warn_memory_not_carried(argv, checkpoints)
