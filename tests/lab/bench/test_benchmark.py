"""``fairseq-longmem bench`` (fairseq_plugins/lab/bench/): every arm measured or reported, ratios
consistent with the raw numbers, each verb writing its own files and nothing else.

The end-to-end runs at tiny sizes go through the whole command (full tier): the consistency of
the tables with the workers' results in this process (``inline_workers``: each job serialised as
a worker receives it, then run here), the worker processes themselves (an out-of-memory worker)
in subprocesses; the tables, the files and the option checks are tested in-process (fast tier)."""

import json
import os

import pytest

import helpers
from fairseq_plugins import cli
from fairseq_plugins.lab.bench import generate
from fairseq_plugins.lab.bench import report
from fairseq_plugins.lab.bench import train
from fairseq_plugins.lab.bench import worker
from fairseq_plugins.lab.bench.resources import allocator_environment


def _files(folder):
    return {name: (folder / name).read_bytes() for name in sorted(os.listdir(folder))}


# ---- end to end ------------------------------------------------------------------------------------


@pytest.fixture
def inline_workers(monkeypatch):
    """Every worker job run in this process: the job passes through JSON as the worker process
    receives it (:func:`worker.run`), then :func:`worker.work`; this process' threads restored."""
    import torch

    def inline(function, args, timeout=None, **kwargs):
        job = json.loads(json.dumps({"call": f"{function.__module__}:{function.__qualname__}", "kwargs": kwargs,
                                     "settings": worker._settings(args)}))
        return json.loads(json.dumps(worker.work(job)))

    threads = torch.get_num_threads()
    monkeypatch.setattr(worker, "run", inline)
    yield
    torch.set_num_threads(threads)


def _longmem(capsys, *args):
    """``fairseq-longmem ARGS`` in this process; fails the test on a non-zero status."""
    status = cli.main([str(a) for a in args])
    out = capsys.readouterr()
    assert status == 0, out.err[-3000:]
    return out


@pytest.mark.full
def test_quick_benchmark_writes_consistent_tables(tmp_path, inline_workers, capsys):
    """bench train, memory and paired into one folder: each writes its own files and leaves the
    others' as they were."""
    _longmem(capsys, "bench", "train", "--quick", "--repeats", "1", "--windows", "128", "--streams", "128,512",
                    "--clock", "cpu", "--threads", "1", "--tokens-per-step", "128", "--out", tmp_path)
    data = json.loads((tmp_path / "train.json").read_text())
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
    assert (tmp_path / "train.png").stat().st_size > 10_000
    assert "| context | arm | tokens/s" in (tmp_path / "train.md").read_text()
    trained = _files(tmp_path)

    _longmem(capsys, "bench", "memory", "--quick", "--repeats", "1", "--clock", "cpu", "--threads", "1",
                    "--out", tmp_path)
    breakdown = json.loads((tmp_path / "memory.json").read_text())["ltm_breakdown_ms"]
    assert set(breakdown) and all(v > 0 for v in breakdown.values())
    assert "### ∞-former long-term memory, one layer, one segment (ms)" in (tmp_path / "memory.md").read_text()

    # memory on ÷ off in lockstep pairs: --repeats 1 timed pass × (16 − 1) segments, quartiles around the
    # median, for one stream and for --tokens-per-step ÷ segment = 128 ÷ 64 streams per step
    _longmem(capsys, "bench", "paired", "--quick", "--repeats", "1", "--clock", "cpu", "--threads", "1",
                    "--tokens-per-step", "128", "--out", tmp_path)
    data = json.loads((tmp_path / "paired.json").read_text())
    assert [p["streams"] for p in data["ltm_paired"]] == [1, 2] and data["meta"]["sizes"]["paired_streams"] == [1, 2]
    for paired in data["ltm_paired"]:
        assert paired["pairs"] == 15 and paired["on_ms"] > 0 and paired["off_ms"] > 0
        assert paired["speed_ratio_q1"] <= paired["speed_ratio"] <= paired["speed_ratio_q3"]
    assert "### ∞-former memory on ÷ off, training, paired segments" in (tmp_path / "paired.md").read_text()

    after = _files(tmp_path)
    assert {name: after[name] for name in trained} == trained
    assert sorted(after) == ["memory.json", "memory.md", "paired.json", "paired.md", "train.json", "train.md",
                             "train.png"]


@pytest.mark.full
def test_out_of_memory_is_a_row_and_the_run_goes_on(tmp_path):
    """--memory-limit-mb makes real allocations fail on a CPU (an address-space limit):
    transformer_lm's 4096-token window needs 4 heads × 4096² × 4 bytes = 256 MB for one
    layer's attention weights alone, far over 64 MB; its 256-token window needs about 1 MB."""
    helpers.longmem("bench", "train", "--quick", "--repeats", "1", "--warmup", "0", "--arms", "transformer_lm",
                    "--windows", "256,4096", "--streams", "256", "--memory-limit-mb", "64", "--encoder-lengths", "",
                    "--out", tmp_path)
    data = json.loads((tmp_path / "train.json").read_text())
    rows = data["rows"]
    got = {(r["mode"], r["context"]): r for r in rows}
    # the paired measurement is a verb of its own: train records none and does not take its options
    assert "ltm_paired" not in data
    refused = helpers.longmem_here("bench", "train", "--paired-streams", "2", check=False)
    assert refused.returncode == 2 and "unrecognized arguments: --paired-streams" in refused.stderr
    assert set(got) == {("train", 256), ("train", 4096), ("infer", 256), ("infer", 4096)}
    for mode in ("train", "infer"):
        assert got[(mode, 4096)]["error"] == "OOM"
        assert "error" not in got[(mode, 256)] and got[(mode, 256)]["tokens_per_s"] > 0
    # the run went on after the first OOM (train 4096 comes before infer 256) and wrote its tables
    assert [(r["mode"], r["context"]) for r in rows].index(("infer", 256)) > \
        [(r["mode"], r["context"]) for r in rows].index(("train", 4096))
    assert "| 4096 | transformer_lm | OOM |" in (tmp_path / "train.md").read_text()


@pytest.mark.full
def test_bad_arm_is_one_line():
    proc = helpers.longmem_here("bench", "train", "--arms", "gpt5", check=False)
    assert proc.returncode == 2 and "unknown arm or mode gpt5" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.full
def test_generate_times_generation_apart_and_keeps_the_other_verbs_files(tmp_path, inline_workers, capsys):
    """bench generate at tiny sizes: every arm after every prompt, only the generated tokens
    timed (median ≥ min, ratio 1 at the shortest prompt), the incremental state's exact size
    (transformer_lm: 2 layers × keys and values × prompt × width fp32; the other two: the same
    at both prompts, which are whole numbers of ∞-former segments), ratios from the raw
    numbers, the table, its goal lines and the plot; the files of an earlier bench train in
    the same folder stay as they were."""
    earlier = {"train.md": b"train table\n", "train.json": b"{}\n", "train.png": b"png", "paired.md": b"paired\n"}
    for name, content in earlier.items():
        (tmp_path / name).write_bytes(content)
    _longmem(capsys, "bench", "generate", "--quick", "--prompts", "64,256", "--gen-tokens", "8", "--repeats", "4",
                    "--warmup", "1", "--threads", "1", "--out", tmp_path)
    rows = json.loads((tmp_path / "generate.json").read_text())["rows"]
    assert all(r["mode"] == "generate" for r in rows)
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
    table = (tmp_path / "generate.md").read_text()
    assert "| prompt | arm | ms / token (median) | ms / token (min) | ms ÷ own first |" in table
    assert "- infinite_former_lm, prompt 64 → 256: ms/token ×" in table and "goal: flat within ±15%" in table
    assert (tmp_path / "generate.png").stat().st_size > 10_000
    assert {name: (tmp_path / name).read_bytes() for name in earlier} == earlier


# ---- option checks (in-process) -----------------------------------------------------------------


def _bench(capsys, *args):
    try:
        status = cli.main(["bench", *args])
    except SystemExit as stop:  # argparse's own refusals
        status = stop.code
    return status, capsys.readouterr().err


def test_cpu_clock_needs_one_thread(capsys):
    """Idle threads of a pool spin and count as CPU time: --clock cpu is refused otherwise."""
    status, err = _bench(capsys, "train", "--clock", "cpu", "--threads", "2")
    assert status == 2 and "--clock cpu needs --threads 1" in err and "Traceback" not in err


def test_bad_paired_streams_is_one_line(capsys):
    for value in ("0", "1,x", ""):
        status, err = _bench(capsys, "paired", "--paired-streams", value)
        assert status == 2 and "--paired-streams must be positive integers" in err, err
        assert "Traceback" not in err


@pytest.mark.parametrize("args, needle", [
    (("generate", "--arms", "infinite_former_lm (LTM off)"), "unknown arm infinite_former_lm (LTM off)"),
    (("train", "--modes", "generate"), "unknown arm or mode generate"),
    (("train", "--windows", "128,x"), "--windows must be positive integers"),
    (("memory", "--repeats", "0"), "argument --repeats: must be a positive integer, got '0'"),
    (("paired", "--paired-segments", "1"), "--paired-segments must be at least 2"),
])
def test_bad_values_are_one_line_and_write_nothing(capsys, tmp_path, args, needle):
    status, err = _bench(capsys, *args, "--out", str(tmp_path))
    assert status == 2 and err.count("\n") == 1 and err.startswith("fairseq-longmem bench") and needle in err, err
    assert os.listdir(tmp_path) == []


@pytest.fixture
def no_workers(monkeypatch):
    """Every worker the command would start, recorded instead (none may start)."""
    calls = []
    monkeypatch.setattr(worker, "run", lambda function, args, timeout=None, **kwargs: calls.append(kwargs) or
                        {"error": "not run"})
    return calls


@pytest.mark.parametrize("args, needle", [
    (("paired", "--num-basis", "-3"), "argument --num-basis: must be a positive integer, got '-3'"),
    (("train", "--timeout", "0"), "argument --timeout: must be a positive number, got '0'"),
    (("train", "--timeout", "nan"), "argument --timeout: must be a positive number, got 'nan'"),
    (("train", "--warmup", "-1"), "argument --warmup: must be an integer >= 0, got '-1'"),
    (("generate", "--gen-tokens", "0"), "argument --gen-tokens: must be a positive integer, got '0'"),
    (("train", "--memory-limit-mb", "-64"), "argument --memory-limit-mb: must be a positive number, got '-64'"),
    (("memory", "--threads", "0"), "argument --threads: must be a positive integer, got '0'"),
    (("gpt2", "--segment", "0"), "argument --segment: must be a positive integer, got '0'"),
    (("train", "--width", "30", "--heads", "4"), "--heads 4 must divide --width 30 (every model splits its width "
                                                 "into heads); pass e.g. --width 32"),
    (("paired", "--width", "30", "--heads", "4"), "--heads 4 must divide --width 30"),
    (("memory", "--width", "30", "--heads", "4"), "--heads 4 must divide --width 30"),
    (("generate", "--vocab", "4"), "--vocab 4 leaves no token beside fairseq's 4 special symbols"),
    (("train", "--num-basis", "1", "--arms", "infinite_former_lm"),
     "infinite_former_lm refuses these sizes: --num-basis-functions must be a positive multiple of the number of "
     "basis widths (2), got 1 (--num-basis-functions is --num-basis here); change that option"),
    (("memory", "--num-basis", "1"), "the long-term memory layer refuses these sizes"),
])
def test_what_a_model_refuses_is_refused_before_measuring(capsys, tmp_path, no_workers, args, needle):
    """Bad sizes and counts are one line naming the option, exit status 2, before any worker starts
    (they used to run minutes of workers whose table rows were the models' exception texts, exit 0)."""
    status, err = _bench(capsys, *args, "--out", str(tmp_path / "out"))
    assert status == 2 and err.count("\n") == 1 and err.startswith("fairseq-longmem bench") and needle in err, err
    assert no_workers == [] and not (tmp_path / "out").exists()


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="CUDA is present: --device cuda is valid here")
@pytest.mark.parametrize("verb", ["train", "generate", "paired", "memory"])
def test_cuda_without_cuda_is_refused_before_measuring(capsys, tmp_path, no_workers, verb):
    status, err = _bench(capsys, verb, "--device", "cuda", "--out", str(tmp_path / "out"))
    assert status == 2 and err.count("\n") == 1 and "--device cuda, but torch sees no CUDA device here" in err, err
    assert "pass --device cpu" in err and no_workers == [] and not (tmp_path / "out").exists()


def test_a_failed_measurement_keeps_the_rows_and_exits_non_zero(capsys, tmp_path, monkeypatch):
    """A measurement that fails (not OOM, not a timeout: outcomes the row reads) makes the run exit 1
    with one line naming it; the other rows are written (nothing measured is lost)."""
    import subprocess

    real = subprocess.run

    def measured(cmd, **kw):  # the worker processes' ends
        if cmd[1:3] != ["-m", worker.PACKAGE.rstrip(".")]:
            return real(cmd, **kw)
        job = json.loads(cmd[-1])["kwargs"]
        if job.get("arm") == "fastformer_lm":
            return subprocess.CompletedProcess(cmd, 1, "", "Traceback ...\nRuntimeError: the kernel broke\n")
        if job.get("arm") == "transformer_lm" and job["context"] == 256:
            return subprocess.CompletedProcess(cmd, 1, "", "RuntimeError: CPU out of memory\n")
        return subprocess.CompletedProcess(cmd, 0, json.dumps({"tokens_per_s": 1000.0, "peak_mem_mb": 2.0, "batch": 1,
                                                               "params": 10}) + "\n", "")

    monkeypatch.setattr(worker.subprocess, "run", measured)
    status, err = _bench(capsys, "train", "--quick", "--modes", "infer", "--windows", "128,256", "--streams", "128",
                         "--arms", "transformer_lm,fastformer_lm", "--encoder-lengths", "", "--out", str(tmp_path))
    lines = err.strip().splitlines()
    assert status == 1 and len(lines) == 1, err
    assert lines[0].startswith("fairseq-longmem bench: error: 2 measurements failed (first: train mode infer, "
                               "context 128, arm fastformer_lm: RuntimeError: the kernel broke); their rows read the "
                               "error, the others are in ") and "Traceback" not in err, err
    rows = json.loads((tmp_path / "train.json").read_text())["rows"]
    assert [(r["arm"], r["context"], r.get("error")) for r in rows] == [
        ("transformer_lm", 128, None), ("fastformer_lm", 128, "RuntimeError: the kernel broke"),
        ("transformer_lm", 256, "OOM"), ("fastformer_lm", 256, "RuntimeError: the kernel broke")]


def test_out_that_is_a_file_is_refused_before_measuring(capsys, tmp_path):
    (tmp_path / "results").write_text("not a folder\n")
    status, err = _bench(capsys, "memory", "--out", str(tmp_path / "results"))
    assert status == 2 and "is a file; give a folder" in err
    assert (tmp_path / "results").read_text() == "not a folder\n"


def test_an_earlier_run_of_the_same_verb_is_replaced_only_with_force(capsys, tmp_path, monkeypatch):
    from fairseq_plugins.lab.bench import memory

    earlier = {"memory.md": b"memory table\n", "memory.json": b"{}\n", "train.md": b"train\n"}
    for name, content in earlier.items():
        (tmp_path / name).write_bytes(content)
    status, err = _bench(capsys, "memory", "--out", str(tmp_path))
    assert status == 2 and err.count("\n") == 1 and "memory.md" in err and "--force" in err, err
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == earlier
    monkeypatch.setattr(memory, "run", lambda args: report.Result("new table\n", {"rows": []}, [], "title"))
    status, _ = _bench(capsys, "memory", "--out", str(tmp_path), "--force")
    assert status == 0 and (tmp_path / "memory.md").read_text() == "new table\n"
    assert "--force" in json.loads((tmp_path / "memory.json").read_text())["provenance"]["command"]
    assert (tmp_path / "train.md").read_bytes() == earlier["train.md"]


def test_help_says_what_each_verb_writes(capsys):
    with pytest.raises(SystemExit):
        cli.main(["bench", "--help"])
    out = capsys.readouterr().out
    for verb in ("train", "generate", "paired", "memory"):
        assert f"OUT/{verb}.md" in out


# ---- files and tables (in-process) --------------------------------------------------------------


def test_cached_allocator_keeps_large_blocks_in_the_process():
    """--allocator cached (the benchmark's default) gives its workers glibc thresholds above the
    largest block a 64k-token row frees (the FFN's inner activation, 2**16 x 512 fp32 = 128 MiB),
    so that glibc keeps such blocks for reuse instead of returning them to the kernel; the
    system allocator leaves glibc's defaults. (The page faults this saves are the benchmark's to
    report: docs/benchmark.md.)"""
    largest = 2**16 * 512 * 4
    cached = allocator_environment("cached")
    assert int(cached["MALLOC_MMAP_THRESHOLD_"]) > largest
    assert int(cached["MALLOC_TRIM_THRESHOLD_"]) > largest
    assert allocator_environment("system") == {}


def test_generate_table_shows_a_row_that_was_not_run():
    """A prompt beyond --token-prefill-max is a row with its reason (the full run's 64k rows of
    transformer_lm and fastformer_lm), not a ValueError that loses the whole table."""
    done = {"context": 1024, "arm": "fastformer_lm", "ms_per_token": 3.05, "ms_per_token_min": 2.51,
            "ms_vs_first": 1.0, "state_mb": 0.0, "peak_mem_mb": 15.9, "prefill_s": 2.8, "prefill_peak_mb": 16.0,
            "gen_tokens": 128, "repeats": 7}
    skipped = {"context": 65536, "arm": "fastformer_lm",
               "error": "not run: token-by-token prompt > --token-prefill-max 16384"}
    table = "\n".join(generate.markdown_lines([done, skipped]))
    assert "| 1024 | fastformer_lm | 3.05 | 2.51 | 1.00 |" in table
    assert "| 65536 | fastformer_lm | not run: token-by-token prompt > --token-prefill-max 16384 |" in table


def _row(mode, context, arm, **values):
    return {"mode": mode, "context": context, "arm": arm, **values}


def test_a_verb_writes_only_its_own_files(tmp_path):
    """report.write: OUT/VERB.md, .json, .png of this verb; another verb's files untouched."""
    (tmp_path / "train.md").write_text("earlier train table\n")
    (tmp_path / "train.png").write_bytes(b"earlier plot")
    rows = [_row("generate", 64, "transformer_lm", ms_per_token=1.0, peak_mem_mb=4.0),
            _row("generate", 256, "transformer_lm", ms_per_token=1.5, peak_mem_mb=5.0)]
    result = report.Result("| table |\n", {"rows": rows}, generate.panels(rows))
    written = report.write(str(tmp_path), "generate", result)
    assert sorted(os.path.basename(p) for p in written) == ["generate.json", "generate.md", "generate.png"]
    assert json.loads((tmp_path / "generate.json").read_text()) == {"rows": rows}
    assert (tmp_path / "generate.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "train.md").read_text() == "earlier train table\n"
    assert (tmp_path / "train.png").read_bytes() == b"earlier plot"
    assert sorted(os.listdir(tmp_path)) == ["generate.json", "generate.md", "generate.png", "train.md", "train.png"]


def test_nothing_measured_draws_no_axes(tmp_path):
    """Panels without points are left out; with none left no plot is written, and a stale plot
    of the same verb (from an earlier run) is removed so that the files describe one run."""
    failed = [_row("train", 128, "transformer_lm", error="OOM"), _row("infer", 128, "transformer_lm", error="OOM")]
    assert report.plot_writer(train.panels(failed, [])) is None
    assert report.plot_writer(generate.panels([_row("generate", 64, "transformer_lm", error="OOM")])) is None
    (tmp_path / "train.png").write_bytes(b"stale plot")
    written = report.write(str(tmp_path), "train", report.Result("t\n", {"rows": failed}, train.panels(failed, [])))
    assert sorted(os.path.basename(p) for p in written) == ["train.json", "train.md"]
    assert sorted(os.listdir(tmp_path)) == ["train.json", "train.md"]


def test_train_plot_shows_what_was_measured():
    """--modes infer alone plots the forward rows (not empty training axes); the encoder's panel
    only when it has rows."""
    infer = [_row("infer", 128, "transformer_lm", tokens_per_s=10.0, peak_mem_mb=2.0),
             _row("infer", 256, "transformer_lm", tokens_per_s=9.0, peak_mem_mb=3.0)]
    panels = report._plotted(train.panels(infer, []))
    assert [p.ylabel for p in panels] == ["forward tokens/s", "forward peak MB"]
    assert panels[0].series == {"transformer_lm": [(128, 10.0), (256, 9.0)]}
    both = infer + [_row("train", 128, "transformer_lm", tokens_per_s=5.0, peak_mem_mb=9.0)]
    encoder = [_row("train", 1024, "summarizer encoder", tokens_per_s=7.0, peak_mem_mb=1.0)]
    panels = report._plotted(train.panels(both, encoder))
    assert [p.ylabel for p in panels] == ["training tokens/s", "training peak MB", "encoder tokens/s"]
    assert panels[1].series == {"transformer_lm": [(128, 9.0)]}
    assert panels[2].series == {"summarizer encoder (train)": [(1024, 7.0)]}


def test_a_failed_write_leaves_the_earlier_files(tmp_path, monkeypatch):
    """A plot that fails half-way: no file of the run is written, the earlier ones stay."""
    def failing_plot(path):
        with open(path, "wb") as f:
            f.write(b"half a plot")
        raise RuntimeError("the plot failed")

    monkeypatch.setattr(report, "plot_writer", lambda *args: failing_plot)
    (tmp_path / "train.md").write_text("earlier\n")
    with pytest.raises(RuntimeError, match="the plot failed"):
        report.write(str(tmp_path), "train", report.Result("new\n", {"rows": []}))
    assert sorted(os.listdir(tmp_path)) == ["train.md"] and (tmp_path / "train.md").read_text() == "earlier\n"


def test_paired_stream_counts():
    """1 stream, and tokens per step ÷ segment when that is more than one; an explicit list wins."""
    from fairseq_plugins.lab.bench.paired import stream_counts

    assert stream_counts(None, None, 64) == [1]
    assert stream_counts(None, 128, 64) == [1, 2]
    assert stream_counts(None, 64, 64) == [1]
    assert stream_counts("3,5", 128, 64) == [3, 5]
    for bad in ("0", "1,x", ""):
        with pytest.raises(ValueError):
            stream_counts(bad, None, 64)
