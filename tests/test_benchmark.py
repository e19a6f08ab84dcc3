"""scripts/benchmark.py end to end at tiny sizes: every arm measured or reported,
ratios to transformer_lm consistent with the raw numbers, files written."""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_quick_benchmark_writes_consistent_tables(tmp_path):
    proc = subprocess.run([sys.executable, "scripts/benchmark.py", "--quick", "--repeats", "1",
                           "--windows", "128", "--streams", "128,512", "--out", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads((tmp_path / "benchmark.json").read_text())
    rows = data["rows"]
    for mode in ("train", "infer"):
        at_128 = {r["arm"]: r for r in rows if r["mode"] == mode and r["context"] == 128}
        assert set(at_128) == {"transformer_lm", "fastformer_lm", "infinite_former_lm",
                               "infinite_former_lm (LTM off)"}
        ref = at_128["transformer_lm"]["tokens_per_s"]
        for row in at_128.values():
            assert row["tokens_per_s"] > 0
            assert abs(row["speed_vs_transformer"] - row["tokens_per_s"] / ref) < 1e-9
        # the ∞-former alone runs past the transformer's window; no ratio there
        at_512 = [r for r in rows if r["mode"] == mode and r["context"] == 512]
        assert {r["arm"] for r in at_512} == {"infinite_former_lm", "infinite_former_lm (LTM off)"}
        assert all("speed_vs_transformer" not in r for r in at_512)
    assert set(data["ltm_breakdown_ms"]) and all(v > 0 for v in data["ltm_breakdown_ms"].values())
    assert (tmp_path / "benchmark.png").stat().st_size > 10_000
    assert "| context | arm | tokens/s" in (tmp_path / "benchmark.md").read_text()


def test_out_of_memory_is_a_row_and_the_run_goes_on(tmp_path):
    """--memory-limit-mb makes real allocations fail on a CPU (an address-space limit):
    transformer_lm's 4096-token window needs 4 heads × 4096² × 4 bytes = 256 MB for one
    layer's attention weights alone, far over 64 MB; its 256-token window needs about 1 MB."""
    proc = subprocess.run([sys.executable, "scripts/benchmark.py", "--quick", "--repeats", "1", "--warmup", "0",
                           "--arms", "transformer_lm", "--windows", "256,4096", "--streams", "256",
                           "--memory-limit-mb", "64", "--out", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = json.loads((tmp_path / "benchmark.json").read_text())["rows"]
    got = {(r["mode"], r["context"]): r for r in rows}
    assert set(got) == {("train", 256), ("train", 4096), ("infer", 256), ("infer", 4096)}
    for mode in ("train", "infer"):
        assert got[(mode, 4096)]["error"] == "OOM"
        assert "error" not in got[(mode, 256)] and got[(mode, 256)]["tokens_per_s"] > 0
    # the run went on after the first OOM (train 4096 comes before infer 256) and wrote its tables
    assert [(r["mode"], r["context"]) for r in rows].index(("infer", 256)) > \
        [(r["mode"], r["context"]) for r in rows].index(("train", 4096))
    assert "| 4096 | transformer_lm | OOM |" in (tmp_path / "benchmark.md").read_text()


def test_bad_arm_is_one_line():
    proc = subprocess.run([sys.executable, "scripts/benchmark.py", "--arms", "gpt5"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "unknown arm or mode gpt5" in proc.stderr and "Traceback" not in proc.stderr
