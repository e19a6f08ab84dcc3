"""Teacher-forced answer accuracy on the sorting task (∞-former paper, §4.1; docs/results/sorting.md).

:func:`score` loads a checkpoint with fairseq's ``checkpoint_utils`` and reads each example of the
split (``fairseq_plugins/lab/sorting/make-sorting.sh`` output: T symbols, ``sep``, K answer symbols; K, the alphabet, is
read from the data's dictionary: 20 in the paper):

* memory models (``infinite_former_lm``, with or without its long-term memory): the whole example
  ``[</s>, x_1..x_T, sep, a_1..a_{K-1}]`` in one call, which the model cuts into segments of its
  ``segment_length`` and reads in order with its memory carried, starting empty at the example's
  first token, exactly as training streams with ``--reset-memory-at-document-boundary`` do;
* every other model (``transformer_lm``, ...): for each answer position, the last W tokens up to
  that position (W = the checkpoint's ``--tokens-per-sample``, i.e. 2 × the ∞-former segment in
  fairseq_plugins/lab/sorting/sorting.sh), the model's whole attention window.

``memory_wiped`` scores the memory-wiped control: every long-term memory of the model emptied before
each read (:func:`~fairseq_plugins.modules.memory.contract.set_memory_wiped`), the short-term memory
untouched.

The metric: over the K answer positions of every example, the share where the argmax of the
next-token logits (over the whole dictionary) is the answer symbol, the previous answer symbols
given (teacher forcing). References in the output:

* ``chance``: 1/K, a uniform guess among the symbols;
* ``chance_no_repeat``: H_K/K (0.180 for K = 20), a uniform guess among the symbols not yet in the
  answer prefix (every symbol occurs once in the answer);
* ``window_count_baseline``: at each answer position, sort by the counts of the sequence tokens this
  model attends to there without a long-term memory (not yet answered symbols, ties by index): what
  perfect counting within the arm's own window gives; the drift makes it fall short of 1. The
  window (:func:`visible_sequence_tokens`): for the memory models the answer's segment and the
  short-term memory before it (``--mem-len`` tokens), for the others the last W tokens;
* ``receptive_field_baseline``: the same counting over every sequence token the whole stack of
  layers reaches without a long-term memory (:func:`first_reached`): a memory model's layer l reads
  the short-term memory of layer l − 1's outputs, which read their own short-term memory, so L
  layers see further back than one layer's window (Transformer-XL's dependency length, linear in
  the layers); a window model's stack reads its W tokens and nothing more, the two baselines are
  one there. This one is the ceiling of counting for a model without a long-term memory
  (docs/results/sorting.md, "The task").

The table over arms, seeds and the wiped control: :mod:`fairseq_plugins.lab.sorting.table`.
Run as ``fairseq-longmem sorting score`` (:mod:`fairseq_plugins.lab.sorting.cli`).
"""

import math
import os
import re
from typing import Dict, List, Optional, Sequence, Tuple, Union

import torch

from fairseq_plugins.errors import ConfigError
from fairseq_plugins.lab.common.answers import (arm_of, check_dictionary, context_text, load_checkpoint,
                                                 num_updates, read_answers, read_state, row_positions,
                                                 window_of)

SEPARATOR = "sep"
# the data and the recipe named by the refusal of a checkpoint of another dictionary
DATA_WHAT, RECIPE = "sorting data", "fairseq_plugins/lab/sorting/sorting.sh; SYMBOLS sets its alphabet"
SYMBOL = re.compile(r"s\d\d")  # the symbols' names in make-sorting.sh's dictionary


# ----------------------------------------------------------------------------- data


def load_examples(data: str, split: str, dictionary, max_examples: Optional[int] = None):
    """Examples of a binarized sorting split.

    Returns:
        ``(sequences (n, T), answers (n, K))`` LongTensors of dictionary indices, K =
        :func:`num_symbols` of the dictionary.
    Raises:
        ConfigError: missing split, or lines that are not sorting examples.
    """
    from fairseq.data import data_utils

    lines = data_utils.load_indexed_dataset(os.path.join(data, split), dictionary, combine=False)
    if lines is None or len(lines) == 0:
        raise ConfigError(f"split '{split}' not found or empty in {data}; run fairseq_plugins/lab/sorting/make-sorting.sh first")
    sep, eos = dictionary.index(SEPARATOR), dictionary.eos()
    if sep == dictionary.unk():
        raise ConfigError(f"{data}/dict.txt has no '{SEPARATOR}': not sorting-task data")
    k_symbols = num_symbols(dictionary)
    sequences, answers = [], []
    for i in range(len(lines)):
        line = lines[i].long()
        if line.numel() == 1 and int(line[0]) == eos:
            continue  # the empty line between examples
        tokens = line[:-1] if int(line[-1]) == eos else line
        where = (tokens == sep).nonzero().flatten()
        if where.numel() != 1 or tokens.numel() - int(where[0]) - 1 != k_symbols:
            raise ConfigError(f"line {i} of {split} is not '<sequence> {SEPARATOR} <{k_symbols} symbols>' "
                              f"(the alphabet of {data}/dict.txt); rebuild it with fairseq_plugins/lab/sorting/make-sorting.sh")
        k = int(where[0])
        sequences.append(tokens[:k])
        answers.append(tokens[k + 1:])
        if max_examples and len(sequences) >= max_examples:
            break
    if len({s.numel() for s in sequences}) != 1:
        raise ConfigError(f"{split}: examples of different lengths")
    return torch.stack(sequences), torch.stack(answers)


def num_symbols(dictionary) -> int:
    """K, the alphabet of a sorting dictionary: its symbols named like ``s07``."""
    return sum(1 for word in dictionary.symbols if SYMBOL.fullmatch(word))


def example_inputs(sequences, answers, eos: int, sep: int):
    """``[</s>, x_1..x_T, sep, a_1..a_{K-1}]`` per example, shape (n, T + K + 1): position T + 1 + k
    predicts answer k (the layout of a streamed document: it starts with </s>)."""
    n = sequences.size(0)
    return torch.cat([sequences.new_full((n, 1), eos), sequences, sequences.new_full((n, 1), sep),
                      answers[:, :-1]], dim=1)


# ----------------------------------------------------------------------------- predictions
# (the reading itself is the synthetic tasks' shared skeleton, fairseq_plugins.lab.common.answers)


def predict_with_memory(model, inputs, k_symbols: int, batch_size: int = 16):
    """Argmax predictions at the K answer positions, whole examples in one call each
    (memory models segment them and carry their memory). Shape (n, K)."""
    return read_answers(model, inputs, row_positions(inputs, k_symbols), batch_size=batch_size).predictions


def predict_with_window(model, inputs, k_symbols: int, window: int, batch_size: int = 64):
    """Argmax predictions at the K answer positions, each from the last ``window`` tokens
    up to and including that position. Shape (n, K)."""
    positions = row_positions(inputs, k_symbols)
    return read_answers(model, inputs, positions, window=window, batch_size=batch_size).predictions


def accuracy(predictions, answers) -> float:
    """Share of answer positions where the prediction equals the answer."""
    if predictions.shape != answers.shape:
        raise ConfigError(f"predictions {tuple(predictions.shape)} vs answers {tuple(answers.shape)}")
    return float((predictions == answers).double().mean())


def first_reached(position: int, segment: int, mem_len: int = 0, layers: int = 1) -> int:
    """The first position whose token reaches the output at ``position`` through ``layers`` blocks
    of attention over [short-term memory; segment], without a long-term memory (positions of the
    stream from its start, 0; the memory starts empty there).

    A block at position q of the segment that starts at ⌊q/S⌋·S (``segment`` S) attends to that
    segment up to q and to the M = ``mem_len`` block inputs before it (its short-term memory:
    :class:`~fairseq_plugins.modules.attention.rotary.ShortTermMemoryAttention`), and each of those
    inputs is the output of the block below at its own position, computed with that block's own
    window. The earliest input of block l is then the earliest of block l − 1 at the earliest
    position block l reads, so with g(q) = max(0, ⌊q/S⌋·S − M)

        first_reached(p) = g(g(...g(p)...))        (``layers`` = L times),

    p − first_reached(p) between L·M and L·M + S − 1 when M is a multiple of S (Transformer-XL,
    Dai et al. 2019, §3.2; docs/results/recall.md, "Reading the plot"; the sorting arms' numbers:
    docs/results/sorting.md, "The task"). L = 1 is one block's window.
    """
    first = position
    for _ in range(layers):
        first = max(0, first // segment * segment - mem_len)
    return first


def stack_of(model) -> Tuple[int, int, int]:
    """``(S, M, L)`` of a memory model (a :class:`~fairseq_plugins.modules.memory_bank.StreamingMemoryModel`
    whose decoder holds its blocks in ``layers``): its segment, its short-term memory (both as a
    checkpoint fixes them, ``segment_lengths``) and its blocks, the arguments of :func:`first_reached`."""
    segment, mem_len = model.segment_lengths()
    return segment, mem_len, len(model.decoder.layers)


def visible_sequence_tokens(length: int, k_symbols: int, window: Optional[int] = None,
                            segment: Optional[int] = None, mem_len: int = 0, layers: int = 1) -> List[int]:
    """How many of the T sequence tokens a model reaches, without any long-term memory, when it
    predicts each answer symbol: a list of K counts (the last ones of the sequence).

    Answer k is predicted at position p = T + 1 + k of ``[</s>, x_1..x_T, sep, a_1..]``. A window
    model (``window`` W) sees positions p − W + 1..p, whatever its depth; a memory model (``segment``
    S, short-term memory ``mem_len`` M) sees with one block its segment ⌊p/S⌋·S..p and the M
    positions before it, with ``layers`` L blocks positions :func:`first_reached` (p, S, M, L)..p
    (L = 1: the window of ``window_count_baseline``; the model's depth: its receptive field).

    Raises:
        ValueError: neither or both of ``window`` and ``segment``, or ``layers`` < 1.
    """
    if (window is None) == (segment is None):
        raise ValueError("give window (a window model) or segment (a memory model)")
    if layers < 1:
        raise ValueError(f"layers must be >= 1, not {layers}")
    counts = []
    for k in range(k_symbols):
        p = length + 1 + k
        first = p - window + 1 if window is not None else first_reached(p, segment, mem_len, layers)
        counts.append(max(0, length - max(1, first) + 1))
    return counts


def window_count_predictions(sequences, answers, window: Union[int, Sequence[int]]):
    """Teacher-forced 'sort the counts of the last sequence tokens' predictions, among symbols not
    yet in the answer prefix, ties by lower index. ``window``: the sequence tokens counted, one
    number for every answer position or one per position (:func:`visible_sequence_tokens`).
    Shape (n, K)."""
    k_symbols = answers.size(1)
    windows = [window] * k_symbols if isinstance(window, int) else list(window)
    vocab = int(max(sequences.max(), answers.max())) + 1
    # only symbols (those that occur in answers) are candidates
    candidate = torch.zeros(sequences.size(0), vocab, dtype=torch.bool)
    candidate.scatter_(1, answers, True)
    preds = []
    for k in range(k_symbols):
        seq = sequences[:, sequences.size(1) - windows[k]:] if windows[k] > 0 else sequences[:, :0]
        counts = torch.zeros(seq.size(0), vocab, dtype=torch.float64)
        counts.scatter_add_(1, seq, torch.ones_like(seq, dtype=torch.float64))
        if k:
            candidate.scatter_(1, answers[:, k - 1:k], False)
        # score = count, minus a tiny index term so ties go to the lower index
        score = counts - 1e-6 * torch.arange(vocab, dtype=torch.float64)
        preds.append(score.masked_fill(~candidate, -math.inf).argmax(-1))
    return torch.stack(preds, dim=1)


# ----------------------------------------------------------------------------- score


def check_checkpoint_for(checkpoint: str, data: str, split: str) -> None:
    """Refuse, before loading, a missing checkpoint or one that is no fairseq checkpoint, data
    without split ``split`` or whose dictionary is not the sorting task's, or a checkpoint trained
    on another alphabet than ``data``'s.

    Raises:
        ConfigError: naming the problem and the fix.
    """
    from fairseq.data import Dictionary

    if not os.path.isfile(checkpoint):
        raise ConfigError(f"checkpoint {checkpoint} not found; train first (fairseq_plugins/lab/sorting/sorting.sh)")
    state = read_state(checkpoint)  # a fairseq checkpoint, before the data is read
    if not os.path.isfile(os.path.join(data, "dict.txt")) or not os.path.isfile(os.path.join(data, f"{split}.idx")):
        hint = f"pass {os.path.join(data, 'bin')}" if os.path.isdir(os.path.join(data, "bin")) else \
            "pass the bin/ folder of fairseq_plugins/lab/sorting/make-sorting.sh"
        raise ConfigError(f"{data} holds no fairseq binaries of split '{split}' (dict.txt, {split}.bin/.idx); {hint}")
    data_dictionary = Dictionary.load(os.path.join(data, "dict.txt"))
    if data_dictionary.index(SEPARATOR) == data_dictionary.unk():
        raise ConfigError(f"{data}/dict.txt has no '{SEPARATOR}': not sorting-task data (fairseq_plugins/lab/sorting/make-sorting.sh)")
    check_dictionary(state, data_dictionary, checkpoint, data, DATA_WHAT, RECIPE)


def score(checkpoint: str, data: str, split: str = "test", max_examples: Optional[int] = None,
          batch_size: int = 16, cpu: bool = True, memory_wiped: bool = False, checked: bool = False) -> Dict:
    """The answer accuracy of one checkpoint on one split, with its references (see the module
    docstring): ``{"arm", "checkpoint", "data", "split", "memory_wiped", "length", "symbols" (K),
    "examples", "answer_tokens", "correct", "accuracy", "accuracy_per_position" (K floats), "chance",
    "chance_no_repeat", "window_count_baseline", "window_count_baseline_window" (K counts of
    sequence tokens, :func:`visible_sequence_tokens` of one block), "receptive_field_baseline",
    "receptive_field_baseline_window" (the same for the model's whole stack), "context",
    "parameters", "num_updates"}``.

    Raises:
        ConfigError: a missing checkpoint or dictionary, data that is not the sorting task's, a
            checkpoint trained on another alphabet, ``memory_wiped`` for a model without long-term memory.
            ``checked``: the caller has run :func:`check_checkpoint_for` on these arguments (not repeated).
    """
    if not checked:
        check_checkpoint_for(checkpoint, data, split)
    model, cfg, task = load_checkpoint(checkpoint, data, cpu)
    if memory_wiped:
        from fairseq_plugins.modules.memory.contract import set_memory_wiped

        set_memory_wiped(model)
    device = next(model.parameters()).device
    dictionary = task.source_dictionary
    sequences, answers = load_examples(data, split, dictionary, max_examples)
    inputs = example_inputs(sequences, answers, dictionary.eos(), dictionary.index(SEPARATOR)).to(device)
    arm = arm_of(cfg)
    window = window_of(model, cfg)
    k_symbols = answers.size(1)
    if window is None:
        predictions = predict_with_memory(model, inputs, k_symbols, batch_size)
    else:
        predictions = predict_with_window(model, inputs, k_symbols, window, batch_size * 4)
    context = context_text(window, cfg)
    if window is None:
        segment, mem_len, layers = stack_of(model)
        ref_window, reach = (visible_sequence_tokens(sequences.size(1), k_symbols, segment=segment,
                                                     mem_len=mem_len, layers=depth) for depth in (1, layers))
    else:
        ref_window = reach = visible_sequence_tokens(sequences.size(1), k_symbols, window=window)
    baseline = accuracy(window_count_predictions(sequences, answers, ref_window), answers)
    reach_baseline = accuracy(window_count_predictions(sequences, answers, reach), answers)
    acc = accuracy(predictions, answers)
    per_position = (predictions == answers).double().mean(0).tolist()
    return {
        "arm": arm, "checkpoint": os.path.abspath(checkpoint), "data": os.path.abspath(data), "split": split,
        "memory_wiped": memory_wiped, "length": int(sequences.size(1)), "symbols": k_symbols,
        "examples": int(sequences.size(0)),
        "answer_tokens": int(answers.numel()), "correct": int((predictions == answers).sum()),
        "accuracy": acc, "accuracy_per_position": per_position,
        "chance": 1.0 / k_symbols,
        "chance_no_repeat": sum(1.0 / (k_symbols - k) for k in range(k_symbols)) / k_symbols,
        "window_count_baseline": baseline, "window_count_baseline_window": ref_window,
        "receptive_field_baseline": reach_baseline, "receptive_field_baseline_window": reach,
        "context": context, "parameters": sum(p.numel() for p in model.parameters()),
        "num_updates": num_updates(checkpoint),
    }
