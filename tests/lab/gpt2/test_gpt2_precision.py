"""Mixed precision of infinite_former_gpt2 beyond the shared tests of
tests/compat/test_precision_and_faults.py (which train the converted tiny GPT-2 under each CPU
precision against fp32 and compare a ``.half()`` model with fp32), and the GPT-2 arm of
scripts/gpu-checks.sh (docs/gpt2.md):

* under ``--fp16`` the model runs in half precision while the memory's B and reads stay
  float32;
* ``gpu-checks.sh --dry-run`` prepares every arm (the tiny GPT-2 built and converted on the
  spot) and prints each row's command; the GPT-2 arm's lines run on a CPU.
"""

import math
import shlex

import pytest
import torch

from helpers import ROOT, USER_DIR, run
from test_precision_and_faults import (CPU_PRECISIONS, _json_losses, data, gpt2_data,  # noqa: F401
                                       train_in_process)


def test_fp16_gpt2_finetuning_keeps_the_memory_math_in_float32(gpt2_data, monkeypatch):
    """Under --fp16 the converted GPT-2 runs in half precision (the residual chunks that
    enter the memory are fp16) while the memory's B and the reads' μ, σ² are float32."""
    from fairseq_plugins.modules.memory.continuous import LongTermMemory

    seen = {"chunk": set(), "B": set(), "read": set()}
    update, read = LongTermMemory.update, LongTermMemory.read_prepared

    def record_update(self, state, chunk, chunk_valid):
        out = update(self, state, chunk, chunk_valid)
        seen["chunk"].add(chunk.dtype)
        seen["B"].add(out.coefficients.dtype)
        return out

    def record_read(self, query, memory):
        out = read(self, query, memory)
        seen["read"].update({memory.scores.dtype, memory.values.dtype, out[1].dtype, out[2].dtype})
        return out

    monkeypatch.setattr(LongTermMemory, "update", record_update)
    monkeypatch.setattr(LongTermMemory, "read_prepared", record_read)
    losses = train_in_process(gpt2_data, "infinite_former_gpt2", "--max-update", "3", "--no-save",
                              *CPU_PRECISIONS["fp16"])
    assert sorted(losses) == [1, 2, 3] and all(math.isfinite(v) for v in losses.values())
    assert seen == {"chunk": {torch.float16}, "B": {torch.float32}, "read": {torch.float32}}, seen


GPU_MODELS = ["infinite_former_lm", "fastformer_lm", "fastformer_tiny", "infinite_former_gpt2"]
GPU_PRECISIONS = ["fp32", "fp16", "memory-efficient-fp16", "amp", "bf16"]


@pytest.mark.full
def test_gpu_checks_dry_run_prepares_every_arm_and_its_gpt2_command_lines_run_on_a_cpu(tmp_path):
    """--dry-run builds the toy data, the tiny GPT-2 and its conversion and prints every
    row's fairseq-train command; the GPT-2 arm's fp32 line then fine-tunes the converted
    checkpoint on a CPU (with --cpu and 2 updates)."""
    proc = run(["bash", "scripts/gpu-checks.sh", "--dry-run", "--keep", tmp_path / "work"])
    header, *lines = proc.stdout.splitlines()
    assert header == "model\tprecision\tfairseq-train command"  # (--keep: the files stay, no removal note)
    assert "then: fairseq-longmem bench gpt2 --device cuda --bf16 " in proc.stderr, proc.stderr[-2000:]
    assert f"then: fairseq-longmem gpt2 tiny --force --out {ROOT}/results/gpu-gpt2/hf --layers 12 --width 768 " \
        in proc.stderr
    assert "MAX_UPDATE=300 " in proc.stderr and " -- --bf16\n" in proc.stderr, proc.stderr[-2000:]
    rows = [line.split("\t") for line in lines]
    assert [row[:2] for row in rows] == [[m, p] for m in GPU_MODELS for p in GPU_PRECISIONS], proc.stdout[-2000:]
    for _, _, line in rows:  # every command loads the plugin itself, not a folder inside it
        if not line.startswith("SKIP ("):
            argv = shlex.split(line)
            assert argv[argv.index("--user-dir") + 1] == USER_DIR, line
    gpt2 = {p: line for m, p, line in rows if m == "infinite_former_gpt2"}
    try:
        from transformers import GPT2LMHeadModel  # noqa: F401
    except ImportError:
        assert all(line.startswith("SKIP (") for line in gpt2.values()), gpt2
        pytest.skip("transformers' GPT-2 cannot be imported: the GPT-2 rows say SKIP")
    # fp32 only: the CPU precisions of the same fine-tuning are tests/compat/test_precision_and_faults.py's
    for precision, extra in (("fp32", []),):
        argv = shlex.split(gpt2[precision])
        assert argv[0].endswith("fairseq-train") and "--restore-file" in argv, argv
        argv[argv.index("--max-update") + 1] = "2"
        tuned = run([*argv, "--cpu", *extra])
        log = tuned.stdout + tuned.stderr
        assert f"Loaded checkpoint {tmp_path / 'work' / 'gpt2' / 'checkpoint.pt'}" in log, log[-3000:]
        losses = _json_losses(log)
        assert sorted(losses) == [1, 2] and all(math.isfinite(v[0]) for v in losses.values()), (precision, losses)
