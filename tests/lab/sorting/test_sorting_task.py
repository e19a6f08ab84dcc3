"""The sorting task (∞-former paper §4.1): the generator and the accuracy metric.

References are independent of the code under test: counting with ``collections.Counter``, the
mixture's expected frequencies, and stub models whose predictions are known.
"""
import subprocess
from collections import Counter
from pathlib import Path

import numpy as np
import torch

import helpers
from fairseq_plugins.lab.sorting import data as sorting_task
from fairseq_plugins.lab.sorting import score as sorting_accuracy

REPO = Path(__file__).resolve().parents[3]


def _env():
    return helpers.env()


def _reference_sort(sequence):
    counts = Counter(int(s) for s in sequence)
    return sorted(range(20), key=lambda s: (-counts.get(s, 0), s))


# ----------------------------------------------------------------------------- generator


def test_target_is_an_independent_count_and_sort():
    for i, length in enumerate([2, 5, 50, 1000, 4096]):
        seq, target, _, _ = sorting_task.make_example(length, sorting_task.example_rng(7, "train", i))
        assert seq.shape == (length,) and seq.min() >= 0 and seq.max() < 20
        assert target.tolist() == _reference_sort(seq)
        assert sorted(target.tolist()) == list(range(20))
    # ties (and absent symbols, count 0) go to the lower index
    assert sorting_task.sort_by_frequency([5, 3, 3, 5, 7]).tolist() == _reference_sort([5, 3, 3, 5, 7])
    assert sorting_task.sort_by_frequency([5, 3, 3, 5, 7]).tolist()[:3] == [3, 5, 7]


def test_drift_from_p0_to_p1():
    length = 20000
    seq, _, p0, p1 = sorting_task.make_example(length, sorting_task.example_rng(3, "test", 0))
    tenth = length // 10
    alpha = np.arange(length) / (length - 1)
    for part, sl in (("first", slice(0, tenth)), ("last", slice(length - tenth, length))):
        a = alpha[sl].mean()
        expected = (1 - a) * p0 + a * p1
        other = (1 - (1 - a)) * p0 + (1 - a) * p1  # the other end's mixture
        freq = np.bincount(seq[sl], minlength=20) / tenth
        # 2000 draws: per-symbol standard error <= 0.012
        assert np.abs(freq - expected).max() < 0.05, part
        assert np.abs(freq - expected).sum() < 0.5 * np.abs(freq - other).sum(), part
    assert np.abs(p0 - p1).sum() > 0.3  # the two distributions really differ


def test_determinism_and_independence_of_counts(tmp_path):
    a = sorting_task.make_example(300, sorting_task.example_rng(1, "train", 4))
    b = sorting_task.make_example(300, sorting_task.example_rng(1, "train", 4))
    c = sorting_task.make_example(300, sorting_task.example_rng(2, "train", 4))
    d = sorting_task.make_example(300, sorting_task.example_rng(1, "test", 4))
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not np.array_equal(a[0], c[0]) and not np.array_equal(a[0], d[0])
    common = ["--length", "30", "--valid-examples", "1", "--test-examples", "1", "--seed", "5", "--out", "x"]
    assert sorting_task.main(["generate", *common, "--train-examples", "3", "--raw", str(tmp_path / "a")]) == 0
    assert sorting_task.main(["generate", *common, "--train-examples", "5", "--raw", str(tmp_path / "b")]) == 0
    small = (tmp_path / "a" / "train.txt").read_text().split("\n")
    large = (tmp_path / "b" / "train.txt").read_text().split("\n")
    assert large[:6] == small[:6] and len([l for l in large if l]) == 5
    for line in filter(None, large):
        seq, target = sorting_task.parse_line(line)
        assert len(seq) == 30 and target.tolist() == _reference_sort(seq)


def test_a_smaller_alphabet_keeps_the_task(tmp_path):
    """--symbols K: sequences over K symbols, the answer all K sorted by count (ties: lower index),
    the dictionary the K symbols and the separator; K outside 2..100 is one line."""
    for i, k in enumerate((2, 8, 20)):
        seq, target, p0, _ = sorting_task.make_example(300, sorting_task.example_rng(4, "train", i), k)
        counts = Counter(int(s) for s in seq)
        assert p0.shape == (k,) and seq.max() < k
        assert target.tolist() == sorted(range(k), key=lambda s: (-counts.get(s, 0), s))
    common = ["--length", "30", "--train-examples", "2", "--valid-examples", "1", "--test-examples", "1",
              "--seed", "5", "--out", "x", "--symbols", "8"]
    assert sorting_task.main(["generate", *common, "--raw", str(tmp_path / "raw")]) == 0
    for line in filter(None, (tmp_path / "raw" / "train.txt").read_text().split("\n")):
        seq, target = sorting_task.parse_line(line)
        counts = Counter(seq.tolist())
        assert len(seq) == 30 and target.tolist() == sorted(range(8), key=lambda s: (-counts.get(s, 0), s))
    assert sorting_task.main(["write-dict", "--path", str(tmp_path / "dict.txt"), "--symbols", "8"]) == 0
    assert (tmp_path / "dict.txt").read_text().split() == [w for i in range(8) for w in (f"s{i:02d}", "1")] + \
        ["sep", "1"]
    for bad in ("1", "101"):
        proc = subprocess.run(["bash", str(REPO / "fairseq_plugins" / "lab" / "sorting" / "make-sorting.sh"), "--symbols", bad, "--out",
                               str(tmp_path / bad)], env=_env(), capture_output=True, text=True)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "--symbols" in proc.stderr
        assert not (tmp_path / bad).exists()


# ----------------------------------------------------------------------------- metric with stubs


class _Stub(torch.nn.Module):
    """Logits over a 25-entry dictionary: ``constant`` puts the max on one index everywhere;
    ``oracle`` counts the tokens before the separator in its own input and, after it, predicts
    the most frequent symbol not yet answered (ties: lower index)."""

    def __init__(self, mode, sep, constant=4):
        super().__init__()
        self.mode, self.sep, self.constant = mode, sep, constant

    def forward(self, tokens):
        bsz, length = tokens.shape
        logits = torch.zeros(bsz, length, 25)
        if self.mode == "constant":
            logits[:, :, self.constant] = 1.0
            return logits, {}
        for b in range(bsz):
            row = tokens[b].tolist()
            k = row.index(self.sep) if self.sep in row else None
            if k is None:
                continue  # no separator in view: the window holds no answer position we check
            counts = Counter(row[:k])
            for t in range(k, length):
                done = set(row[k + 1:t + 1])
                best = min((s for s in range(4, 24) if s not in done), key=lambda s: (-counts.get(s, 0), s))
                logits[b, t, best] = 1.0
        return logits, {}


def _examples(n, length, seed=0):
    seqs, answers = [], []
    for i in range(n):
        seq, target, _, _ = sorting_task.make_example(length, sorting_task.example_rng(seed, "test", i))
        seqs.append(torch.tensor(seq) + 4)  # fairseq dictionary: 4 specials, then s00..s19, then sep
        answers.append(torch.tensor(target) + 4)
    return torch.stack(seqs), torch.stack(answers)


def test_accuracy_on_known_answers():
    eos, sep = 2, 24
    seqs, answers = _examples(5, 120)
    inputs = sorting_accuracy.example_inputs(seqs, answers, eos, sep)
    assert inputs.shape == (5, 120 + 21) and (inputs[:, 0] == eos).all() and (inputs[:, 121] == sep).all()
    # each symbol is in every answer exactly once: a constant guess is right 1/20 of the time
    constant = _Stub("constant", sep, constant=9)
    assert sorting_accuracy.accuracy(sorting_accuracy.predict_with_memory(constant, inputs, 20, 2), answers) == 1 / 20
    assert sorting_accuracy.accuracy(sorting_accuracy.predict_with_window(constant, inputs, 20, 32, 2), answers) == 1 / 20
    # the counting oracle that sees the whole example is always right (off-by-one positions would not be)
    oracle = _Stub("oracle", sep)
    assert sorting_accuracy.accuracy(sorting_accuracy.predict_with_memory(oracle, inputs, 20, 3), answers) == 1.0
    assert sorting_accuracy.accuracy(sorting_accuracy.predict_with_window(oracle, inputs, 20, 500, 3), answers) == 1.0
    # with a window of W tokens, answer k sees the last W - 1 - k sequence tokens: naive count
    window = 40
    preds = sorting_accuracy.predict_with_window(oracle, inputs, 20, window, 2)
    hits = 0
    for b in range(5):
        for k in range(20):
            seen = seqs[b, -(window - 1 - k):].tolist()
            counts = Counter(seen)
            given = set(answers[b, :k].tolist())
            best = min((s for s in range(4, 24) if s not in given), key=lambda s: (-counts.get(s, 0), s))
            assert int(preds[b, k]) == best
            hits += best == int(answers[b, k])
    assert sorting_accuracy.accuracy(preds, answers) == hits / 100
    # the baseline over each position's own window is what that counting oracle answers
    visible = sorting_accuracy.visible_sequence_tokens(120, 20, window=window)
    assert visible == [window - 1 - k for k in range(20)]
    assert torch.equal(sorting_accuracy.window_count_predictions(seqs, answers, visible), preds)
    # the window-count baseline: last W sequence tokens, naive
    base = sorting_accuracy.window_count_predictions(seqs, answers, window)
    for b in range(5):
        counts = Counter(seqs[b, -window:].tolist())
        for k in range(20):
            given = set(answers[b, :k].tolist())
            assert int(base[b, k]) == min((s for s in range(4, 24) if s not in given),
                                          key=lambda s: (-counts.get(s, 0), s))
