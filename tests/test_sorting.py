"""The sorting task (∞-former paper §4.1): generator, binaries, accuracy metric, recipe.

References are independent of the code under test: counting with ``collections.Counter``,
the mixture's expected frequencies, the ``streaming_lm`` task's own dataset read segment by
segment (the training path), one-window-at-a-time forward passes, and stub models whose
predictions are known.
"""
import json
import math
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

import helpers
from fairseq_plugins.data_prep import sorting as sorting_task
from fairseq_plugins.experiments import sorting as sorting_accuracy

REPO = Path(__file__).resolve().parents[1]
BIN_DIR = Path(sys.executable).parent


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
    assert sorting_accuracy.accuracy(sorting_accuracy.predict_with_memory(constant, inputs, 2), answers) == 1 / 20
    assert sorting_accuracy.accuracy(sorting_accuracy.predict_with_window(constant, inputs, 32, 2), answers) == 1 / 20
    # the counting oracle that sees the whole example is always right (off-by-one positions would not be)
    oracle = _Stub("oracle", sep)
    assert sorting_accuracy.accuracy(sorting_accuracy.predict_with_memory(oracle, inputs, 3), answers) == 1.0
    assert sorting_accuracy.accuracy(sorting_accuracy.predict_with_window(oracle, inputs, 500, 3), answers) == 1.0
    # with a window of W tokens, answer k sees the last W - 1 - k sequence tokens: naive count
    window = 40
    preds = sorting_accuracy.predict_with_window(oracle, inputs, window, 2)
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
    # the window-count baseline: last W sequence tokens, naive
    base = sorting_accuracy.window_count_predictions(seqs, answers, window)
    for b in range(5):
        counts = Counter(seqs[b, -window:].tolist())
        for k in range(20):
            given = set(answers[b, :k].tolist())
            assert int(base[b, k]) == min((s for s in range(4, 24) if s not in given),
                                          key=lambda s: (-counts.get(s, 0), s))


# ----------------------------------------------------------------------------- end to end


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    if shutil.which("fairseq-longmem", path=f"{BIN_DIR}{os.pathsep}{os.environ.get('PATH', '')}") is None:
        pytest.fail("fairseq-longmem is not installed")
    root = tmp_path_factory.mktemp("sorting")
    proc = subprocess.run(["bash", str(REPO / "scripts" / "sorting.sh"), "--quick", "--out", str(root / "runs"),
                           "--data-root", str(root / "data")], cwd=REPO, env=_env(), capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    data = root / "data" / "T64_8-4-4_seed1"
    return root, data, proc.stdout


@pytest.mark.full
def test_quick_recipe_outputs(quick_run):
    root, _, stdout = quick_run
    table = json.loads((root / "runs" / "results.json").read_text())
    assert set(table["accuracy"]["64"]) == {"infinite_former", "memory_off", "transformer_lm",
                                            "window_count_baseline", "chance", "chance_no_repeat"}
    for arm in ("infinite_former", "memory_off", "transformer_lm"):
        r = json.loads((root / "runs" / "T64" / arm / "accuracy.json").read_text())
        assert r["arm"] == arm and r["length"] == 64 and r["examples"] == 4 and r["answer_tokens"] == 80
        assert 0.0 <= r["accuracy"] <= 1.0 and r["accuracy"] == r["correct"] / 80
        assert r["chance"] == 0.05 and math.isclose(r["chance_no_repeat"], sum(1 / k for k in range(1, 21)) / 20)
        assert 0.0 <= r["window_count_baseline"] <= 1.0 and r["num_updates"] == 3
        assert table["accuracy"]["64"][arm] == r["accuracy"]
    assert "| 64 |" in (root / "runs" / "results.md").read_text() and "| 64 |" in stdout


@pytest.mark.full
def test_binaries_match_the_generator(quick_run):
    from fairseq.data import Dictionary, data_utils

    from fairseq_plugins.tasks.streaming_language_modeling import document_starts

    _, data, _ = quick_run
    d = Dictionary.load(str(data / "bin" / "dict.txt"))
    assert len(d) == 25 and d.index("s00") == 4 and d.index("sep") == 24
    lines = data_utils.load_indexed_dataset(str(data / "bin" / "test"), d)
    raw = (data / "raw" / "test.txt").read_text().split("\n")[:-1]
    assert len(lines) == len(raw) == 8
    for i in range(len(lines)):
        assert d.string(lines[i]) == raw[i]
    assert len(document_starts(lines, d.eos())) == 4  # one document per example
    for i in range(4):
        seq, target, _, _ = sorting_task.make_example(64, sorting_task.example_rng(1, "test", i))
        assert raw[2 * i] == sorting_task.example_line(seq, target) and raw[2 * i + 1] == ""


@pytest.mark.full
def test_make_sorting_is_idempotent_and_refuses_other_options(quick_run, tmp_path):
    _, data, _ = quick_run
    script = ["bash", str(REPO / "data-prep" / "make-sorting.sh")]
    opts = ["--length", "64", "--train-examples", "8", "--valid-examples", "4", "--test-examples", "4", "--seed", "1"]
    mtimes = {p: p.stat().st_mtime_ns for p in data.rglob("*") if p.is_file()}
    again = subprocess.run(script + opts + ["--out", str(data)], env=_env(), capture_output=True, text=True)
    assert again.returncode == 0 and "up to date" in again.stdout
    other = subprocess.run(script + opts + ["--seed", "2", "--out", str(data)], env=_env(), capture_output=True,
                           text=True)
    assert other.returncode == 2 and other.stderr.strip().count("\n") == 0
    assert other.stderr.startswith("make-sorting.sh: error:") and "--force" in other.stderr
    assert {p: p.stat().st_mtime_ns for p in data.rglob("*") if p.is_file()} == mtimes
    bad = subprocess.run(script + ["--length", "1", "--out", str(tmp_path / "x")], env=_env(), capture_output=True,
                         text=True)
    assert bad.returncode == 2 and "--length" in bad.stderr and not (tmp_path / "x").exists()
    helped = subprocess.run(script + ["--help"], env=_env(), capture_output=True, text=True)
    assert helped.returncode == 0 and "Usage" in helped.stdout
    # --force rebuilds a copy with other options
    copy = tmp_path / "copy"
    shutil.copytree(data, copy)
    forced = subprocess.run(script + ["--length", "10", "--train-examples", "2", "--valid-examples", "1",
                                      "--test-examples", "1", "--seed", "1", "--out", str(copy), "--force"],
                            env=_env(), capture_output=True, text=True)
    assert forced.returncode == 0, forced.stderr
    first = (copy / "raw" / "test.txt").read_text().split("\n")[0].split()
    assert len(first) == 10 + 21 and json.loads((copy / "sorting.json").read_text())["options"]["length"] == 10


def _load_checkpoint(path, data):
    from fairseq import checkpoint_utils

    models, cfg, task = checkpoint_utils.load_model_ensemble_and_task([str(path)], arg_overrides={"data": str(data)})
    return models[0].eval(), cfg, task


@pytest.mark.full
def test_memory_arms_match_the_streaming_task(quick_run):
    """Whole examples in one call (the metric) vs the training path: the streaming_lm task's
    own test dataset, segment after segment, memory carried and reset at each document."""
    root, data, _ = quick_run
    for arm in ("infinite_former", "memory_off"):
        model, cfg, task = _load_checkpoint(root / "runs" / "T64" / arm / "checkpoint_last.pt", data / "bin")
        assert cfg.task.reset_memory_at_document_boundary and cfg.model.no_long_term_memory == (arm == "memory_off")
        task.load_dataset("test")
        dataset = task.dataset("test")
        sep = task.source_dictionary.index("sep")
        src, logits = [], []
        with torch.no_grad():
            for i in range(len(dataset)):
                batch = dataset.collater([dataset[i]])
                out, _ = model(**batch["net_input"])
                src.append(batch["net_input"]["src_tokens"])
                logits.append(out)
        src, logits = torch.cat(src, 1), torch.cat(logits, 1)  # (streams, stream_len[, V])
        stream_logits, stream_targets = [], []
        for b, j in (src == sep).nonzero().tolist():  # the separator predicts the first answer
            stream_logits.append(logits[b, j:j + 20])
            stream_targets.append(dataset.tgt[b, j:j + 20])
        assert len(stream_logits) == 4
        seqs, answers = sorting_accuracy.load_examples(str(data / "bin"), "test", task.source_dictionary)
        inputs = sorting_accuracy.example_inputs(seqs, answers, task.source_dictionary.eos(), sep)
        with torch.no_grad():
            direct = model(inputs)[0][:, -20:]
        # the streams hold the examples in order (4 streams, 4 documents)
        assert torch.equal(torch.stack(stream_targets), answers)
        torch.testing.assert_close(direct, torch.stack(stream_logits), atol=1e-4, rtol=1e-4)
        naive = float((torch.stack(stream_logits).argmax(-1) == answers).double().mean())
        recorded = json.loads((root / "runs" / "T64" / arm / "accuracy.json").read_text())["accuracy"]
        assert recorded == naive


@pytest.mark.full
def test_transformer_lm_windows_one_by_one(quick_run):
    root, data, _ = quick_run
    model, cfg, task = _load_checkpoint(root / "runs" / "T64" / "transformer_lm" / "checkpoint_last.pt", data / "bin")
    window = cfg.task.tokens_per_sample
    assert window == 32
    d = task.source_dictionary
    seqs, answers = sorting_accuracy.load_examples(str(data / "bin"), "test", d)
    inputs = sorting_accuracy.example_inputs(seqs, answers, d.eos(), d.index("sep"))
    hits = 0
    with torch.no_grad():
        batched = sorting_accuracy.predict_with_window(model, inputs, window, 3)
        for b in range(inputs.size(0)):
            for k in range(20):
                end = 64 + 2 + k  # inputs[b, end - 1] is the token before answer k
                ctx = inputs[b:b + 1, end - window:end]
                assert ctx.size(1) == window and int(ctx[0, -1]) == (d.index("sep") if k == 0 else int(answers[b, k - 1]))
                pred = int(model(ctx)[0][0, -1].argmax())
                assert pred == int(batched[b, k])
                hits += pred == int(answers[b, k])
    recorded = json.loads((root / "runs" / "T64" / "transformer_lm" / "accuracy.json").read_text())["accuracy"]
    assert recorded == hits / 80


@pytest.mark.full
def test_options_after_double_dash_reach_every_arm(tmp_path):
    """sorting.sh -- OPTIONS passes them to each arm's fairseq-train, after the arm's own (so they
    override the budget): --max-update 2 against --quick's 3."""
    proc = subprocess.run(["bash", str(REPO / "scripts" / "sorting.sh"), "--quick", "--arms", "infinite_former",
                           "--out", str(tmp_path / "runs"), "--data-root", str(tmp_path / "data"),
                           "--", "--max-update", "2"], cwd=REPO, env=_env(), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    r = json.loads((tmp_path / "runs" / "T64" / "infinite_former" / "accuracy.json").read_text())
    assert r["num_updates"] == 2


@pytest.mark.full
def test_gpu_checks_sorting_stage_runs_the_papers_length_on_a_cpu(tmp_path):
    """scripts/gpu-checks.sh --sorting (the paper's T = 4096, every arm, table and plots) at a tiny
    SORT_SIZE: without CUDA it runs on the CPU in fp32, with the same sorting.sh command."""
    size = ("LAYERS=1 WIDTH=32 HEADS=2 FFN=64 SEGMENT=256 NUM_BASIS=16 STREAMS=4 MAX_UPDATE=2 WARMUP=1 "
            "LR=0.002 TRAIN_EXAMPLES=6 VALID_EXAMPLES=2 TEST_EXAMPLES=2")
    env = {**_env(), "SORT_SIZE": size, "SORT_WORK": str(tmp_path / "work")}
    proc = subprocess.run(["bash", str(REPO / "scripts" / "gpu-checks.sh"), "--sorting"], cwd=REPO, env=env,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    work = tmp_path / "work"
    table = json.loads((work / "results.json").read_text())
    assert {"infinite_former", "memory_off", "transformer_lm"} <= set(table["accuracy"]["4096"])
    for arm in ("infinite_former", "memory_off", "transformer_lm"):
        r = json.loads((work / "T4096" / arm / "accuracy.json").read_text())
        assert (r["length"], r["examples"], r["answer_tokens"], r["num_updates"]) == (4096, 2, 40, 2)
    assert (work / "accuracy.png").stat().st_size > 0 and (work / "curves.png").stat().st_size > 0
    assert (work / "data" / "T4096_6-2-2_seed1" / "bin" / "train.bin").is_file()
    for extra in (["--sorting", "--dry-run"], ["--updates", "3", "--sorting"]):
        wrong = subprocess.run(["bash", str(REPO / "scripts" / "gpu-checks.sh"), *extra], cwd=REPO,
                               env=env, capture_output=True, text=True)
        assert wrong.returncode == 2 and wrong.stderr.count("\n") == 1, (extra, wrong.stderr)
        assert "--sorting takes no other option" in wrong.stderr
    for bad in ("LAYER=1", "STREAMS 4", "MAX_UPDATE="):  # a misspelt name, a missing '=', no value
        typo = subprocess.run(["bash", str(REPO / "scripts" / "gpu-checks.sh"), "--sorting"], cwd=REPO,
                              env={**env, "SORT_SIZE": bad}, capture_output=True, text=True)
        assert typo.returncode == 2 and typo.stderr.count("\n") == 1, (bad, typo.stderr)
        assert "SORT_SIZE: '" in typo.stderr and "is not NAME=VALUE with NAME one of LAYERS" in typo.stderr
