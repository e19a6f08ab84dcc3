"""One-line user errors.

Bad options and bad data raise :class:`ConfigError`. When a fairseq command
line tool fails with one, the plugin's exception hook prints a single line
``fairseq_plugins: error: <what is wrong and how to fix it>`` instead of a
traceback. The same hook turns two faults raised inside fairseq into one line:
a checkpoint that ``torch.load`` cannot read (truncated, corrupt, or refused by
``weights_only=True``; the file is left as it is) and non-finite gradients in
``fairseq-train`` (fp32: the run stops; fp16: the loss scale reached its minimum,
or fairseq's overflow skip needed CUDA). Every other exception keeps Python's
normal report.
"""

import sys


class ConfigError(ValueError):
    """A user-facing configuration or data error whose message names the fix."""


def _config_error_in_chain(exc):
    """The first :class:`ConfigError` in ``exc``'s cause/context chain, if any.

    fairseq re-raises some errors as a generic ``Exception`` (e.g. the
    trainer's "Cannot load model parameters from checkpoint"); the plugin's
    own message is then in the chain.
    """
    return next((link for link in _chain(exc) if isinstance(link, ConfigError)), None)


# fairseq's own option checks that end in a bare ``assert`` (message prefix →
# the fix to print instead of a traceback)
_FAIRSEQ_ASSERTIONS = {
    "Must specify batch size": "pass --batch-size (streaming_lm: the number of parallel streams per "
                               "process) or --max-tokens (other tasks)",
}


# ---- faults during training and loading (issue 5) ------------------------------------
# Recognised from where the exception was raised (the frames of fairseq's own code), so
# that nothing in fairseq has to be patched: a checkpoint torch.load cannot read, and
# non-finite gradients in fairseq's trainer.


def _chain(exc):
    """``exc``, then its cause (or context), and so on, each once."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def _frames(exc):
    tb = exc.__traceback__
    while tb is not None:
        yield tb.tb_frame
        tb = tb.tb_next


def _in_fairseq(frame, module: str, function: str) -> bool:
    return (frame.f_code.co_name == function
            and frame.f_code.co_filename.replace("\\", "/").endswith(f"fairseq/{module}.py"))


def _unreadable_checkpoint(exc):
    """Message for a checkpoint that ``torch.load`` failed on inside fairseq's
    ``checkpoint_utils.load_checkpoint_to_cpu`` (truncated, corrupt, not a checkpoint)."""
    import os
    import zipfile

    frames = list(_frames(exc))
    loader = next((f for f in frames if _in_fairseq(f, "checkpoint_utils", "load_checkpoint_to_cpu")), None)
    if loader is None or not any(f.f_code.co_filename.replace("\\", "/").endswith("torch/serialization.py")
                                 for f in frames):
        return None
    path = str(loader.f_locals.get("path", "?"))
    folder = os.path.dirname(os.path.abspath(path))
    try:
        others = sorted(n for n in os.listdir(folder) if n.endswith(".pt") and n != os.path.basename(path)
                        and not n.endswith(".tmp") and n != "crash.pt")
    except OSError:
        others = []
    what = str(exc).strip().splitlines()[0].split(". ")[0][:100] if str(exc).strip() else type(exc).__name__
    alternatives = (f"other checkpoints in {folder}: {', '.join(others)}; " if others else "")
    if "Weights only load failed" in str(exc) and zipfile.is_zipfile(path):
        # a whole file that torch.load(weights_only=True) refuses: not corrupt, but unsafe to load
        return (f"cannot read checkpoint {path}: it holds Python objects that torch.load refuses to load "
                f"with weights_only=True (e.g. the argparse.Namespace that fairseq's own argparse-configured models such as `transformer` store); it was left as "
                f"it is. Load it only if you trust it, with TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1")
    if not others:
        return (f"cannot read checkpoint {path}: the file is truncated or corrupt ({what}); it was left as it "
                f"is and there is no other checkpoint in {folder}; move it away to train from scratch")
    pick = "checkpoint_best.pt" if "checkpoint_best.pt" in others else others[-1]
    return (f"cannot read checkpoint {path}: the file is truncated or corrupt ({what}); it was left as it is. "
            f"{alternatives}use another one (fairseq-train: --restore-file {os.path.join(folder, pick)}; "
            f"other tools: --path {os.path.join(folder, pick)}), or move the file away to train from scratch")


def _non_finite_gradients(exc):
    """Message for fairseq's trainer stopping on NaN/inf gradients (fp32), on a loss
    scale that reached its minimum (fp16), or on fairseq's fp16 overflow handling
    calling CUDA on a CPU-only machine."""
    trainer = None
    for link in _chain(exc):
        for frame in _frames(link):
            if _in_fairseq(frame, "trainer", "train_step"):
                trainer = frame.f_locals.get("self")
    if trainer is None:
        return None
    kinds = [type(e) for e in _chain(exc)]
    text = " ".join(str(e) for e in _chain(exc))
    try:
        update = trainer.get_num_updates() + 1
        save_dir = trainer.cfg.checkpoint.save_dir
    except Exception:  # noqa: BLE001 - a best-effort message, never a second traceback
        update, save_dir = "?", "the save directory"
    kept = (f"checkpoints in {save_dir} are as the last save left them (fairseq wrote the failing state "
            f"to crash.pt there for inspection)")
    if FloatingPointError in kinds and "Minimum loss scale reached" in text:
        return (f"fp16 loss scale reached --min-loss-scale at update {update}: the loss overflows at every "
                f"scale (NaN/inf in the model or the loss); training stopped; {kept}. Resume from "
                f"checkpoint_last.pt with a lower --lr or --clip-norm, or train in fp32")
    if FloatingPointError in kinds:
        return (f"non-finite gradients (NaN/inf) at update {update}: training stopped (fp32 never skips an "
                f"update); {kept}. Resume from checkpoint_last.pt with a lower --lr or --clip-norm, or train "
                f"with --fp16/--memory-efficient-fp16, which skip such updates and lower the loss scale")
    if OverflowError in kinds and "not compiled with CUDA" in text:
        return (f"fp16 gradient overflow at update {update}: fairseq skips the update by calling CUDA, which "
                f"this CPU-only torch lacks; {kept.split(' (')[0]}. On a CPU train in fp32 (it stops with this "
                f"kind of message on NaN/inf), or start fp16 with a low --fp16-init-scale (e.g. 16) so that "
                f"only a real NaN/inf overflows")
    return None


def _fault_message(exc):
    for link in _chain(exc):
        message = _unreadable_checkpoint(link)
        if message is not None:
            return message
    return _non_finite_gradients(exc)


def _excepthook(exc_type, exc, tb, _previous=sys.excepthook):
    found = _config_error_in_chain(exc)
    if found is not None:
        print(f"fairseq_plugins: error: {found}", file=sys.stderr)
        return
    if issubclass(exc_type, AssertionError):
        for prefix, fix in _FAIRSEQ_ASSERTIONS.items():
            if str(exc).startswith(prefix):
                print(f"fairseq_plugins: error: {exc}: {fix}", file=sys.stderr)
                return
    message = _fault_message(exc)
    if message is not None:
        print(f"fairseq_plugins: error: {message}", file=sys.stderr)
        return
    _previous(exc_type, exc, tb)


def install_excepthook() -> None:
    """Print :class:`ConfigError` as one line (idempotent)."""
    if getattr(sys.excepthook, "__name__", "") != "_excepthook":
        sys.excepthook = _excepthook
