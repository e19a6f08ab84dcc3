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


_RANK = """
import atexit, sys
from fairseq_plugins.compat import teardown

class Finalized:
    def __del__(self):
        print("finalization ran", flush=True)

keep = Finalized()
atexit.register(lambda: print("atexit ran", flush=True))
def main(cfg):
    print("main ran", flush=True)
    if cfg == "raise":
        raise RuntimeError("training failed")
teardown._ORIGINAL = lambda i, main, cfg, kwargs: main(cfg)  # fairseq's, without a process group
teardown._ORIGINAL_CALL_MAIN = lambda cfg, main: main(cfg)  # fairseq's, one process
if sys.argv[1] == "plain":
    main("plain")
elif sys.argv[2] == "one process":
    teardown.call_main(sys.argv[1], main)
else:
    teardown.distributed_main(0, main, sys.argv[1], {})
print("after distributed_main", flush=True)
"""


@pytest.mark.parametrize("processes", ["ranks", "one process"])
@pytest.mark.parametrize("case", ["plain", "finished", "raise"])
def test_a_finished_rank_ends_without_the_interpreters_shutdown(case, processes):
    """A rank (or a one-process training) whose training returned runs the atexit handlers and
    ends with status 0 before finalization (no destructor runs, so none can abort:
    fairseq_plugins/compat/teardown.py); one that raises keeps its traceback and status, and a
    plain process finalizes as usual."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", _RANK, case, processes], capture_output=True, text=True)
    lines = proc.stdout.splitlines()
    if case == "finished":
        assert (proc.returncode, lines) == (0, ["main ran", "atexit ran"]), proc.stderr
    elif case == "raise":
        assert proc.returncode == 1 and "RuntimeError: training failed" in proc.stderr
        assert lines == ["main ran", "atexit ran", "finalization ran"]
    else:  # the control: without the wrapper the interpreter's finalization runs the destructor
        assert (proc.returncode, lines) == (0, ["main ran", "after distributed_main", "atexit ran",
                                                 "finalization ran"]), proc.stderr


def test_install_makes_every_rank_run_the_wrapper_once():
    """After install() fairseq's ``distributed_main`` is the plugin's, which calls fairseq's own
    (kept once, even when install runs twice); checked in a child process."""
    import subprocess
    import sys

    code = ("from fairseq.distributed import utils; original = utils.distributed_main\n"
            "from fairseq_plugins.compat import teardown\n"
            "entry = utils.call_main\n"
            "teardown.install(); teardown.install()\n"
            "print(utils.distributed_main is teardown.distributed_main, teardown._ORIGINAL is original,\n"
            "      utils.call_main is teardown.call_main, teardown._ORIGINAL_CALL_MAIN is entry)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.stdout.split() == ["True"] * 4, proc.stderr
