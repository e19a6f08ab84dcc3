"""The faults that only fairseq's traceback can name, each as one line.

What the plugin can check before fairseq starts it checks there (:mod:`.prechecks`); what
fairseq decides inside its own loops (:mod:`.inference`, :mod:`.generation`) is checked
where it is decided. What remains is recognised here, from the exception fairseq raises, for
:func:`~fairseq_plugins.compat.hook.excepthook`:

* non-finite gradients in ``fairseq-train``: fairseq's trainer raises
  ``FloatingPointError`` (fp32: the run stops; fp16: the loss scale reached its minimum),
  or its fp16 overflow skip calls CUDA on a CPU-only torch (``OverflowError``);
* fairseq's own bare option assertions that have a known fix (``Must specify batch size``);
* a data folder fairseq's own tasks cannot read: a split, a dictionary or a language pair
  that is not there (:mod:`.data_files`);
* a rank of a multi-process resume refusing the checkpoint fairseq broadcasts to it
  (``distributed.utils.broadcast_object`` unpickles with ``weights_only=True``; the
  project's launcher passes ``--load-checkpoint-on-all-dp-ranks``, docs/training-at-scale.md).

The messages use only what fairseq raises and is passed: the exception chain, which
fairseq/torch functions were on the stack (by module and function name), fairseq's
``num_updates`` metric and the command line; never fairseq's local variables. (A checkpoint the tool cannot read is refused before fairseq
starts: :mod:`.checkpoint_files`.)
"""

from fairseq_plugins.compat.frames import passed_through
from fairseq_plugins.compat.process import cli_option

# fairseq's own option checks that end in a bare ``assert`` (message prefix -> the fix)
FAIRSEQ_ASSERTIONS = {
    "Must specify batch size": "pass --batch-size (streaming_lm: the number of parallel streams per "
                               "process) or --max-tokens (other tasks)",
}


def chain(exc):
    """``exc``, then its cause (or context), and so on, each once."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def failing_update() -> str:
    """The update being computed: fairseq's ``num_updates`` metric (updates done) + 1.

    fairseq's trainer logs that metric whenever its count changes (``set_num_updates``: after
    an update, and when a checkpoint restores it); none logged yet means no update is done,
    so the failing one is the first."""
    try:
        from fairseq.logging import metrics

        meter = metrics.get_meter("default", "num_updates")
        return str(int(meter.val) + 1) if meter is not None else "1"
    except Exception:  # noqa: BLE001 - a best-effort message, never a second traceback
        return "?"


def _non_finite_gradients(exc):
    """Message for fairseq's trainer stopping on NaN/inf gradients (fp32), on a loss
    scale that reached its minimum (fp16), or on fairseq's fp16 overflow handling
    calling CUDA on a CPU-only machine."""
    if not any(passed_through(link, "fairseq/trainer.py", "train_step") for link in chain(exc)):
        return None
    kinds = [type(e) for e in chain(exc)]
    text = " ".join(str(e) for e in chain(exc))
    update = failing_update()
    save_dir = cli_option("--save-dir", "checkpoints")
    kept = (f"checkpoints in {save_dir} are as the last save left them (fairseq wrote the failing state "
            f"to crash.pt there for inspection)")
    if FloatingPointError in kinds and "Minimum loss scale reached" in text:
        return (f"fp16 loss scale reached --min-loss-scale at update {update}: the loss overflows at every "
                f"scale (NaN/inf in the model or the loss); training stopped; {kept}. Resume from "
                f"checkpoint_last.pt with a lower --lr or --clip-norm, or train in fp32")
    if FloatingPointError in kinds:
        import torch

        gpu = torch.cuda.is_available() and not cli_option("--cpu", False)
        on_gpu = (", or train with --fp16/--memory-efficient-fp16, which skip such updates and lower the loss "
                  "scale" if gpu else "")
        return (f"non-finite gradients (NaN/inf) at update {update}: training stopped (fp32 never skips an "
                f"update); {kept}. Resume from checkpoint_last.pt with a lower --lr or --clip-norm{on_gpu}")
    if OverflowError in kinds and "not compiled with CUDA" in text:
        return (f"fp16 gradient overflow at update {update}: fairseq skips the update by calling CUDA, which "
                f"this CPU-only torch lacks; {kept.split(' (')[0]}. On a CPU train in fp32 (it stops with this "
                f"kind of message on NaN/inf), or start fp16 with a low --fp16-init-scale (e.g. 16) so that "
                f"only a real NaN/inf overflows")
    return None


def _broadcast_checkpoint_refused(exc):
    """Message for a rank > 0 of a multi-process resume: fairseq broadcasts the checkpoint
    rank 0 loaded and unpickles it with ``torch.load`` (``weights_only=True`` since torch
    2.6), which refuses the OmegaConf config it holds by then."""
    if "Weights only load failed" not in str(exc) or not passed_through(
            exc, "fairseq/distributed/utils.py", "broadcast_object"):
        return None
    return ("resuming with several processes: fairseq sends the checkpoint rank 0 loaded to the other ranks "
            "through torch.load(weights_only=True), which refuses the config it holds; pass "
            "--load-checkpoint-on-all-dp-ranks (every rank reads the file itself)")


def _fairseq_assertion(exc):
    if isinstance(exc, AssertionError):
        for prefix, fix in FAIRSEQ_ASSERTIONS.items():
            if str(exc).startswith(prefix):
                return f"{exc}: {fix}"
    return None


def fault_message(exc):
    """The one-line message for a fault fairseq raised (gradients, a bare option assertion,
    a refused broadcast, a data file that is not there: :mod:`.data_files`), or ``None``."""
    from fairseq_plugins.compat.data_files import missing_data_message

    for check in (_fairseq_assertion, _non_finite_gradients, _broadcast_checkpoint_refused):
        message = check(exc)
        if message is not None:
            return message
    return next((m for m in map(missing_data_message, chain(exc)) if m is not None), None)
