"""THREADS: every training / evaluation / generation script passes a thread
count to torch through OMP_NUM_THREADS (default 1 on a CPU) and prints it in its log.
The command the recipes hand over to (fairseq-longmem, which runs fairseq's tool in its own
process) is replaced by a stub that prints the variables it would see."""
import os
import sys

import pytest

from helpers import BIN, run

STUB = """#!/bin/sh
echo "stub $(basename "$0") $1 $2 MALLOC_MMAP_THRESHOLD_=${MALLOC_MMAP_THRESHOLD_:-unset} OMP_NUM_THREADS=${OMP_NUM_THREADS:-unset}"
"""
CUDA_VISIBLE = ". scripts/threads.sh; cuda_visible && echo cuda || echo cpu"


def _torch_sees_cuda():
    """torch's own answer, in a fresh process."""
    return run([sys.executable, "-c", "import torch; print(torch.cuda.is_available())"],
               check=False).stdout.strip() == "True"


@pytest.fixture
def env(tmp_path):
    """What the scripts' environment changes (``helpers.run``'s ``extra_env``): the stub first on
    PATH, no CUDA device, and none of the thread and allocator variables (None removes one)."""
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    (stubs / "fairseq-longmem").write_text(STUB)
    (stubs / "fairseq-longmem").chmod(0o755)
    (tmp_path / "lm").mkdir()
    (tmp_path / "lm" / "dict.txt").write_text("a 1\n")
    (tmp_path / "ck.pt").write_bytes(b"")
    unset = ["THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", *(k for k in os.environ if k.startswith("MALLOC_"))]
    return {**dict.fromkeys(unset), "PATH": f"{stubs}{os.pathsep}{BIN}{os.pathsep}{os.environ['PATH']}",
            "CUDA_VISIBLE_DEVICES": ""}  # a CPU run


@pytest.mark.full
@pytest.mark.parametrize("script", ["train", "evaluate"])
def test_default_is_one_thread_on_cpu_and_printed(env, tmp_path, script):
    third = tmp_path / ("save" if script == "train" else "ck.pt")
    proc = run(["bash", f"scripts/{script}.sh", "infinite_former", tmp_path / "lm", third], check=False, extra_env=env)
    assert proc.returncode == 0, proc.stderr
    assert f"{script}.sh: THREADS=1" in proc.stdout
    verb = {"train": "train", "evaluate": "eval"}[script]
    assert proc.stdout.splitlines()[-1].startswith(f"stub fairseq-longmem arms {verb} ")  # the process it becomes
    assert "OMP_NUM_THREADS=1" in proc.stdout.splitlines()[-1]
    # on a CPU glibc keeps freed memory (the benchmark's --allocator cached; docs/benchmark.md)
    assert "MALLOC_MMAP_THRESHOLD_=4294967296" in proc.stdout.splitlines()[-1]
    proc = run(["bash", f"scripts/{script}.sh", "infinite_former", tmp_path / "lm", third], check=False,
               extra_env={**env, "THREADS": "3"})
    assert f"{script}.sh: THREADS=3" in proc.stdout and proc.stdout.splitlines()[-1].endswith("OMP_NUM_THREADS=3")
    proc = run(["bash", f"scripts/{script}.sh", "infinite_former", tmp_path / "lm", third], check=False,
               extra_env={**env, "THREADS": "many"})
    assert proc.returncode == 2 and proc.stderr.strip() == \
        f"{script}.sh: error: THREADS must be a positive integer, not 'many'"


@pytest.mark.full
def test_a_visible_cuda_device_is_known_without_python(env, tmp_path):
    """set_threads without a device asks cuda_visible (no Python probe): CUDA_VISIBLE_DEVICES="" (or -1)
    hides every GPU, as it does from torch; then the CPU defaults apply."""
    for hidden in ("", "-1"):
        proc = run(["bash", "-c", CUDA_VISIBLE], check=False, extra_env={**env, "CUDA_VISIBLE_DEVICES": hidden})
        assert proc.stdout == "cpu\n"
    proc = run(["bash", "-c", CUDA_VISIBLE], check=False, extra_env={**env, "CUDA_VISIBLE_DEVICES": None})
    assert proc.stdout == ("cuda\n" if _torch_sees_cuda() else "cpu\n")  # the same answer as torch's


@pytest.mark.full
def test_torch_is_asked_about_cuda_only_where_a_gpu_may_be(env, tmp_path):
    """torch_cuda (the recipes' --cpu decision) fails without starting Python where cuda_visible
    finds no GPU and no ROCm device exists; elsewhere it gives torch's own answer."""
    stubs = tmp_path / "python-stub"
    stubs.mkdir()
    (stubs / "python").write_text(f"#!/bin/sh\necho asked >> {tmp_path / 'asked'}\nexec {sys.executable} \"$@\"\n")
    (stubs / "python").chmod(0o755)
    probe = ". scripts/threads.sh; torch_cuda && echo cuda || echo cpu"
    path = f"{stubs}{os.pathsep}{env['PATH']}"
    proc = run(["bash", "-c", probe], check=False, extra_env={**env, "PATH": path})  # CUDA_VISIBLE_DEVICES=""
    if not os.path.exists("/dev/kfd"):
        assert proc.stdout == "cpu\n" and not (tmp_path / "asked").exists()
    proc = run(["bash", "-c", probe], check=False, extra_env={**env, "PATH": path, "CUDA_VISIBLE_DEVICES": None})
    assert proc.stdout == ("cuda\n" if _torch_sees_cuda() else "cpu\n")
