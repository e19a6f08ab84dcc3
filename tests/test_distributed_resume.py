"""Resuming a run of several processes (issue 13, item 11): every rank's training memory
is saved with the checkpoint and restored on its own rank, so that a 2-process run resumed
from a mid-run checkpoint (as after a kill) gives the losses and weights of the
uninterrupted run; a resume with another number of processes says in one line that the
memory restarts empty. torchrun + gloo on CPU, on the toy data of test_precision_and_faults."""

import os
import subprocess

import torch

from test_precision_and_faults import BIN, ENV, ROOT, SMALL, USER_DIR, _free_port, _json_losses, data  # noqa: F401

OPTS = ["--user-dir", USER_DIR, "--task", "streaming_lm", "--arch", "infinite_former_lm",
        "--criterion", "infinite_former_kl", "--tokens-per-sample", "16", "--num-basis-functions", "16",
        "--num-samples", "16", *SMALL, "--dropout", "0", "--seed", "3", "--optimizer", "adam", "--lr", "3e-3",
        "--max-update", "8", "--save-interval-updates", "4", "--cpu", "--log-format", "json", "--log-interval",
        "1", "--disable-validation", "--num-workers", "0",
        # as in test_two_processes_reproduce_the_one_process_loss_curve
        "--no-sticky-memories"]


def _two_processes(data_dir, save, *extra):
    proc = subprocess.run([os.path.join(BIN, "torchrun"), "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
                           "--master_port", str(_free_port()), "--no-python", "bash", "scripts/distributed-train.sh",
                           str(data_dir / "lm"), *OPTS, "--batch-size", "2", "--save-dir", str(save),
                           "--distributed-backend", "gloo", "--ddp-backend", "legacy_ddp", *extra],
                          cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    return proc.stdout + proc.stderr


def test_two_process_resume_restores_every_ranks_memory(data, tmp_path):  # noqa: F811
    straight = _json_losses(_two_processes(data, tmp_path / "a"))
    middle = tmp_path / "a" / "checkpoint_1_4.pt"
    # every rank reads the file: fairseq's broadcast of the loaded checkpoint from rank 0
    # unpickles it with torch.load(weights_only=True), which refuses its config (one line)
    log = _two_processes(data, tmp_path / "b", "--restore-file", str(middle), "--load-checkpoint-on-all-dp-ranks")
    resumed = _json_losses(log)
    assert "restart" not in log, log[-3000:]
    assert sorted(resumed) == [5, 6, 7, 8]
    assert [resumed[u] for u in resumed] == [straight[u] for u in resumed]
    final_a = torch.load(tmp_path / "a" / "checkpoint_last.pt", weights_only=True)["model"]
    final_b = torch.load(tmp_path / "b" / "checkpoint_last.pt", weights_only=True)["model"]
    assert all(torch.equal(final_a[k], final_b[k]) for k in final_a)

    # without that option: one line naming it (from the rank that refused the broadcast)
    plain = subprocess.run([os.path.join(BIN, "torchrun"), "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
                            "--master_port", str(_free_port()), "--no-python", "bash", "scripts/distributed-train.sh",
                            str(data / "lm"), *OPTS, "--batch-size", "2", "--save-dir", str(tmp_path / "d"),
                            "--distributed-backend", "gloo", "--ddp-backend", "legacy_ddp", "--restore-file",
                            str(middle)], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300)
    errors = [line for line in plain.stderr.splitlines() if "fairseq_plugins: error:" in line]
    assert plain.returncode != 0 and errors and "--load-checkpoint-on-all-dp-ranks" in errors[0], plain.stderr[-3000:]

    # another number of processes: one line says what happens
    one = subprocess.run([os.path.join(BIN, "fairseq-train"), str(data / "lm"), *OPTS, "--batch-size", "4",
                          "--max-update", "5", "--save-dir", str(tmp_path / "c"), "--restore-file", str(middle)],
                         cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300)
    assert one.returncode == 0, one.stderr[-3000:]
    said = [line for line in (one.stdout + one.stderr).splitlines() if "memory restarts empty" in line]
    assert len(said) == 1 and "resuming with 1 processes a checkpoint of 2" in said[0], said
