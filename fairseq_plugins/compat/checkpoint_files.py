"""The checkpoint files a fairseq tool is about to read, checked before fairseq starts.

fairseq reads a checkpoint deep inside its loading code, where a truncated or corrupt file
(a run killed while copying it, a full disk) or one holding Python objects that
``torch.load(weights_only=True)`` refuses ends in a long traceback about ``zipfile`` or
unpickling, and a torch file that is no fairseq checkpoint (a Hugging Face ``pytorch_model.bin``:
a plain state dict) in ``KeyError: 'best_loss'``. :func:`check` reads each file the running tool
will read the way fairseq will (``torch.load(weights_only=True)`` with the plugin's allow-list,
:mod:`.checkpoints`; memory-mapped, so the tensors' bytes are not read), checks that it holds
what fairseq's loader reads (:func:`checkpoint_problem`) and refuses with one line naming the
file and the fix, leaving the file as it is (:func:`check_readable`, which every command of
the plugin that reads a checkpoint calls first):

* ``fairseq-eval-lm``, ``fairseq-generate``, ``fairseq-interactive``: every ``--path`` file
  (generate and interactive split the option on ``:``, an ensemble; eval-lm scores one file and
  refuses a list); a missing one is named too;
* ``fairseq-train``: the checkpoint it resumes from (``--save-dir``'s ``checkpoint_last.pt``,
  or ``--restore-file``, or on a first launch ``--finetune-from-model``).
"""

import os
from typing import List, Optional, Tuple

from fairseq_plugins.compat.process import command_line
from fairseq_plugins.errors import ConfigError

READERS = ("eval_lm", "generate", "interactive")
RESUME_DEFAULT = "checkpoint_last.pt"  # fairseq-train's --restore-file default (a name in --save-dir)


def files_to_read(tool: str, args) -> List[str]:
    """The checkpoint paths ``tool`` will read, from its command line ``args`` (a train run's
    resume file only if it exists: fairseq starts from scratch without one).

    Raises:
        ConfigError: ``fairseq-eval-lm --path A:B``: eval-lm scores one checkpoint and reads
            the whole value as one file name (generate and interactive read an ensemble)."""
    if tool == "eval_lm" and os.pathsep in (args.path or "") and not os.path.isfile(args.path):
        paths = [p for p in args.path.split(os.pathsep) if p]
        raise ConfigError(f"fairseq-eval-lm scores one checkpoint, and --path {args.path} names {len(paths)} "
                          f"(eval-lm reads the whole value as one file name; generate and interactive take an "
                          f"ensemble A{os.pathsep}B): pass one --path and evaluate each checkpoint in a run of its own")
    if tool in READERS:
        return [p for p in (args.path or "").split(os.pathsep) if p]
    if tool != "train":
        return []
    restore = args.restore_file or RESUME_DEFAULT
    if restore == RESUME_DEFAULT:
        last = os.path.join(args.save_dir or "checkpoints", RESUME_DEFAULT)
        if os.path.exists(last) or not args.finetune_from_model:
            restore = last
        else:
            restore = args.finetune_from_model
    return [restore] if os.path.exists(restore) else []


def checkpoint_problem(state) -> Optional[str]:
    """What keeps ``state`` (a loaded torch file) from being a checkpoint fairseq's loader reads
    (``checkpoint_utils.load_checkpoint_to_cpu`` and ``load_model_ensemble_and_task``), in words,
    or ``None`` for a fairseq checkpoint: a dict with the model's ``model`` weights, its ``cfg``
    (or a legacy ``args``), its ``optimizer_history`` (or a legacy ``best_loss``) and its
    ``extra_state`` (or a legacy ``epoch``)."""
    import torch

    if not isinstance(state, dict):
        return f"it holds a {type(state).__name__}, not a dict"
    has = {"model": state.get("model") is not None,
           "cfg (or args)": state.get("cfg") is not None or state.get("args") is not None,
           "optimizer_history": "optimizer_history" in state or "best_loss" in state,
           "extra_state": "extra_state" in state or "epoch" in state}
    missing = [name for name, there in has.items() if not there]
    if not missing:
        return None
    if state and all(isinstance(v, torch.Tensor) for v in state.values()):
        tensors = f"{len(state)} tensor{'s' if len(state) != 1 else ''}"
        return (f"it is a plain state dict of {tensors} (as a Hugging Face pytorch_model.bin or model.state_dict() "
                f"is), without fairseq's {', '.join(missing)}")
    keys = ", ".join(repr(k) for k in list(state)[:4]) + (", ..." if len(state) > 4 else "")
    return f"it lacks fairseq's {', '.join(missing)} (its keys: {keys or 'none'})"


def _is_checkpoint(path: str) -> bool:
    """Whether ``path`` loads as fairseq will load it and is a fairseq checkpoint
    (:func:`checkpoint_problem`; memory-mapped: the tensors' bytes are not read)."""
    import zipfile

    import torch

    try:
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=zipfile.is_zipfile(path))
    except Exception:  # noqa: BLE001 - any file that does not load is no alternative
        return False
    return checkpoint_problem(state) is None


def not_a_checkpoint_message(path: str, problem: str, tool: Optional[str], option: str = "--path") -> str:
    """The one-line message for ``path``, a torch file that loads but is no fairseq checkpoint
    (``problem``: :func:`checkpoint_problem`'s words), with the fix of ``tool`` (as
    :func:`unreadable_message`)."""
    convert = "a Hugging Face GPT-2 folder becomes one with `fairseq-longmem gpt2 convert --hf-dir DIR --out OUT`"
    if tool == "train":
        fix = (f"fairseq-train resumes only from a checkpoint it wrote: move {os.path.basename(path)} away to train "
               f"from scratch, or pass --restore-file a checkpoint_*.pt of fairseq-train ({convert})")
    else:
        fix = f"pass a checkpoint_*.pt written by fairseq-train with {option} ({convert})"
    return f"{path} is a torch file but not a fairseq checkpoint: {problem}; it was left as it is; {fix}"


def _others(path: str) -> List[str]:
    """The other checkpoints of ``path``'s folder that load (names, sorted)."""
    folder = os.path.dirname(os.path.abspath(path))
    try:
        names = sorted(n for n in os.listdir(folder) if n.endswith(".pt") and n != os.path.basename(path)
                       and n != "crash.pt")
    except OSError:
        return []
    return [n for n in names if _is_checkpoint(os.path.join(folder, n))]


def _starts_like_a_torch_file(path: str) -> bool:
    """Whether ``path`` begins as a torch file does: a zip archive (torch's format, whole or cut)
    or a pickle of protocol 2 or later (its legacy format), or is too short to tell."""
    try:
        with open(path, "rb") as f:
            first = f.read(2)
    except OSError:
        return True
    return len(first) < 2 or first == b"PK" or first[:1] == b"\x80"


def unreadable_message(path: str, exc: BaseException, tool: Optional[str], option: str = "--path") -> str:
    """The one-line message for checkpoint ``path`` that ``torch.load`` failed on with ``exc``,
    with the fix of ``tool`` (resume elsewhere for ``train``, another checkpoint through
    ``option`` for the readers: fairseq's ``--path``, an analysis's ``--checkpoint``)."""
    import zipfile

    folder = os.path.dirname(os.path.abspath(path))
    if "Weights only load failed" in str(exc) and zipfile.is_zipfile(path):
        # a whole file that torch.load(weights_only=True) refuses: not corrupt, but unsafe to load
        return (f"cannot read checkpoint {path}: it holds Python objects that torch.load refuses to load "
                f"with weights_only=True, beyond those of fairseq's own checkpoints that the plugin allows "
                f"(fairseq_plugins/compat/checkpoints.py); it was left as it is. Load it only if you trust it, "
                f"with TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1")
    what = str(exc).strip().splitlines()[0].split(". ")[0][:100] if str(exc).strip() else type(exc).__name__
    fault = (f"the file is truncated or corrupt ({what})" if _starts_like_a_torch_file(path) else
             "it is not a torch file (neither torch's zip format nor a pickle)")
    others = _others(path)
    if not others:
        fix = {"train": "move it away to train from scratch",
               None: "move it away to train from scratch (fairseq-train), or pass another one with --path"}.get(
            tool, f"pass a complete checkpoint with {option}")
        return (f"cannot read checkpoint {path}: {fault}; it was left as it is and there is no other checkpoint "
                f"in {folder} that loads; {fix}")
    pick = os.path.join(folder, "checkpoint_best.pt" if "checkpoint_best.pt" in others else others[-1])
    fix = {"train": f"resume from another one with --restore-file {pick}, or move the file away to train from scratch",
           None: f"use another one (fairseq-train: --restore-file {pick}; other tools: --path {pick})"}.get(
        tool, f"use another one with {option} {pick}")
    return (f"cannot read checkpoint {path}: {fault}; it was left as it is. "
            f"other checkpoints in {folder} that load: {', '.join(others)}; {fix}")


def check_readable(path: str, tool: Optional[str] = None, option: str = "--path") -> dict:
    """Read ``path`` as fairseq will (``torch.load(weights_only=True)``, memory-mapped) and check
    that it is a fairseq checkpoint (:func:`checkpoint_problem`); ``tool`` and ``option`` as
    :func:`unreadable_message`. Returns what it read (the tensors memory-mapped where the file's
    format allows it).

    Raises:
        ConfigError: the file is missing, truncated, corrupt or refused by ``weights_only``
            (:func:`unreadable_message`), or a torch file that is no fairseq checkpoint
            (:func:`not_a_checkpoint_message`).
    """
    import zipfile

    import torch

    if not os.path.isfile(path):
        raise ConfigError(f"checkpoint {path} not found; pass a checkpoint_*.pt written by fairseq-train")
    try:
        # memory-mapped where torch's zip format allows it (older files are read whole)
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=zipfile.is_zipfile(path))
    except Exception as e:  # noqa: BLE001 - any failure to read the file is this one message
        raise ConfigError(unreadable_message(path, e, tool, option)) from e
    problem = checkpoint_problem(state)
    if problem is not None:
        raise ConfigError(not_a_checkpoint_message(path, problem, tool, option))
    return state


def saved_run(path: str) -> Optional[Tuple[Optional[int], dict]]:
    """``(updates, model config)`` of the fairseq checkpoint ``path``: the updates it was saved
    after (its last optimizer history entry's ``num_updates``, ``None`` when it does not say) and
    its ``cfg.model`` as a dict (empty for an argparse-configured checkpoint); ``None`` when the
    file does not exist.

    Raises:
        ConfigError: the file cannot be read (:func:`unreadable_message`).
    """
    from fairseq_plugins.compat.checkpoints import load_with_fairseq_globals

    if not os.path.isfile(path):
        return None
    try:  # as fairseq-train with the plugin reads it
        state = load_with_fairseq_globals(path)
    except Exception as e:  # noqa: BLE001 - any failure to read the file is this one message
        raise ConfigError(unreadable_message(path, e, "train")) from e
    history = state.get("optimizer_history") or [{}]
    done = history[-1].get("num_updates")
    model = (state.get("cfg") or {}).get("model") or {}
    return (int(done) if done is not None else None), dict(model) if isinstance(model, dict) else {}


def check(tool: str, argv: Optional[List[str]] = None) -> List[dict]:
    """Check every checkpoint file ``tool`` will read (module docstring); what each holds, in
    order (:func:`check_readable`).

    Raises:
        ConfigError: the first file that is missing or cannot be read.
    """
    return [check_readable(path, tool) for path in files_to_read(tool, command_line(argv))]
