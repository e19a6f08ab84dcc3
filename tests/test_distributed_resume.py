"""Resuming a run of several processes: every rank's training memory is saved with the
checkpoint and restored on its own rank, so that a 2-process run started again with the same
command after it stopped (a kill, a SLURM job resubmitted: docs/training-at-scale.md) gives the
losses and weights of the uninterrupted run; a resume with another number of processes says in
one line that the memory restarts empty. torchrun + gloo on CPU, on the toy data of
test_precision_and_faults."""

import pytest
import os
import shutil

import torch

from helpers import BIN, USER_DIR, run
from test_precision_and_faults import SMALL, _free_port, _json_losses, data  # noqa: F401

OPTS = ["--user-dir", USER_DIR, "--task", "streaming_lm", "--arch", "infinite_former_lm",
        "--criterion", "infinite_former_kl", "--tokens-per-sample", "16", "--num-basis-functions", "16",
        "--num-samples", "16", *SMALL, "--dropout", "0", "--seed", "3", "--optimizer", "adam", "--lr", "3e-3",
        "--max-update", "8", "--save-interval-updates", "4", "--cpu", "--log-format", "json", "--log-interval",
        "1", "--disable-validation", "--num-workers", "0",
        # as in test_two_processes_reproduce_the_one_process_loss_curve
        "--no-sticky-memories"]


def _two_processes(data_dir, save, *extra):
    proc = run([os.path.join(BIN, "torchrun"), "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
                "--master_port", _free_port(), "--no-python", "bash", "scripts/distributed-train.sh",
                data_dir / "lm", *OPTS, "--batch-size", "2", "--save-dir", save,
                "--distributed-backend", "gloo", "--ddp-backend", "legacy_ddp", *extra])
    return proc.stdout + proc.stderr


@pytest.mark.full
def test_two_process_resume_restores_every_ranks_memory(data, tmp_path):  # noqa: F811
    straight = _json_losses(_two_processes(data, tmp_path / "a"))
    middle = tmp_path / "a" / "checkpoint_1_4.pt"
    # the run stopped after update 4: the same command again resumes from checkpoint_last.pt
    # (scripts/distributed-train.sh lets every rank read it; no option to add)
    (tmp_path / "b").mkdir()
    shutil.copy(middle, tmp_path / "b" / "checkpoint_last.pt")
    log = _two_processes(data, tmp_path / "b")
    resumed = _json_losses(log)
    assert "restart" not in log and "Loaded checkpoint" in log, log[-3000:]
    assert sorted(resumed) == [5, 6, 7, 8]
    assert [resumed[u] for u in resumed] == [straight[u] for u in resumed]
    final_a = torch.load(tmp_path / "a" / "checkpoint_last.pt", weights_only=True)["model"]
    final_b = torch.load(tmp_path / "b" / "checkpoint_last.pt", weights_only=True)["model"]
    assert all(torch.equal(final_a[k], final_b[k]) for k in final_a)

    # another number of processes: one line says what happens
    one = run([os.path.join(BIN, "fairseq-train"), data / "lm", *OPTS, "--batch-size", "4", "--max-update", "5",
               "--save-dir", tmp_path / "c", "--restore-file", middle])
    said = [line for line in (one.stdout + one.stderr).splitlines() if "memory restarts empty" in line]
    assert len(said) == 1 and "resuming with 1 processes a checkpoint of 2" in said[0], said


def test_the_process_group_is_destroyed_before_the_interpreter_exits():
    """fairseq never destroys its process group; the plugin's exit handler does, so that gloo's
    threads do not outlive the interpreter (fairseq_plugins/compat/teardown.py)."""
    import torch.distributed as dist

    from fairseq_plugins.compat import teardown

    teardown.destroy_process_group()  # no group: nothing to do, no error
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{_free_port()}", rank=0, world_size=1)
    assert dist.is_initialized()
    teardown.destroy_process_group()
    assert not dist.is_initialized()
