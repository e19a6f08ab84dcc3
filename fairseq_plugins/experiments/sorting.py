"""Teacher-forced answer accuracy on the sorting task (∞-former paper, §4.1; docs/results.md).

:func:`score` loads a checkpoint with fairseq's ``checkpoint_utils`` and reads each example of the
split (``data-prep/make-sorting.sh`` output: T symbols, ``sep``, 20 answer symbols):

* memory models (``infinite_former_lm``, with or without its long-term memory): the whole example
  ``[</s>, x_1..x_T, sep, a_1..a_19]`` in one call, which the model cuts into segments of its
  ``segment_length`` and reads in order with its memory carried, starting empty at the example's
  first token, exactly as training streams with ``--reset-memory-at-document-boundary`` do;
* every other model (``transformer_lm``, ...): for each answer position, the last W tokens up to
  that position (W = the checkpoint's ``--tokens-per-sample``, i.e. 2 × the ∞-former segment in
  scripts/sorting.sh), the model's whole attention window.

The metric: over the 20 answer positions of every example, the share where the argmax of the
next-token logits (over the whole dictionary) is the answer symbol, the previous answer symbols
given (teacher forcing). References in the output:

* ``chance``: 1/20, a uniform guess among the symbols;
* ``chance_no_repeat``: H_20/20 ≈ 0.180, a uniform guess among the symbols not yet in the answer
  prefix (every symbol occurs once in the answer);
* ``window_count_baseline``: sort by the counts in the last W sequence tokens only (W as above,
  not yet answered symbols, ties by index) — what perfect counting within a window of that size
  gives; the drift makes it fall short of 1.

:func:`table` gathers RUNS/T<length>/<arm>/accuracy.json into one markdown + JSON table
(length × arm → accuracy). Run as ``fairseq-longmem sorting score|table``
(:mod:`fairseq_plugins.cli.sorting`).
"""

import glob
import json
import math
import os
from typing import Dict, List, Optional

import torch

from fairseq_plugins.errors import ConfigError
from fairseq_plugins.experiments import arms as arm_registry
from fairseq_plugins.experiments.answers import (arm_of, context_text, load_checkpoint, num_updates, read_answers,
                                                 row_positions, train_seconds, window_of)
from fairseq_plugins.report.table import Column, markdown, write_files

NUM_SYMBOLS = 20
SEPARATOR = "sep"
ARM_ORDER = arm_registry.names("lm")  # the columns of the table, in this order


# ----------------------------------------------------------------------------- data


def load_examples(data: str, split: str, dictionary, max_examples: Optional[int] = None):
    """Examples of a binarized sorting split.

    Returns:
        ``(sequences (n, T), answers (n, 20))`` LongTensors of dictionary indices.
    Raises:
        ConfigError: missing split, or lines that are not sorting examples.
    """
    from fairseq.data import data_utils

    lines = data_utils.load_indexed_dataset(os.path.join(data, split), dictionary, combine=False)
    if lines is None or len(lines) == 0:
        raise ConfigError(f"split '{split}' not found or empty in {data}; run data-prep/make-sorting.sh first")
    sep, eos = dictionary.index(SEPARATOR), dictionary.eos()
    if sep == dictionary.unk():
        raise ConfigError(f"{data}/dict.txt has no '{SEPARATOR}': not sorting-task data")
    sequences, answers = [], []
    for i in range(len(lines)):
        line = lines[i].long()
        if line.numel() == 1 and int(line[0]) == eos:
            continue  # the empty line between examples
        tokens = line[:-1] if int(line[-1]) == eos else line
        where = (tokens == sep).nonzero().flatten()
        if where.numel() != 1 or tokens.numel() - int(where[0]) - 1 != NUM_SYMBOLS:
            raise ConfigError(f"line {i} of {split} is not '<sequence> {SEPARATOR} <20 symbols>'")
        k = int(where[0])
        sequences.append(tokens[:k])
        answers.append(tokens[k + 1:])
        if max_examples and len(sequences) >= max_examples:
            break
    if len({s.numel() for s in sequences}) != 1:
        raise ConfigError(f"{split}: examples of different lengths")
    return torch.stack(sequences), torch.stack(answers)


def example_inputs(sequences, answers, eos: int, sep: int):
    """``[</s>, x_1..x_T, sep, a_1..a_19]`` per example, shape (n, T + 21): position T + 1 + k
    predicts answer k (the layout of a streamed document: it starts with </s>)."""
    n = sequences.size(0)
    return torch.cat([sequences.new_full((n, 1), eos), sequences, sequences.new_full((n, 1), sep),
                      answers[:, :-1]], dim=1)


# ----------------------------------------------------------------------------- predictions
# (the reading itself is the synthetic tasks' shared skeleton, fairseq_plugins.experiments.answers)


def predict_with_memory(model, inputs, batch_size: int = 16):
    """Argmax predictions at the 20 answer positions, whole examples in one call each
    (memory models segment them and carry their memory). Shape (n, 20)."""
    return read_answers(model, inputs, row_positions(inputs, NUM_SYMBOLS), batch_size=batch_size).predictions


def predict_with_window(model, inputs, window: int, batch_size: int = 64):
    """Argmax predictions at the 20 answer positions, each from the last ``window`` tokens
    up to and including that position. Shape (n, 20)."""
    positions = row_positions(inputs, NUM_SYMBOLS)
    return read_answers(model, inputs, positions, window=window, batch_size=batch_size).predictions


def accuracy(predictions, answers) -> float:
    """Share of answer positions where the prediction equals the answer."""
    if predictions.shape != answers.shape:
        raise ConfigError(f"predictions {tuple(predictions.shape)} vs answers {tuple(answers.shape)}")
    return float((predictions == answers).double().mean())


def window_count_predictions(sequences, answers, window: int):
    """Teacher-forced 'sort the counts of the last ``window`` sequence tokens' predictions,
    among symbols not yet in the answer prefix, ties by lower index. Shape (n, 20)."""
    seq = sequences[:, -window:] if window > 0 else sequences
    vocab = int(max(sequences.max(), answers.max())) + 1
    counts = torch.zeros(seq.size(0), vocab, dtype=torch.float64)
    counts.scatter_add_(1, seq, torch.ones_like(seq, dtype=torch.float64))
    # only symbols (those that occur in answers) are candidates
    candidate = torch.zeros_like(counts, dtype=torch.bool)
    candidate.scatter_(1, answers, True)
    preds = []
    for k in range(NUM_SYMBOLS):
        if k:
            candidate.scatter_(1, answers[:, k - 1:k], False)
        # score = count, minus a tiny index term so ties go to the lower index
        score = counts - 1e-6 * torch.arange(vocab, dtype=torch.float64)
        preds.append(score.masked_fill(~candidate, -math.inf).argmax(-1))
    return torch.stack(preds, dim=1)


# ----------------------------------------------------------------------------- score


def score(checkpoint: str, data: str, split: str = "test", max_examples: Optional[int] = None,
          batch_size: int = 16, cpu: bool = True) -> Dict:
    """The answer accuracy of one checkpoint on one split, with its references (see the module
    docstring): ``{"arm", "checkpoint", "data", "split", "length", "examples", "answer_tokens",
    "correct", "accuracy", "accuracy_per_position" (20 floats), "chance", "chance_no_repeat",
    "window_count_baseline", "window_count_baseline_window", "context", "parameters", "num_updates"}``.

    Raises:
        ConfigError: a missing checkpoint or dictionary, data that is not the sorting task's.
    """
    if not os.path.isfile(checkpoint):
        raise ConfigError(f"checkpoint {checkpoint} not found; train first (scripts/sorting.sh)")
    if not os.path.isfile(os.path.join(data, "dict.txt")):
        raise ConfigError(f"{data}/dict.txt not found; pass the bin/ folder of data-prep/make-sorting.sh")
    model, cfg, task = load_checkpoint(checkpoint, data, cpu)
    device = next(model.parameters()).device
    dictionary = task.source_dictionary
    sequences, answers = load_examples(data, split, dictionary, max_examples)
    inputs = example_inputs(sequences, answers, dictionary.eos(), dictionary.index(SEPARATOR)).to(device)
    arm = arm_of(cfg)
    window = window_of(model, cfg)
    if window is None:
        predictions = predict_with_memory(model, inputs, batch_size)
    else:
        predictions = predict_with_window(model, inputs, window, batch_size * 4)
    context = context_text(window, cfg)
    ref_window = window or 2 * int(cfg.model.segment_length)
    baseline = accuracy(window_count_predictions(sequences, answers, ref_window), answers)
    acc = accuracy(predictions, answers)
    per_position = (predictions == answers).double().mean(0).tolist()
    return {
        "arm": arm, "checkpoint": os.path.abspath(checkpoint), "data": os.path.abspath(data), "split": split,
        "length": int(sequences.size(1)), "examples": int(sequences.size(0)),
        "answer_tokens": int(answers.numel()), "correct": int((predictions == answers).sum()),
        "accuracy": acc, "accuracy_per_position": per_position,
        "chance": 1.0 / NUM_SYMBOLS,
        "chance_no_repeat": sum(1.0 / (NUM_SYMBOLS - k) for k in range(NUM_SYMBOLS)) / NUM_SYMBOLS,
        "window_count_baseline": baseline, "window_count_baseline_window": ref_window,
        "context": context, "parameters": sum(p.numel() for p in model.parameters()),
        "num_updates": num_updates(checkpoint),
    }


# ----------------------------------------------------------------------------- table


def collect(runs: str) -> List[Dict]:
    """The ``score()`` results saved under RUNS (``T*/ARM/accuracy.json``), in path order."""
    rows = []
    for path in sorted(glob.glob(os.path.join(runs, "T*", "*", "accuracy.json"))):
        with open(path, encoding="utf-8") as f:
            rows.append(json.load(f))
    return rows


def _accuracy_or_count(value) -> str:
    return f"{value:,}" if isinstance(value, int) else f"{value:.3f}"


def markdown_table(rows: List[Dict]) -> str:
    """Length × arm accuracy, the arms in the registry's order (others after, by name); a last row
    with each arm's parameter count (of its checkpoint at the first length)."""
    arms = sorted({r["arm"] for r in rows}, key=lambda a: (ARM_ORDER.index(a) if a in ARM_ORDER else 99, a))
    columns = [Column("T", "T")] + [Column(a, a, _accuracy_or_count, missing="–") for a in arms] + [
        Column("window_count_baseline", "window count baseline", ".3f"),
        Column("chance_no_repeat", "chance (no repeat)", ".3f"), Column("chance", "chance", ".3f")]
    lines = []
    for length in sorted({r["length"] for r in rows}):
        any_row = next(r for r in rows if r["length"] == length)
        line = {"T": length, **{k: any_row[k] for k in ("window_count_baseline", "chance_no_repeat", "chance")}}
        line.update({r["arm"]: r["accuracy"] for r in rows if r["length"] == length})
        lines.append(line)
    counts = {"T": "parameters"}
    for r in sorted(rows, key=lambda r: r["length"], reverse=True):
        counts[r["arm"]] = int(r["parameters"])
    return markdown(lines + [counts], columns) + "\n"


def table(runs: str, out_md: Optional[str] = None, out_json: Optional[str] = None) -> str:
    """Gather ``RUNS/T<length>/<arm>/accuracy.json`` into ``results.md`` (returned) and ``results.json``
    (``{"accuracy": {T: {arm or reference: accuracy}}, "runs": [score() results]}``), written whole.

    Raises:
        ConfigError: no accuracy.json under RUNS.
    """
    rows = collect(runs)
    if not rows:
        raise ConfigError(f"no {runs}/T*/ARM/accuracy.json found; run scripts/sorting.sh first")
    md = markdown_table(rows)
    result = {str(length): {r["arm"]: r["accuracy"] for r in rows if r["length"] == length}
              for length in sorted({r["length"] for r in rows})}
    for length, arms in result.items():
        ref = next(r for r in rows if str(r["length"]) == length)
        arms.update({"window_count_baseline": ref["window_count_baseline"], "chance": ref["chance"],
                     "chance_no_repeat": ref["chance_no_repeat"]})
    write_files(out_md or os.path.join(runs, "results.md"), md, out_json or os.path.join(runs, "results.json"),
                {"accuracy": result, "runs": rows}, sort_keys=True)
    return md
