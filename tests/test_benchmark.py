"""scripts/benchmark.py end to end at tiny sizes: every arm measured or reported,
ratios to transformer_lm consistent with the raw numbers, files written."""

import pytest
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.full
def test_quick_benchmark_writes_consistent_tables(tmp_path):
    proc = subprocess.run([sys.executable, "scripts/benchmark.py", "--quick", "--repeats", "1",
                           "--windows", "128", "--streams", "128,512", "--clock", "cpu", "--threads", "1",
                           "--tokens-per-step", "128", "--out", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True)
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
    # the ∞-former's tail (its last segments, never the first; --quick: segments of 64) and its ratio
    for arm in ("infinite_former_lm", "infinite_former_lm (LTM off)"):
        for mode in ("train", "infer"):
            own = {r["context"]: r for r in rows if r["arm"] == arm and r["mode"] == mode}
            assert own[128]["tail_tokens_per_s"] > 0 and own[512]["tail_tokens_per_s"] > 0
            assert abs(own[512]["tail_vs_own_first"] - own[512]["tail_tokens_per_s"] / own[128]["tail_tokens_per_s"]) < 1e-9
    assert all("tail_tokens_per_s" not in r for r in rows if r["arm"] in ("transformer_lm", "fastformer_lm"))
    assert data["meta"]["sizes"]["clock"] == "cpu" and data["meta"]["sizes"]["allocator"] == "cached"
    assert set(data["ltm_breakdown_ms"]) and all(v > 0 for v in data["ltm_breakdown_ms"].values())
    # memory on ÷ off in lockstep pairs: --repeats 1 timed pass × (16 − 1) segments, quartiles around the
    # median, for one stream and for --tokens-per-step ÷ segment = 128 ÷ 64 streams per step
    assert [p["streams"] for p in data["ltm_paired"]] == [1, 2] and data["meta"]["sizes"]["paired_streams"] == [1, 2]
    for paired in data["ltm_paired"]:
        assert paired["pairs"] == 15 and paired["on_ms"] > 0 and paired["off_ms"] > 0
        assert paired["speed_ratio_q1"] <= paired["speed_ratio"] <= paired["speed_ratio_q3"]
    assert "### ∞-former memory on ÷ off, training, paired segments" in (tmp_path / "benchmark.md").read_text()
    assert (tmp_path / "benchmark.png").stat().st_size > 10_000
    assert "| context | arm | tokens/s" in (tmp_path / "benchmark.md").read_text()


@pytest.mark.full
def test_out_of_memory_is_a_row_and_the_run_goes_on(tmp_path):
    """--memory-limit-mb makes real allocations fail on a CPU (an address-space limit):
    transformer_lm's 4096-token window needs 4 heads × 4096² × 4 bytes = 256 MB for one
    layer's attention weights alone, far over 64 MB; its 256-token window needs about 1 MB."""
    proc = subprocess.run([sys.executable, "scripts/benchmark.py", "--quick", "--repeats", "1", "--warmup", "0",
                           "--arms", "transformer_lm", "--windows", "256,4096", "--streams", "256",
                           "--memory-limit-mb", "64", "--paired-streams", "2", "--out", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads((tmp_path / "benchmark.json").read_text())
    rows = data["rows"]
    got = {(r["mode"], r["context"]): r for r in rows}
    # no ∞-former arms: --paired-streams is said to have nothing to pair, and nothing is recorded
    assert "--paired-streams: no paired measurement in this run" in proc.stdout
    assert data["ltm_paired"] == [] and data["meta"]["sizes"]["paired_streams"] == []
    assert set(got) == {("train", 256), ("train", 4096), ("infer", 256), ("infer", 4096)}
    for mode in ("train", "infer"):
        assert got[(mode, 4096)]["error"] == "OOM"
        assert "error" not in got[(mode, 256)] and got[(mode, 256)]["tokens_per_s"] > 0
    # the run went on after the first OOM (train 4096 comes before infer 256) and wrote its tables
    assert [(r["mode"], r["context"]) for r in rows].index(("infer", 256)) > \
        [(r["mode"], r["context"]) for r in rows].index(("train", 4096))
    assert "| 4096 | transformer_lm | OOM |" in (tmp_path / "benchmark.md").read_text()


@pytest.mark.full
def test_bad_arm_is_one_line():
    proc = subprocess.run([sys.executable, "scripts/benchmark.py", "--arms", "gpt5"], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "unknown arm or mode gpt5" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.full
def test_generate_mode_times_generation_apart_and_reports_state_and_ratios(tmp_path):
    """--modes generate at tiny sizes: every arm after every prompt, only the generated tokens
    timed (median ≥ min, ratio 1 at the shortest prompt), the incremental state's exact size
    (transformer_lm: 2 layers × keys and values × prompt × width fp32; the other two: the same
    at both prompts, which are whole numbers of ∞-former segments), ratios from the raw
    numbers, the table, its goal lines and the plot."""
    proc = subprocess.run([sys.executable, "scripts/benchmark.py", "--quick", "--modes", "generate",
                           "--prompts", "64,256", "--gen-tokens", "8", "--repeats", "4", "--warmup", "1",
                           "--threads", "1", "--out", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [r for r in json.loads((tmp_path / "benchmark.json").read_text())["rows"] if r["mode"] == "generate"]
    got = {(r["arm"], r["context"]): r for r in rows}
    assert set(got) == {(arm, p) for arm in ("transformer_lm", "fastformer_lm", "infinite_former_lm")
                        for p in (64, 256)}
    for (arm, prompt), row in got.items():
        assert "error" not in row, row
        assert 0 < row["ms_per_token_min"] <= row["ms_per_token"] and row["gen_tokens"] == 8 and row["repeats"] == 4
        assert row["prefill_s"] > 0 and row["peak_mem_mb"] >= 0 and row["prefill_peak_mb"] >= 0
        if prompt == 64:
            assert row["ms_vs_first"] == 1.0
        if "peak_vs_first" in row:
            assert abs(row["peak_vs_first"] - row["peak_mem_mb"] / got[(arm, 64)]["peak_mem_mb"]) < 1e-9
    for prompt in (64, 256):
        assert abs(got[("transformer_lm", prompt)]["state_mb"] - 2 * 2 * prompt * 128 * 4 / 2**20) < 1e-9
    for arm in ("fastformer_lm", "infinite_former_lm"):
        assert got[(arm, 64)]["state_mb"] == got[(arm, 256)]["state_mb"] > 0
    table = (tmp_path / "benchmark.md").read_text()
    assert "| prompt | arm | ms / token (median) | ms / token (min) | ms ÷ own first |" in table
    assert "- infinite_former_lm, prompt 64 → 256: ms/token ×" in table and "goal: flat within ±15%" in table
    assert (tmp_path / "benchmark_generation.png").stat().st_size > 10_000


@pytest.mark.full
def test_cpu_clock_needs_one_thread():
    """Idle threads of a pool spin and count as CPU time: --clock cpu is refused otherwise."""
    proc = subprocess.run([sys.executable, "scripts/benchmark.py", "--clock", "cpu", "--threads", "2"], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "--clock cpu needs --threads 1" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.full
def test_bad_paired_streams_is_one_line():
    for value in ("0", "1,x", ""):
        proc = subprocess.run([sys.executable, "scripts/benchmark.py", "--paired-streams", value], cwd=ROOT,
                              capture_output=True, text=True)
        assert proc.returncode == 2 and "--paired-streams must be positive integers" in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr


def test_cached_allocator_keeps_large_blocks_in_the_process():
    """--allocator cached (the benchmark's default) gives its workers glibc thresholds above the
    largest block a 64k-token row frees (the FFN's inner activation, 2**16 x 512 fp32 = 128 MiB),
    so that glibc keeps such blocks for reuse instead of returning them to the kernel; the
    system allocator leaves glibc's defaults. (The page faults this saves are the benchmark's to
    report: docs/benchmark.md.)"""
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    from bench_memory import allocator_environment

    largest = 2**16 * 512 * 4
    cached = allocator_environment("cached")
    assert int(cached["MALLOC_MMAP_THRESHOLD_"]) > largest
    assert int(cached["MALLOC_TRIM_THRESHOLD_"]) > largest
    assert allocator_environment("system") == {}


def test_generate_table_shows_a_row_that_was_not_run():
    """A prompt beyond --token-prefill-max is a row with its reason (the full run's 64k rows of
    transformer_lm and fastformer_lm), not a ValueError that loses the whole table."""
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    import benchmark_generation

    done = {"context": 1024, "arm": "fastformer_lm", "ms_per_token": 3.05, "ms_per_token_min": 2.51,
            "ms_vs_first": 1.0, "state_mb": 0.0, "peak_mem_mb": 15.9, "prefill_s": 2.8, "prefill_peak_mb": 16.0,
            "gen_tokens": 128, "repeats": 7}
    skipped = {"context": 65536, "arm": "fastformer_lm",
               "error": "not run: token-by-token prompt > --token-prefill-max 16384"}
    table = "\n".join(benchmark_generation.markdown_lines([done, skipped]))
    assert "| 1024 | fastformer_lm | 3.05 | 2.51 | 1.00 |" in table
    assert "| 65536 | fastformer_lm | not run: token-by-token prompt > --token-prefill-max 16384 |" in table
