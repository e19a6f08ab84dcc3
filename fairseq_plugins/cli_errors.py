"""One-line errors in the fairseq command-line tools.

When a fairseq CLI (``fairseq-train``, ``fairseq-eval-lm``, ``fairseq-generate``,
``fairseq-interactive``, ...) loads the plugin with ``--user-dir``, the package
installs :func:`excepthook` for that process, which prints one line
``fairseq_plugins: error: ...`` for

* a :class:`~fairseq_plugins.errors.ConfigError` anywhere in the exception's chain
  (fairseq re-raises some errors as a bare ``Exception``);
* fairseq's own bare option assertions that have a known fix (``Must specify batch size``);
* a checkpoint that ``torch.load`` cannot read inside fairseq's checkpoint loading
  (truncated, corrupt, or refused by ``weights_only=True``; the file is left as it is);
* non-finite gradients in ``fairseq-train`` (fp32: the run stops; fp16: the loss scale
  reached its minimum, or fairseq's overflow skip needed CUDA);
* ``fairseq-eval-lm --context-window`` not below ``--tokens-per-sample`` (fairseq's
  ``language_modeling`` task fails building its blocks of the difference);
* ``fairseq-eval-lm`` about to skip blocks or lines longer than the model's positions
  (it would report a perplexity over the rest: :class:`SkippedSamplesFilter`);
* ``fairseq-generate`` dividing by zero after generating nothing (its batch sampler dropped
  every batch: see ``--required-batch-size-multiple``);
* ``fairseq-generate``'s beam search stopping on ``AssertionError: N < N`` over a forced prefix
  that starts with end-of-sentence (see :func:`_beam_left_unfinished`);
* a rank of a multi-process resume refusing the checkpoint fairseq broadcasts to it
  (``--load-checkpoint-on-all-dp-ranks``).

Every other exception keeps Python's report. Either way the line comes last (after
whatever fairseq logged to stdout), and a save directory that this process created
and left empty (``fairseq-train`` makes ``--save-dir`` before the plugin's checks run)
is removed again, so that a refused run leaves nothing behind; a folder that existed
before the process loaded the plugin is never touched. Importing the package from Python
(a notebook, a test runner, another tool) installs nothing: :func:`install` is
called only when the running program is a fairseq CLI (:func:`running_fairseq_cli`),
or explicitly by a script that runs one in-process.

The messages use only what fairseq raises and is passed: the exception chain,
which fairseq/torch functions were on the stack (by module and function name),
the file object fairseq hands to ``torch.load``, fairseq's ``num_updates`` metric
and the command line's ``--save-dir``; never fairseq's local variables.
"""

import logging
import os
import re
import sys
import zipfile
from typing import Optional

from fairseq_plugins.errors import ConfigError

PREFIX = "fairseq_plugins: error: "

# fairseq's own option checks that end in a bare ``assert`` (message prefix → the fix)
_FAIRSEQ_ASSERTIONS = {
    "Must specify batch size": "pass --batch-size (streaming_lm: the number of parallel streams per "
                               "process) or --max-tokens (other tasks)",
}


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


def _is(frame, path_suffix: str, function: str) -> bool:
    return (frame.f_code.co_name == function
            and frame.f_code.co_filename.replace("\\", "/").endswith(path_suffix))


def _cli_option(name: str, default: str) -> str:
    """The value of ``--name`` on this process's command line (``default`` if absent)."""
    argv = sys.argv[1:]
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return default


def _torch_load_file(frames):
    """The file fairseq handed to ``torch.load`` (its public argument ``f``), as a path."""
    for frame in frames:
        if _is(frame, "torch/serialization.py", "load"):
            f = frame.f_locals.get("f")
            return getattr(f, "name", f)
    return None


def _unreadable_checkpoint(exc):
    """Message for a checkpoint that ``torch.load`` failed on inside fairseq's
    ``checkpoint_utils.load_checkpoint_to_cpu`` (truncated, corrupt, not a checkpoint)."""
    frames = list(_frames(exc))
    if not any(_is(f, "fairseq/checkpoint_utils.py", "load_checkpoint_to_cpu") for f in frames):
        return None
    path = _torch_load_file(frames)
    if not isinstance(path, (str, os.PathLike)):
        return None
    path = str(path)
    folder = os.path.dirname(os.path.abspath(path))
    try:
        others = sorted(n for n in os.listdir(folder) if n.endswith(".pt") and n != os.path.basename(path)
                        and not n.endswith(".tmp") and n != "crash.pt")
    except OSError:
        others = []
    what = str(exc).strip().splitlines()[0].split(". ")[0][:100] if str(exc).strip() else type(exc).__name__
    if "Weights only load failed" in str(exc) and zipfile.is_zipfile(path):
        # a whole file that torch.load(weights_only=True) refuses: not corrupt, but unsafe to load
        return (f"cannot read checkpoint {path}: it holds Python objects that torch.load refuses to load "
                f"with weights_only=True (e.g. the argparse.Namespace that fairseq's own argparse-configured "
                f"models such as `transformer` store); it was left as it is. Load it only if you trust it, "
                f"with TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1")
    tool = running_tool()  # the fix is the running tool's: resume (fairseq-train) or --path (the readers)
    if not others:
        fix = {"train": "move it away to train from scratch",
               None: "move it away to train from scratch (fairseq-train), or pass another one with --path"}.get(
            tool, "pass a complete checkpoint with --path")
        return (f"cannot read checkpoint {path}: the file is truncated or corrupt ({what}); it was left as it "
                f"is and there is no other checkpoint in {folder}; {fix}")
    pick = os.path.join(folder, "checkpoint_best.pt" if "checkpoint_best.pt" in others else others[-1])
    fix = {"train": f"resume from another one with --restore-file {pick}, or move the file away to train from scratch",
           None: f"use another one (fairseq-train: --restore-file {pick}; other tools: --path {pick})"}.get(
        tool, f"use another one with --path {pick}")
    return (f"cannot read checkpoint {path}: the file is truncated or corrupt ({what}); it was left as it is. "
            f"other checkpoints in {folder}: {', '.join(others)}; {fix}")


def _failing_update() -> str:
    """The update being computed: fairseq's ``num_updates`` metric (updates done) + 1."""
    try:
        from fairseq.logging import metrics

        meter = metrics.get_meter("default", "num_updates")
        return str(int(meter.val) + 1) if meter is not None else "?"
    except Exception:  # noqa: BLE001 - a best-effort message, never a second traceback
        return "?"


def _non_finite_gradients(exc):
    """Message for fairseq's trainer stopping on NaN/inf gradients (fp32), on a loss
    scale that reached its minimum (fp16), or on fairseq's fp16 overflow handling
    calling CUDA on a CPU-only machine."""
    if not any(_is(f, "fairseq/trainer.py", "train_step") for link in _chain(exc) for f in _frames(link)):
        return None
    kinds = [type(e) for e in _chain(exc)]
    text = " ".join(str(e) for e in _chain(exc))
    update = _failing_update()
    save_dir = _cli_option("--save-dir", "checkpoints")
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


def _context_window_too_large(exc):
    """Message for fairseq-eval-lm failing to build its token blocks because
    ``--context-window`` left no new tokens per block (fairseq subtracts it from
    ``--tokens-per-sample``: ZeroDivisionError at equality, ValueError beyond)."""
    frames = [f for link in _chain(exc) for f in _frames(link)]
    if not (any(_is(f, "fairseq_cli/eval_lm.py", "main") for f in frames)
            and any(_is(f, "fairseq/data/token_block_dataset.py", "__init__") for f in frames)):
        return None
    window, tokens = _cli_option("--context-window", "0"), _cli_option("--tokens-per-sample", "1024")
    try:
        if int(window) < int(tokens):
            return None
    except ValueError:
        return None
    return (f"--context-window {window} must be smaller than --tokens-per-sample {tokens}: fairseq-eval-lm scores "
            f"blocks of --tokens-per-sample minus --context-window new tokens, each after that many tokens of "
            f"context; pass e.g. --context-window {int(tokens) // 2}")


def _nothing_generated(exc):
    """Message for fairseq-generate's ZeroDivisionError when no batch was generated."""
    if not isinstance(exc, ZeroDivisionError) or not any(_is(f, "fairseq_cli/generate.py", "_main")
                                                         for f in _frames(exc)):
        return None
    multiple = _cli_option("--required-batch-size-multiple", "8")
    return (f"fairseq-generate generated nothing: fairseq drops the last batch when its size is not a multiple of "
            f"--required-batch-size-multiple ({multiple}), and here that was the only batch (fewer examples than "
            f"--batch-size); pass --required-batch-size-multiple 1 to generate every example")


_STEP_ASSERTION = re.compile(r"(\d+) < \1")


def _beam_left_unfinished(exc):
    """Message for fairseq-generate's beam search over forced prefixes (``--prefix-size``, or
    language_modeling's source tokens) that hold end-of-sentence: ``assert step < max_len`` in
    ``SequenceGenerator._generate`` (a prefix that starts with it has its one finite beam
    finalised at step 0, beam search expanding only the first beam there, and the others left at
    -inf, so it never collects --beam hypotheses) or ``assert (first_beam == target_prefix)``
    in ``_prefix_tokens`` (one inside it). Sampling and --beam 1 follow such a prefix."""
    frames = list(_frames(exc))
    if not (isinstance(exc, AssertionError) and frames
            and any(_is(f, "fairseq_cli/generate.py", "_main") for f in frames)
            and ((_STEP_ASSERTION.fullmatch(str(exc)) and _is(frames[-1], "fairseq/sequence_generator.py", "_generate"))
                 or _is(frames[-1], "fairseq/sequence_generator.py", "_prefix_tokens"))):
        return None
    beam = _cli_option("--beam", "5")
    if beam == "1" or "--sampling" in sys.argv[1:]:
        return None
    prefix = _cli_option("--prefix-size", "0")
    forced = (f"its first --prefix-size {prefix} target tokens" if prefix not in ("0", "")
              else "its source tokens (language_modeling's prompt)")
    where = ("a prompt that starts with it, or an empty line of the split: data-prep separates documents with "
             "empty lines" if _cli_option("--sample-break-mode", "none") == "eos" else
             "e.g. a block that starts at a line end")
    return (f"fairseq-generate's beam search (--beam {beam}) cannot follow a forced prefix ({forced}) that holds "
            f"end-of-sentence ({where}); generate with --beam 1 or --sampling --beam 1, or beam-search a prompt "
            f"file of one prompt per line without empty lines (--sample-break-mode eos; docs/generation.md)")


def _broadcast_checkpoint_refused(exc):
    """Message for a rank > 0 of a multi-process resume: fairseq broadcasts the checkpoint
    rank 0 loaded and unpickles it with ``torch.load`` (``weights_only=True`` since torch
    2.6), which refuses the OmegaConf config it holds by then."""
    if "Weights only load failed" not in str(exc) or not any(
            _is(f, "fairseq/distributed/utils.py", "broadcast_object") for f in _frames(exc)):
        return None
    return ("resuming with several processes: fairseq sends the checkpoint rank 0 loaded to the other ranks "
            "through torch.load(weights_only=True), which refuses the config it holds; pass "
            "--load-checkpoint-on-all-dp-ranks (every rank reads the file itself)")


def fault_message(exc):
    """The one-line message for a fault fairseq raised (checkpoint, gradients, eval-lm or
    generate options), or ``None``."""
    for link in _chain(exc):
        message = _unreadable_checkpoint(link)
        if message is not None:
            return message
    for check in (_non_finite_gradients, _context_window_too_large, _nothing_generated, _beam_left_unfinished,
                  _broadcast_checkpoint_refused):
        message = check(exc)
        if message is not None:
            return message
    return None


def one_line_message(exc):
    """What :func:`excepthook` prints for ``exc`` (without the prefix), or ``None`` to
    keep Python's traceback."""
    found = next((link for link in _chain(exc) if isinstance(link, ConfigError)), None)
    if found is not None:
        return str(found)
    if isinstance(exc, AssertionError):
        for prefix, fix in _FAIRSEQ_ASSERTIONS.items():
            if str(exc).startswith(prefix):
                return f"{exc}: {fix}"
    return fault_message(exc)


# the outermost folder of --save-dir that did not exist when install() ran (None: it all existed)
_new_save_dir: Optional[str] = None


def _first_missing_folder(path: str) -> Optional[str]:
    """The outermost folder of ``path`` that does not exist (``path`` itself, or an ancestor)."""
    path = os.path.abspath(path)
    if os.path.exists(path):
        return None
    while not os.path.exists(os.path.dirname(path)):
        path = os.path.dirname(path)
    return path


def remove_new_empty_save_dir() -> None:
    """Remove the folders of ``--save-dir`` created since :func:`install` if they are
    still empty (innermost first; ``os.rmdir`` never removes a folder with anything in it)."""
    if _new_save_dir is None:
        return
    folder = os.path.abspath(_cli_option("--save-dir", "checkpoints"))
    while True:
        try:
            os.rmdir(folder)
        except OSError:  # not empty, already gone, or not ours to remove
            return
        if folder == _new_save_dir:
            return
        folder = os.path.dirname(folder)


def excepthook(exc_type, exc, tb):
    remove_new_empty_save_dir()
    message = one_line_message(exc)
    sys.stdout.flush()  # fairseq logs to stdout: everything it wrote comes before the error
    if message is not None:
        sys.stderr.flush()
        print(PREFIX + message, file=sys.stderr, flush=True)
        return
    sys.__excepthook__(exc_type, exc, tb)


def running_tool() -> Optional[str]:
    """Which of fairseq's command-line tools this process is (``train``, ``eval_lm``,
    ``generate``, ``interactive``, ...: ``fairseq-<tool>`` or ``python -m fairseq_cli.<tool>``),
    or ``None``."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    name = str(getattr(spec, "name", "")) if spec is not None else ""
    if name.startswith("fairseq_cli."):
        return name[len("fairseq_cli."):]
    program = os.path.basename(sys.argv[0] if sys.argv else "")
    return program[len("fairseq-"):].replace("-", "_") if program.startswith("fairseq-") else None


def running_fairseq_cli() -> bool:
    """True when this process is one of fairseq's command-line tools
    (``fairseq-train`` ..., or ``python -m fairseq_cli.<tool>``)."""
    return running_tool() is not None


_SKIPPED = re.compile(r"(\d+) samples have invalid sizes and will be skipped, max_positions=(\S+?),")


class SkippedSamplesFilter(logging.Filter):
    """In ``fairseq-eval-lm``, fairseq's warning that it skips samples longer than the
    model's ``max_positions`` becomes a refusal: a perplexity over fewer tokens than the
    split holds is never reported. (Installed on ``fairseq.tasks.fairseq_task``, whose
    ``filter_indices_by_size`` logs it; the exception leaves through fairseq's call.)"""

    def filter(self, record):
        found = _SKIPPED.match(record.getMessage())
        if found is None:
            return True
        count, limit = found.group(1), found.group(2)
        raise ConfigError(
            f"fairseq-eval-lm would skip {count} samples of the split longer than the model's max_positions={limit} "
            f"and report a perplexity over the rest: the model takes at most {limit} positions (fastformer_lm with "
            f"--decoder-learned-pos: its --max-target-positions at training); evaluate with --tokens-per-sample "
            f"{limit} or less and --sample-break-mode none (lines of eos/complete mode can be longer)")


def install() -> None:
    """Print one-line errors in this process (for a script that runs a fairseq CLI in-process),
    and remember whether ``--save-dir`` exists yet (see :func:`remove_new_empty_save_dir`)."""
    global _new_save_dir
    _new_save_dir = _first_missing_folder(_cli_option("--save-dir", "checkpoints"))
    sys.excepthook = excepthook
    if running_tool() == "eval_lm":
        logging.getLogger("fairseq.tasks.fairseq_task").addFilter(SkippedSamplesFilter())
