"""The sorting task (∞-former paper §4.1) end to end: binaries, recipe, scoring, signal.

References are independent of the code under test: the generator's own examples, the
``streaming_lm`` task's own dataset read segment by segment (the training path), and
one-window-at-a-time forward passes. The generator and the metric: tests/lab/sorting/test_sorting_task.py.
"""
import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import helpers
from fairseq_plugins.lab.sorting import data as sorting_task
from fairseq_plugins.errors import ConfigError
from fairseq_plugins.lab.sorting import score as sorting_accuracy

REPO = Path(__file__).resolve().parents[3]
BIN_DIR = Path(sys.executable).parent


def _env():
    return helpers.env()


# ----------------------------------------------------------------------------- end to end


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    if shutil.which("fairseq-longmem", path=f"{BIN_DIR}{os.pathsep}{os.environ.get('PATH', '')}") is None:
        pytest.fail("fairseq-longmem is not installed")
    root = tmp_path_factory.mktemp("sorting")
    proc = subprocess.run(["bash", str(REPO / "fairseq_plugins" / "lab" / "sorting" / "sorting.sh"), "--quick", "--out", str(root / "runs"),
                           "--data-root", str(root / "data")], cwd=REPO, env=_env(), capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    data = root / "data" / "T64_8-4-4_seed1"
    return root, data, proc.stdout


@pytest.mark.full
def test_quick_recipe_outputs(quick_run):
    root, _, stdout = quick_run
    table = json.loads((root / "runs" / "results.json").read_text())
    assert set(table["accuracy"]["64"]) == {"infinite_former", "infinite_former, memory wiped", "memory_off",
                                            "transformer_lm", "window_count_baseline", "receptive_field_baseline",
                                            "chance", "chance_no_repeat"}
    wiped = json.loads((root / "runs" / "T64" / "infinite_former" / "accuracy-wiped.json").read_text())
    assert wiped["memory_wiped"] and wiped["symbols"] == 20 and wiped["accuracy"] == wiped["correct"] / 80
    assert not (root / "runs" / "T64" / "memory_off" / "accuracy-wiped.json").exists()
    for arm in ("infinite_former", "memory_off", "transformer_lm"):
        r = json.loads((root / "runs" / "T64" / arm / "accuracy.json").read_text())
        assert r["arm"] == arm and r["length"] == 64 and r["examples"] == 4 and r["answer_tokens"] == 80
        assert 0.0 <= r["accuracy"] <= 1.0 and r["accuracy"] == r["correct"] / 80
        assert r["chance"] == 0.05 and math.isclose(r["chance_no_repeat"], sum(1 / k for k in range(1, 21)) / 20)
        assert 0.0 <= r["window_count_baseline"] <= 1.0 and r["num_updates"] == 6
        if arm == "transformer_lm":  # its stack reads its window and nothing before it
            assert (r["receptive_field_baseline"], r["receptive_field_baseline_window"]) == \
                (r["window_count_baseline"], r["window_count_baseline_window"])
        # every arm trained on answer tokens (the streams reach the first example's answer)
        wpb = re.findall(r"\| wpb ([0-9.]+) \|", (root / "runs" / "T64" / arm / "train.log").read_text())
        assert wpb and float(wpb[-1]) > 0, arm
        assert table["accuracy"]["64"][arm] == r["accuracy"]
    assert "| 64 |" in (root / "runs" / "results.md").read_text() and "| 64 |" in stdout


@pytest.mark.full
def test_scoring_refuses_another_alphabet_and_a_model_without_memory(quick_run, tmp_path):
    root, own, _ = quick_run
    other = tmp_path / "K8"
    made = subprocess.run(["bash", str(REPO / "fairseq_plugins" / "lab" / "sorting" / "make-sorting.sh"), "--length", "64", "--symbols", "8",
                           "--train-examples", "2", "--valid-examples", "1", "--test-examples", "2",
                           "--out", str(other)], env=_env(), capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    ckpt = root / "runs" / "T64"
    # several checkpoints: nothing is written when one is refused, and the line names it
    outs = [tmp_path / "a.json", tmp_path / "b.json"]
    proc = subprocess.run([str(BIN_DIR / "fairseq-longmem"), "sorting", "score", "--memory-wiped", "--checkpoint",
                           str(ckpt / "infinite_former" / "checkpoint_last.pt"),
                           str(ckpt / "memory_off" / "checkpoint_last.pt"), "--data", str(own / "bin"),
                           "--json", *map(str, outs)], env=_env(), capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "memory_off/checkpoint_last.pt" in proc.stderr and not any(p.exists() for p in outs)
    # a checkpoint refused before loading stops the run before any checkpoint is scored
    proc = subprocess.run([str(BIN_DIR / "fairseq-longmem"), "sorting", "score", "--checkpoint",
                           str(ckpt / "infinite_former" / "checkpoint_last.pt"), str(tmp_path / "none.pt"),
                           "--data", str(own / "bin")], env=_env(), capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and f"checkpoint {tmp_path}/none.pt not found" \
        in proc.stderr and "accuracy" not in proc.stdout, proc.stdout + proc.stderr
    # a matched twin (memory_off's config) is printed under its folder's arm name
    twin = tmp_path / "memory_off_matched"
    twin.mkdir()
    shutil.copy(ckpt / "memory_off" / "checkpoint_last.pt", twin / "checkpoint_last.pt")
    proc = subprocess.run([str(BIN_DIR / "fairseq-longmem"), "sorting", "score", "--checkpoint",
                           str(twin / "checkpoint_last.pt"), "--data", str(own / "bin")], env=_env(),
                          capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.startswith("memory_off_matched T=64 K=20: accuracy "), proc.stdout
    for arm, extra, words in (("infinite_former", [], "another dictionary"),
                              ("memory_off", ["--memory-wiped"], "needs a model with a long-term memory")):
        data = other / "bin" if not extra else own / "bin"
        out = tmp_path / f"{arm}.json"
        proc = subprocess.run([str(BIN_DIR / "fairseq-longmem"), "sorting", "score", "--checkpoint",
                               str(ckpt / arm / "checkpoint_last.pt"), "--data", str(data), "--json", str(out),
                               *extra], env=_env(), capture_output=True, text=True)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
        assert words in proc.stderr and not out.exists()


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
    script = ["bash", str(REPO / "fairseq_plugins" / "lab" / "sorting" / "make-sorting.sh")]
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
        recorded = json.loads((root / "runs" / "T64" / arm / "accuracy.json").read_text())
        assert recorded["accuracy"] == naive
        # the window of the baseline: the sequence tokens of the answer's batch (the segment the
        # training path runs) and the mem_len positions of the batch before, counted in the streams
        segment, mem_len = cfg.model.segment_length, cfg.model.mem_len
        assert src.size(1) % segment == 0 and dataset[0]["src"].size(1) == segment
        seen = []
        for b, j in (src == sep).nonzero().tolist():
            counts = []
            for k in range(20):
                p = j + k
                start = p // segment * segment - mem_len
                tokens = src[b, max(0, start):p + 1].tolist()
                counts.append(sum(1 for t in tokens[:len(tokens) - k - 1] if 4 <= t < 24))
            seen.append(counts)
        assert all(c == seen[0] for c in seen)
        assert seen[0] == sorting_accuracy.visible_sequence_tokens(64, 20, segment=segment, mem_len=mem_len)
        assert recorded["window_count_baseline_window"] == seen[0]
        base = sorting_accuracy.window_count_predictions(seqs, answers, seen[0])
        assert recorded["window_count_baseline"] == float((base == answers).double().mean())
        # the receptive field: the checkpoint's blocks (first_reached vs the model's own reach:
        # tests/lab/sorting/test_sorting_receptive_field.py)
        reach = sorting_accuracy.visible_sequence_tokens(64, 20, segment=segment, mem_len=mem_len,
                                                         layers=cfg.model.decoder_layers)
        assert recorded["receptive_field_baseline_window"] == reach
        assert (reach == seen[0]) == (cfg.model.decoder_layers == 1)  # one block: its window
        base = sorting_accuracy.window_count_predictions(seqs, answers, reach)
        assert recorded["receptive_field_baseline"] == float((base == answers).double().mean())


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
        batched = sorting_accuracy.predict_with_window(model, inputs, 20, window, 3)
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
    proc = subprocess.run(["bash", str(REPO / "fairseq_plugins" / "lab" / "sorting" / "sorting.sh"), "--quick", "--arms", "infinite_former",
                           "--out", str(tmp_path / "runs"), "--data-root", str(tmp_path / "data"),
                           "--", "--max-update", "2"], cwd=REPO, env=_env(), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    r = json.loads((tmp_path / "runs" / "T64" / "infinite_former" / "accuracy.json").read_text())
    assert r["num_updates"] == 2
    # the same --out with another alphabet: refused in one line, the run there untouched
    before = {p: p.stat().st_mtime_ns for p in (tmp_path / "runs").rglob("*") if p.is_file()}
    other = subprocess.run(["bash", str(REPO / "fairseq_plugins" / "lab" / "sorting" / "sorting.sh"), "--quick", "--arms", "infinite_former",
                            "--out", str(tmp_path / "runs"), "--data-root", str(tmp_path / "data"),
                            "--", "--max-update", "2"], cwd=REPO,
                           env={**_env(), "SYMBOLS": "08"}, capture_output=True, text=True)
    assert other.returncode == 2 and other.stderr.count("\n") == 1, other.stderr
    assert "scored on other data" in other.stderr and "another --out" in other.stderr
    assert "T64_K8_8-4-4_seed1" in other.stderr  # 08 read as 8
    assert not (tmp_path / "data" / "T64_K8_8-4-4_seed1").exists()  # refused before generating
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "runs").rglob("*") if p.is_file()} == before
    # ... and with other options after -- or another budget (--quick's MAX_UPDATE is 6, SEED 1)
    arm = tmp_path / "runs" / "T64" / "infinite_former"
    for extra, env, differs in ((["--", "--max-update", "3"], {}, "options after -- '--max-update 2' -> '--max-update 3'"),
                                (["--", "--max-update", "2"], {"SEED": "4"}, "SEED 1 -> 4")):
        again = subprocess.run(["bash", str(REPO / "fairseq_plugins" / "lab" / "sorting" / "sorting.sh"), "--quick", "--arms", "infinite_former",
                                "--out", str(tmp_path / "runs"), "--data-root", str(tmp_path / "data"), *extra],
                               cwd=REPO, env={**_env(), **env}, capture_output=True, text=True)
        assert again.returncode == 2 and again.stderr.count("\n") == 1, again.stderr
        assert f"sorting.sh: error: {arm} was trained with another budget ({differs}); delete" in again.stderr
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "runs").rglob("*") if p.is_file()} == before


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


@pytest.mark.full
def test_signal_counts_the_answer_tokens_and_splits_the_gradient(quick_run, tmp_path):
    """sorting signal over every batch of the quick run's train split: the answer tokens scored;
    each update's group norms make up its whole gradient norm; the long-term
    memory's read receives gradient in the ∞-former, and memory_off has none."""
    from fairseq_plugins.lab.sorting import signal as sorting_signal

    root, data, _ = quick_run
    for arm in ("infinite_former", "memory_off"):
        ckpt = root / "runs" / "T64" / arm / "checkpoint_last.pt"
        batches = 96 * 8 // 4 // 16  # 8 documents of 96 tokens in 4 streams, segments of 16
        r = sorting_signal.profile(str(ckpt), str(data / "bin"), updates=batches)
        # the loss counts the answer targets in the separator's segment (the mask reads each batch
        # row alone): the separator predicts at position 65 of a document, segments of 16
        scored = 8 * sum(1 for k in range(20) if (65 + k) // 16 == 65 // 16)
        assert scored == 120 and r["answer_tokens_per_update"] * batches == pytest.approx(scored)
        assert sum(u["answer_tokens"] for u in r["per_update"]) == scored
        for u in r["per_update"]:
            assert math.sqrt(sum(v ** 2 for v in u["groups"].values())) == pytest.approx(u["grad_norm"], rel=1e-9)
        ltm = [g for g in r["groups"] if "long-term memory" in g]
        if arm == "infinite_former":
            assert ltm and r["long_term_memory"]["decoder.layers.0.long_term_memory.out_proj.weight"] > 0
        else:
            assert not ltm and not r["long_term_memory"]
    with pytest.raises(ConfigError, match="fewer than --updates"):
        sorting_signal.profile(str(ckpt), str(data / "bin"), updates=batches + 1)


def test_a_file_that_is_not_a_checkpoint_is_one_line(tmp_path):
    """Every lab command reads a checkpoint through one loader (fairseq_plugins/lab/common/checkpoints.py,
    the checks of compat/checkpoint_files.py): a file that is no torch file, one cut short, a torch
    file of another object, and a plain state dict (a Hugging Face pytorch_model.bin) are one line."""
    from fairseq_plugins.lab.common.answers import read_state

    # a text file is no torch file at all; a zip or a pickle cut short is a torch file truncated
    for name, content, says in (("text.pt", b"not a checkpoint\n", "it is not a torch file \\(neither torch's zip "
                                 "format nor a pickle\\); it was left as it is"),
                                ("cut.pt", b"PK\x03\x04cut short", "the file is truncated or corrupt \\("),
                                ("pickle.pt", b"\x80\x02cut", "the file is truncated or corrupt \\(")):
        (tmp_path / name).write_bytes(content)
        with pytest.raises(ConfigError, match=rf"^cannot read checkpoint {tmp_path}/{name}: {says}") as e:
            read_state(str(tmp_path / name))
        assert "\n" not in str(e.value)
    torch.save([1, 2], tmp_path / "list.pt")
    with pytest.raises(ConfigError, match=r"list.pt is a torch file but not a fairseq checkpoint: it holds a list"):
        read_state(str(tmp_path / "list.pt"))


def test_a_hugging_face_state_dict_is_one_line_before_the_data_is_read(tmp_path):
    """sorting score on a plain state dict: one line naming the file and the fix (it used to be
    fairseq's KeyError: 'best_loss' traceback), exit status 2, no --json written."""
    hf = tmp_path / "pytorch_model.bin"
    torch.save({"transformer.wte.weight": torch.zeros(8, 4)}, hf)
    for argv in (("score", "--checkpoint", hf, "--data", tmp_path / "bin", "--json", tmp_path / "a.json"),):
        proc = helpers.longmem_here("sorting", *argv, check=False)
        line = helpers.one_line_error(proc, f"{hf} is a torch file but not a fairseq checkpoint: it is a plain "
                                            "state dict",
                              "pass a checkpoint_*.pt written by fairseq-train with --checkpoint",
                              prefix=f"fairseq-longmem sorting {argv[0]}: error:", status=2, alone=True)
        assert "gpt2 convert" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pytorch_model.bin"]