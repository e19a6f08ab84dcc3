"""End to end through the command-line tools, as a user runs them:
data-prep/prepare-lm.sh (sentencepiece + fairseq-preprocess) → fairseq-train
(scripts/train.sh) → fairseq-eval-lm (scripts/evaluate.sh), on a small
real-text fixture (tests/fixtures/books_txt: excerpts of Gutenberg books)."""

import json
import math
import os
import re
import shutil
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from helpers import BIN, ROOT, USER_DIR, env, one_line_error, prepare_books, run
from test_precision_and_faults import _free_port

# a tiny budget of scripts/train.sh and evaluate.sh (their variables), in every command's environment
TINY = {"LAYERS": "2", "WIDTH": "32", "HEADS": "2", "FFN": "64", "SEGMENT": "32", "STREAMS": "4",
        "NUM_BASIS": "16", "WARMUP": "10", "LR": "0.003"}
PPL = re.compile(r"Loss \(base 2\): ([0-9.]+), Perplexity: ([0-9.]+)")


@pytest.fixture(scope="module")
def trained(tmp_path_factory, books_bin):
    tmp = tmp_path_factory.mktemp("e2e")
    data = books_bin
    save = tmp / "ckpt"
    log = run(["bash", "scripts/train.sh", "infinite_former", data, save], extra_env={**TINY, "MAX_UPDATE": "60"})
    return data, save, log.stdout + log.stderr


def _valid_losses(log):
    return [float(m) for m in re.findall(r"valid on 'valid' subset \| loss ([0-9.]+)", log)]


@pytest.mark.full
def test_training_learns_and_checkpoint_loads_with_weights_only(trained):
    data, save, log = trained
    losses = _valid_losses(log)
    vocab = sum(1 for _ in open(data / "dict.txt")) + 4
    assert losses and all(math.isfinite(x) for x in losses)
    assert losses[-1] < math.log2(vocab) - 1.0  # well below a uniform guess, in bits
    state = torch.load(save / "checkpoint_last.pt", weights_only=True)  # torch's safe default
    assert state["cfg"]["model"]["_name"] == "infinite_former_lm"
    assert state["cfg"]["task"]["_name"] == "streaming_lm"
    assert not any(k.startswith("decoder._memories") for k in state["model"])


def _eval(data, save):
    proc = run(["bash", "scripts/evaluate.sh", "infinite_former", str(data), str(save / "checkpoint_last.pt")],
               extra_env={**TINY, "STREAMS": "2"})
    match = PPL.search(proc.stdout + proc.stderr)
    assert match, proc.stderr[-2000:]
    return float(match.group(1)), float(match.group(2))


@pytest.mark.full
def test_eval_lm_is_deterministic_and_matches_a_direct_computation(trained):
    data, save, _ = trained
    first, second = _eval(data, save), _eval(data, save)
    assert first == second
    # independent path: load the checkpoint in-process and sum the token NLL over the
    # test streams, memory carried through, with plain cross-entropy
    from fairseq import checkpoint_utils, utils
    utils.import_user_module(type("A", (), {"user_dir": USER_DIR})())
    models, _, task = checkpoint_utils.load_model_ensemble_and_task(
        [str(save / "checkpoint_last.pt")],
        arg_overrides={"data": str(data), "batch_size": 2, "batch_size_valid": 2})
    model = models[0].eval()
    task.load_dataset("test")
    dataset = task.dataset("test")
    nll, count = 0.0, 0
    with torch.no_grad():
        for i in range(len(dataset)):
            sample = dataset.collater([dataset[i]])
            logits, _ = model(**sample["net_input"])
            target = sample["target"]
            nll += F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), target.reshape(-1),
                                   ignore_index=task.dictionary.pad(), reduction="sum").item()
            count += int(target.ne(task.dictionary.pad()).sum())
    direct_bits = nll / count / math.log(2)
    assert first[0] == pytest.approx(direct_bits, abs=2e-4)
    assert first[1] == pytest.approx(2 ** direct_bits, rel=1e-3)


@pytest.mark.full
def test_memory_efficient_fp16_training_stays_finite(tmp_path, trained):
    data, _, _ = trained
    proc = run(["bash", "scripts/train.sh", "infinite_former", str(data), str(tmp_path / "fp16"),
                "--memory-efficient-fp16", "--fp16-init-scale", "16"], extra_env={**TINY, "MAX_UPDATE": "12"})
    log = proc.stdout + proc.stderr
    train_losses = [float(m) for m in re.findall(r"\btrain \| epoch \d+ \| loss ([0-9.a-z]+)", log)]
    valid = _valid_losses(log)
    assert train_losses and all(math.isfinite(x) for x in train_losses), log[-2000:]
    assert valid and all(math.isfinite(x) for x in valid)
    state = torch.load(tmp_path / "fp16" / "checkpoint_last.pt", weights_only=True)
    assert all(torch.isfinite(v.float()).all() for v in state["model"].values() if v.is_floating_point())


@pytest.mark.full
def test_dictionary_mismatch_is_one_clear_line(tmp_path, trained):
    _, save, _ = trained
    other = prepare_books(tmp_path / "other", vocab=250)
    proc = run(["bash", "scripts/evaluate.sh", "infinite_former", other, save / "checkpoint_last.pt"], check=False,
               extra_env=TINY)
    one_line_error(proc, "dictionary")


@pytest.mark.full
def test_two_process_training_splits_streams_between_ranks(tmp_path, trained):
    data, _, _ = trained
    proc = run([os.path.join(BIN, "torchrun"), "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
                "--master_port", str(_free_port()), "--no-python", "bash", "scripts/distributed-train.sh", str(data),
                "--user-dir", USER_DIR, "--task", "streaming_lm",
                "--arch", "infinite_former_lm", "--criterion", "infinite_former_kl", "--tokens-per-sample", "32",
                "--batch-size", "2", "--num-basis-functions", "16", "--num-samples", "16",
                "--decoder-embed-dim", "32", "--decoder-attention-heads", "2", "--optimizer", "adam",
                "--lr", "1e-3", "--max-update", "10", "--cpu", "--distributed-backend", "gloo",
                "--ddp-backend", "legacy_ddp", "--save-dir", str(tmp_path / "ddp"), "--log-format", "simple"],
               extra_env=TINY)
    log = proc.stdout + proc.stderr
    assert "training on 2 devices" in log
    assert "in 2 streams per rank × 2 ranks" in log
    assert "bsz 4" in log  # the global batch holds both ranks' streams
    valid = _valid_losses(log)
    assert valid and all(math.isfinite(x) for x in valid)


def _per_update_losses(log):
    return {int(u): float(loss) for loss, u in
            re.findall(r"train_inner \| .*?loss=([0-9.]+),.*?num_updates=(\d+)", log)}


@pytest.mark.full
def test_resume_after_a_kill_mid_epoch_reproduces_the_uninterrupted_run(tmp_path, trained):
    data, _, _ = trained
    opts = ["--log-interval", "1", "--dropout", "0.1", "--save-interval-updates", "8"]
    straight = run(["bash", "scripts/train.sh", "infinite_former", str(data), str(tmp_path / "a"), *opts],
                   extra_env={**TINY, "MAX_UPDATE": "16"})
    # the same command killed (SIGKILL) mid-epoch, two updates after the checkpoint of
    # update 8 was written; then the same command again, which resumes from checkpoint_last.pt
    victim = subprocess.Popen(["bash", "scripts/train.sh", "infinite_former", str(data), str(tmp_path / "b"), *opts],
                              cwd=ROOT, env=env(**TINY, MAX_UPDATE="16"), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    seen = []
    for line in victim.stdout:  # train.sh execs fairseq-train: the pid is fairseq-train's
        seen.append(line)
        if re.search(r"num_updates=10\b", line):
            victim.kill()
            break
    victim.wait()
    killed_log = "".join(seen)
    assert victim.returncode == -9, killed_log[-2000:]
    assert "Saved checkpoint" in killed_log and "8 updates" in killed_log, killed_log[-2000:]
    resumed = run(["bash", "scripts/train.sh", "infinite_former", str(data), str(tmp_path / "b"), *opts],
                  extra_env={**TINY, "MAX_UPDATE": "16"})
    resumed_log = resumed.stdout + resumed.stderr
    a, b = _per_update_losses(straight.stdout + straight.stderr), _per_update_losses(resumed_log)
    killed = _per_update_losses(killed_log)
    assert sorted(b) == list(range(9, 17))  # updates 9 and 10 of the killed run were lost and redone
    assert [a[u] for u in range(1, 11)] == [killed[u] for u in range(1, 11)]
    assert [a[u] for u in range(9, 17)] == [b[u] for u in range(9, 17)]
    final_a = torch.load(tmp_path / "a" / "checkpoint_last.pt", weights_only=True)["model"]
    final_b = torch.load(tmp_path / "b" / "checkpoint_last.pt", weights_only=True)["model"]
    assert all(torch.equal(final_a[k], final_b[k]) for k in final_a)
    assert "restored the training streams' memory" in resumed_log


@pytest.mark.full
def test_quickstart_runs_the_comparison_on_a_users_corpus_over_seeds(tmp_path):
    """``quickstart.sh --corpus txt --input DIR --seeds 1,2``: the same job on the user's own folder,
    data and runs named after it, each arm trained and evaluated once per seed in OUT/ARM/seedS
    (the seed in its checkpoint), the table of means over the seeds printed; the position analysis
    scores the test split as evaluate.sh's fairseq-eval-lm does (the budget's STREAMS), each seed
    of each arm, plus the ∞-former wiped, compared seed by seed."""
    out = tmp_path / "runs"
    data = tmp_path / "books_txt"
    proc = run(["bash", "scripts/quickstart.sh", "--corpus", "txt", "--input", "tests/fixtures/books_txt",
                "--vocab-size", "300", "--arms", "infinite_former memory_off", "--seeds", "1,2", "--out", str(out),
                "--data", str(data)], extra_env={**TINY, "MAX_UPDATE": "3", "STREAMS": "2"})
    text = proc.stdout + proc.stderr
    assert f"preparing the txt corpus tests/fixtures/books_txt ({data})" in text, text[-2000:]
    assert (data / "bin" / "test.bin").is_file()
    bits = {}
    for arm in ("infinite_former", "memory_off"):
        for seed in (1, 2):
            run_dir = out / arm / f"seed{seed}"
            assert torch.load(run_dir / "checkpoint_last.pt", weights_only=False)["cfg"]["common"]["seed"] == seed
            bits[arm, seed] = float(PPL.search((run_dir / "eval.log").read_text()).group(1))
    assert bits["infinite_former", 1] != bits["infinite_former", 2]
    row = re.search(r"\| infinite_former \| 1,2 \| ([0-9.]+) \[([0-9.]+), ([0-9.]+)\] \|", text)
    assert row, text[-2000:]
    mean = (bits["infinite_former", 1] + bits["infinite_former", 2]) / 2
    assert float(row.group(1)) == pytest.approx(2 ** mean, rel=1e-4)  # eval.log's loss has 4 decimals
    assert float(row.group(2)) < float(row.group(1)) < float(row.group(3))
    result = json.loads((out / "position" / "position.json").read_text())
    models = {m["label"]: m for m in result["models"]}
    assert list(models) == ["infinite_former", "memory_off", "infinite_former wiped"]
    model = models["infinite_former"]
    assert model["seeds"] == [1, 2] and model["eval_args"][model["eval_args"].index("--batch-size") + 1] == "2"
    assert model["loss_bits"] == pytest.approx(mean, abs=1e-3)
    assert [r["loss_bits"] for r in model["runs"]] == pytest.approx([bits["infinite_former", 1],
                                                                      bits["infinite_former", 2]], abs=1e-3)
    assert "memory_wiped" in " ".join(models["infinite_former wiped"]["runs"][0]["eval_args"])
    pair = next(d for d in result["differences"] if (d["a"], d["b"]) == ("infinite_former", "memory_off"))
    assert pair["paired"] and [s["seed"] for s in pair["seeds"]] == [1, 2]
    assert pair["all"]["loss_bits_diff"] == pytest.approx(mean - (bits["memory_off", 1] + bits["memory_off", 2]) / 2,
                                                          abs=1e-3)
    assert "fairseq-longmem analyze position" in result["provenance"]["command"]
    # an evaluation cut short: the rerun evaluates that seed again and keeps its training log whole
    run_dir = out / "infinite_former" / "seed2"
    (run_dir / "seconds").unlink()
    (run_dir / "eval.log").unlink()
    again = run(["bash", "scripts/quickstart.sh", "--corpus", "txt", "--input", "tests/fixtures/books_txt",
                 "--vocab-size", "300", "--arms", "infinite_former memory_off", "--seeds", "1,2", "--out", str(out),
                 "--data", str(data)], extra_env={**TINY, "MAX_UPDATE": "3", "STREAMS": "2"})
    log = (run_dir / "train.log").read_text()
    assert "nothing to do" in log and "valid on 'valid' subset" in log
    assert float(PPL.search((run_dir / "eval.log").read_text()).group(1)) == bits["infinite_former", 2]
    row = next(line for line in again.stdout.splitlines() if line.startswith("| infinite_former | 1,2 |"))
    assert "nan" not in row, row


@pytest.mark.full
@pytest.mark.parametrize("args,message", [
    (["--arms", "infinite_fomer"], "unknown arm 'infinite_fomer' (infinite_former, memory_off, "
                                   "infinite_former_evicted, infinite_former_no_sticky, memory_off_matched, "
                                   "compressive, infinite_former_mixture, transformer_lm or fastformer_lm)"),
    (["--seeds", "1,2,1"], "seed 1 given twice in --seeds 1,2,1; give each seed once"),
    (["--seeds", "1,x"], "--seeds takes integers from 0 to 4294967295"),
    (["--seeds", "4294967296"], "--seeds takes integers from 0 to 4294967295"),
    (["--seeds", ""], "--seeds needs at least one seed"),
    (["--arms", ""], "--arms needs at least one arm (infinite_former, memory_off"),
    (["--corpus", "txt", "--input", "no_such_folder"], "--input no_such_folder not found"),
    (["--corpus", "txt"], "--corpus and --input go together"),
    (["--input", "tests/fixtures/books_txt"], "--corpus and --input go together"),
    (["--arms"], "--arms needs a value"),
], ids=["unknown-arm", "seed-twice", "seed-not-integer", "seed-too-large", "seeds-empty", "arms-empty", "missing-input",
        "corpus-alone", "input-alone", "no-value"])
def test_quickstart_refuses_bad_options_before_creating_anything(tmp_path, args, message):
    """A refusal is one line and exit 2, before the data is checked or prepared: the checkout has no
    new file (no data/, no runs/, no train.log)."""
    sandbox = tmp_path / "checkout"
    sandbox.mkdir()
    for name in ("fairseq_plugins", "scripts", "data-prep", "tests", ".venv"):
        os.symlink(os.path.join(ROOT, name), sandbox / name)
    before = sorted(os.listdir(sandbox))
    proc = run(["bash", sandbox / "scripts" / "quickstart.sh", *args], check=False, extra_env=TINY)
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout[-2000:]
    assert proc.stderr.splitlines() == [proc.stderr.strip()] and proc.stderr.startswith("quickstart.sh: error: ")
    assert message in proc.stderr
    assert sorted(os.listdir(sandbox)) == before


@pytest.mark.full
def test_quickstart_installs_only_where_the_environment_lacks_fairseq(tmp_path):
    """quickstart.sh runs scripts/install.sh when ./.venv's Python cannot find fairseq (here: a
    Python without its site-packages) and not when it can."""
    sandbox = tmp_path / "checkout"
    (sandbox / ".venv" / "bin").mkdir(parents=True)
    shutil.copytree(os.path.join(ROOT, "scripts"), sandbox / "scripts")
    (sandbox / "scripts" / "install.sh").write_text("echo stub-install; exit 3\n")
    for name in ("fairseq_plugins", "data-prep", "tests"):
        os.symlink(os.path.join(ROOT, name), sandbox / name)
    python = sandbox / ".venv" / "bin" / "python"
    for flags, installs in (("-S", True), ("", False)):  # -S: no site-packages, so no fairseq
        python.write_text(f'#!/bin/sh\nexec {sys.executable} {flags} "$@"\n')
        python.chmod(0o755)
        proc = run(["bash", sandbox / "scripts" / "quickstart.sh", "--arms", "infinite_fomer"], check=False,
                   extra_env=TINY)
        if installs:
            assert proc.returncode == 3 and proc.stdout == "== installing into .venv\nstub-install\n", proc
        else:
            assert proc.returncode == 2 and "installing" not in proc.stdout and "unknown arm" in proc.stderr, proc
