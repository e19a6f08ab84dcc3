"""Teacher-forced answers, read the way a checkpoint was trained: the scoring skeleton of the
synthetic tasks (the sorting task, :mod:`~fairseq_plugins.lab.sorting.score`; recall by distance,
:mod:`~fairseq_plugins.lab.recall.score`; MQAR, :mod:`~fairseq_plugins.lab.mqar.score`), with what
they read first: a generated task's manifest (:func:`read_manifest`) and dictionary
(:func:`task_dictionary`), the checkpoint (:func:`load_checkpoint`, :func:`check_dictionary`).

A task gives, per example, its input row — the example as a streamed document starts: ``</s>``
then its tokens — and the positions of that row whose next-token prediction it scores.
:func:`read_answers` returns the argmax (over the whole dictionary) and the log-probability of
the answer at each, reading as the checkpoint was trained:

* a memory model (:class:`~fairseq_plugins.modules.memory_bank.StreamingMemoryModel`:
  ``infinite_former_lm``, with or without its long-term memory) reads the row up to its last
  scored position in one call, which the model cuts into segments of its ``segment_length`` with
  its memory carried, starting empty at the row's first token — exactly as ``streaming_lm``
  training with ``--reset-memory-at-document-boundary`` reads each document;
* any other model (``language_modeling``: ``transformer_lm``, ``fastformer_lm``) reads, for each
  position, the last ``window`` tokens up to and including it (:func:`window_of`: the
  checkpoint's ``--tokens-per-sample``, the attention window it was trained with).

Rows of different lengths are batched longest first and padded on the right: every model here is
causal, so a position's prediction never depends on the padding after it (tests/lab/recall/test_recall.py
compares batched predictions with one call per example). A fairseq language model projects onto
the dictionary only the positions asked for (the output layer is most of the cost of a forward
at an 8k dictionary); any other callable (a test's stub) returns logits for every position.
"""

import json
import os
from typing import Callable, Dict, NamedTuple, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

from fairseq_plugins.errors import ConfigError
from fairseq_plugins.lab.common import arms as arm_registry

Rows = Union[Tensor, Sequence[Tensor]]  # (n, T) or n 1-D LongTensors


class Answers(NamedTuple):
    """``predictions`` (n, P) argmax ids; ``log_probs`` (n, P) natural-log probability of each
    target (None when no targets were given)."""

    predictions: Tensor
    log_probs: Optional[Tensor]


class TaskExamples(NamedTuple):
    """The examples of a split as the models read them: ``rows`` (n 1-D LongTensors: ``</s>``, then
    the example's tokens up to its last query marker), ``positions`` (n, P) the query markers' places
    in their rows, ``answers`` (n, P) the tokens that follow them, ``distances`` the tokens from each
    answer's key to its query ((n,) with one query per example, else (n, P))."""

    rows: Sequence[Tensor]
    positions: Tensor
    answers: Tensor
    distances: Tensor


# ----------------------------------------------------------------------------- checkpoints


def load_checkpoint(checkpoint: str, data: str, cpu: bool = True):
    """``(model in eval mode, cfg, task)`` of a fairseq checkpoint, its task reading ``data``
    (:func:`fairseq_plugins.lab.common.checkpoints.load`).

    Raises:
        ConfigError: a missing or unreadable file, a torch file that is no fairseq checkpoint, the
            plugin's own refusals (e.g. a dictionary other than the one it was trained with).
    """
    from fairseq_plugins.lab.common.checkpoints import load

    return load(checkpoint, data, cpu)


def check_dictionary(state: dict, dictionary, checkpoint: str, data: str, what: str, recipe: str) -> None:
    """Refuse a checkpoint trained with another dictionary than ``data``'s (``what``, e.g. "recall data";
    ``recipe``: what trains one on it). The plugin's models keep the dictionary's fingerprint; for any
    other model the embedding's rows and the training data's dict.txt (when still there) are compared.

    Raises:
        ConfigError: naming the problem and the fix.
    """
    from fairseq.data import Dictionary

    from fairseq_plugins.modules.dictionary_check import FINGERPRINT_KEY, dictionary_fingerprint

    weights = state.get("model") or {}
    cfg = state.get("cfg") or {}
    trained_on = (cfg.get("task") or {}).get("data")
    if FINGERPRINT_KEY in weights:
        same = torch.equal(weights[FINGERPRINT_KEY].long(), dictionary_fingerprint([dictionary]))
    else:
        same = all(w.size(0) == len(dictionary) for k, w in weights.items() if k.endswith("embed_tokens.weight"))
        if same and trained_on and os.path.isfile(os.path.join(trained_on, "dict.txt")):
            same = Dictionary.load(os.path.join(trained_on, "dict.txt")).symbols == dictionary.symbols
    if not same:
        raise ConfigError(f"{checkpoint} was trained with another dictionary than the {what}'s "
                          f"({data}/dict.txt), so its token ids mean other words; score it on the data it was "
                          f"trained on ({trained_on}) or train it on {data} ({recipe})")


def read_manifest(data: str, name: str, not_there: Callable[[str], str]) -> Dict:
    """The manifest ``DATA/../name`` of a generated task's output whose ``bin/`` folder is ``data``.

    Raises:
        ConfigError: ``not_there(path of the manifest)`` when it or ``data/dict.txt`` is missing (not the
            task's data, or an unfinished build).
    """
    path = os.path.join(os.path.dirname(os.path.abspath(data)), name)
    if not os.path.isfile(path) or not os.path.isfile(os.path.join(data, "dict.txt")):
        raise ConfigError(not_there(path))
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def task_dictionary(data: str, marker: str, not_task: str):
    """``data/dict.txt`` as a fairseq ``Dictionary``, which must hold the task's ``marker``.

    Raises:
        ConfigError: ``DATA/dict.txt has no 'MARKER': NOT_TASK``.
    """
    from fairseq.data import Dictionary

    dictionary = Dictionary.load(os.path.join(data, "dict.txt"))
    if dictionary.index(marker) == dictionary.unk():
        raise ConfigError(f"{data}/dict.txt has no '{marker}': {not_task}")
    return dictionary


def arm_of(cfg) -> str:
    """The LM arm (:mod:`fairseq_plugins.lab.common.arms`) a checkpoint's model config belongs to; else
    its arch name."""
    name = cfg.model._name
    return arm_registry.arm_of_model("lm", name, cfg.model) or name


def read_state(checkpoint: str) -> dict:
    """A checkpoint's saved dict as it is on disk (``model``, ``cfg``, ``optimizer_history``, ...;
    :func:`fairseq_plugins.lab.common.checkpoints.read_state`).

    Raises:
        ConfigError: the file is missing, cannot be read (another file, or one cut short), or is a
            torch file that is no fairseq checkpoint.
    """
    from fairseq_plugins.lab.common.checkpoints import read_state as read

    return read(checkpoint)


def num_updates(checkpoint: str) -> Optional[int]:
    """The updates a checkpoint was trained for (None when it does not say)."""
    try:
        return int(read_state(checkpoint)["optimizer_history"][-1]["num_updates"])
    except Exception:
        return None


def train_seconds(checkpoint: str) -> Optional[float]:
    """Wall seconds of training, as the recipes (fairseq_plugins/lab/sorting/sorting.sh, recall.sh) record them next to
    the checkpoint in ``train_seconds``."""
    try:
        with open(os.path.join(os.path.dirname(checkpoint), "train_seconds"), encoding="utf-8") as f:
            return float(f.read().strip())
    except (OSError, ValueError):
        return None


def window_of(model, cfg) -> Optional[int]:
    """None for a memory model (it reads whole rows), else the tokens it attends to: the checkpoint's
    ``--tokens-per-sample``."""
    from fairseq_plugins.modules.memory_bank import StreamingMemoryModel

    return None if isinstance(model, StreamingMemoryModel) else int(cfg.task.tokens_per_sample)


def context_text(window: Optional[int], cfg) -> str:
    """How :func:`read_answers` read the examples, in words (for the results)."""
    if window is None:
        return f"segments of {cfg.model.segment_length}, memory carried from the example's start"
    return f"window of the last {window} tokens"


# ----------------------------------------------------------------------------- reading


def _logits_at(model, tokens: Tensor, at: Tensor) -> Tensor:
    """Next-token logits ``(b, P, V)`` at positions ``at`` ``(b, P)`` of ``tokens`` ``(b, T)``."""
    from fairseq.models import FairseqLanguageModel

    if isinstance(model, FairseqLanguageModel):
        features = model(tokens, features_only=True)[0]  # (b, T, C)
        picked = features.gather(1, at.unsqueeze(-1).expand(-1, -1, features.size(-1)))
        return model.output_layer(picked)
    out = model(tokens)
    logits = out[0] if isinstance(out, (tuple, list)) else out
    return logits.gather(1, at.unsqueeze(-1).expand(-1, -1, logits.size(-1)))


def _contexts(rows: Rows, positions: Tensor, window: Optional[int]):
    """``[(context (T_c,), positions in it (P_c,), (example, first column))]``: whole rows cut after
    their last position (``window`` None), else one context of the last ``window`` tokens per position."""
    out = []
    for i in range(positions.size(0)):
        row = rows[i]
        if window is None:
            last = int(positions[i].max())
            out.append((row[:last + 1], positions[i], (i, 0)))
            continue
        for j, p in enumerate(positions[i].tolist()):
            begin = max(0, p + 1 - window)
            out.append((row[begin:p + 1], positions.new_tensor([p - begin]), (i, j)))
    return out


@torch.no_grad()
def read_answers(model, rows: Rows, positions: Tensor, targets: Optional[Tensor] = None,
                 window: Optional[int] = None, batch_size: int = 16, pad: int = 1) -> Answers:
    """The teacher-forced predictions at ``positions`` (module docstring).

    Args:
        model: a fairseq language model in eval mode (or a callable returning ``(b, T, V)`` logits).
        rows: n input rows (``</s>`` then the example's tokens), on the model's device.
        positions: ``(n, P)`` the row positions whose next token is predicted.
        targets: ``(n, P)`` the tokens that should follow them (None: predictions only).
        window: None: each row in one call (memory models); else the last ``window`` tokens per position.
        batch_size: contexts per forward call.
        pad: the id the shorter contexts of a batch are padded with on the right (fairseq's ``<pad>``).
    Returns:
        :class:`Answers` on the CPU.
    Raises:
        ConfigError: ``targets`` not of the shape of ``positions``, or a position outside its row.
    """
    n, width = positions.shape
    if targets is not None and tuple(targets.shape) != (n, width):
        raise ConfigError(f"targets {tuple(targets.shape)} vs positions {tuple(positions.shape)}")
    if n and (int(positions.min()) < 0 or any(int(positions[i].max()) >= len(rows[i]) for i in range(n))):
        raise ConfigError("a position to score lies outside its row")
    predictions = torch.zeros(n, width, dtype=torch.long)
    log_probs = torch.zeros(n, width, dtype=torch.float64) if targets is not None else None
    contexts = _contexts(rows, positions, window)
    order = sorted(range(len(contexts)), key=lambda c: -len(contexts[c][0]))  # stable: ties keep their order
    for b in range(0, len(order), batch_size):
        chunk = [contexts[c] for c in order[b:b + batch_size]]
        longest = len(chunk[0][0])
        tokens = chunk[0][0].new_full((len(chunk), longest), pad)
        for r, (context, _, _) in enumerate(chunk):
            tokens[r, :len(context)] = context
        at = torch.stack([p for _, p, _ in chunk]).to(tokens.device)
        logits = _logits_at(model, tokens, at).float()  # (b, P_c, V)
        best = logits.argmax(-1).cpu()
        lprobs = torch.log_softmax(logits, dim=-1).cpu() if targets is not None else None
        for r, (_, p, (i, j)) in enumerate(chunk):
            columns = slice(j, j + p.numel())
            predictions[i, columns] = best[r]
            if lprobs is not None:
                wanted = targets[i, columns].cpu().unsqueeze(-1)
                log_probs[i, columns] = lprobs[r].gather(-1, wanted).squeeze(-1).double()
    return Answers(predictions, log_probs)


def answer_examples(model, examples: TaskExamples, window: Optional[int] = None, batch_size: int = 16,
                    pad: int = 1) -> Tuple[Answers, Tensor]:
    """:func:`read_answers` of a task's examples, their rows moved to the model's device: ``(answers,
    hits)``, ``hits`` (n, P) bool, the prediction equal to the answer."""
    device = next(iter(model.parameters()), torch.zeros(0)).device
    rows = [r.to(device) for r in examples.rows]
    answers = read_answers(model, rows, examples.positions, examples.answers, window, batch_size, pad)
    return answers, answers.predictions == examples.answers


def row_positions(rows: Tensor, count: int) -> Tensor:
    """``(n, count)``: the last ``count`` positions of every row of ``rows`` ``(n, T)``."""
    total = rows.size(1)
    return torch.arange(total - count, total).expand(rows.size(0), count)
