"""``fairseq-longmem sorting table``: arms, training seeds and the memory-wiped control.

References: hand-written ``accuracy.json`` files whose numbers the test chose, the t-interval
computed here from scipy's t quantile, and fairseq-style log lines for the curves.
"""

import json
import math

import pytest
from scipy import stats

from fairseq_plugins.cli import main as cli_main
from fairseq_plugins.errors import ConfigError
from fairseq_plugins.lab.sorting import plot as sorting_plot
from fairseq_plugins.lab.sorting import table as sorting_table

REFS = {"chance": 0.125, "chance_no_repeat": 0.34}


def _write(path, arm, acc, baseline, window, symbols=8, wiped=False, length=512, params=1000, reach=None):
    """``reach``: ``(receptive-field baseline, its window)``; ``None`` writes a file scored before
    that reference was recorded."""
    path.parent.mkdir(parents=True, exist_ok=True)
    reach_fields = {} if reach is None else {"receptive_field_baseline": reach[0],
                                             "receptive_field_baseline_window": reach[1]}
    path.write_text(json.dumps({"arm": arm, "length": length, "accuracy": acc, "symbols": symbols,
                                "memory_wiped": wiped, "window_count_baseline": baseline,
                                "window_count_baseline_window": window, "parameters": params, **reach_fields,
                                **REFS}))


def _seeded(tmp_path):
    values = {"infinite_former": [0.6, 0.7, 0.65], "memory_off": [0.5, 0.52, 0.49]}
    for i, seed in enumerate((1, 2, 3)):
        for arm, accs in values.items():
            d = tmp_path / f"seed{seed}" / "T512" / arm
            _write(d / "accuracy.json", arm, accs[i], 0.55, [33] * 8, reach=(0.58, [65] * 8))
        _write(tmp_path / f"seed{seed}" / "T512" / "infinite_former" / "accuracy-wiped.json", "infinite_former",
               [0.3, 0.32, 0.31][i], 0.55, [33] * 8, wiped=True, reach=(0.58, [65] * 8))
        _write(tmp_path / f"seed{seed}" / "T512" / "transformer_lm" / "accuracy.json", "transformer_lm",
               [0.4, 0.42, 0.41][i], 0.6, [63 - k for k in range(8)], reach=(0.6, [63 - k for k in range(8)]))
        # the matched twin's checkpoint says memory_off: its folder names it
        _write(tmp_path / f"seed{seed}" / "T512" / "memory_off_matched" / "accuracy.json", "memory_off",
               [0.51, 0.53, 0.5][i], 0.55, [33] * 8, reach=(0.58, [65] * 8))
    return values


def _interval(values):
    n = len(values)
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = stats.t.ppf(0.975, n - 1) * sd / math.sqrt(n)
    return mean, mean - half, mean + half


def test_seeds_and_the_wiped_control_are_gathered(tmp_path, capsys):
    values = _seeded(tmp_path)
    summary = sorting_table.summarize(str(tmp_path))
    labels = [r["label"] for r in summary["rows"]]
    assert labels == ["infinite_former", "infinite_former, memory wiped", "memory_off", "memory_off_matched",
                      "transformer_lm"]
    assert summary["rows"][3]["per_seed"] == {"1": 0.51, "2": 0.53, "3": 0.5}
    row = summary["rows"][0]
    assert row["seeds"] == ["1", "2", "3"] and row["per_seed"] == dict(zip(["1", "2", "3"], values["infinite_former"]))
    for got, want in zip((row["mean"], row["low"], row["high"]), _interval(values["infinite_former"])):
        assert got == pytest.approx(want, abs=1e-12)
    assert summary["rows"][4]["window_count_baseline"] == 0.6 and summary["rows"][0]["window_count_baseline"] == 0.55
    assert cli_main(["sorting", "table", str(tmp_path)]) == 0
    md = capsys.readouterr().out
    assert md == (tmp_path / "results.md").read_text()
    mean, low, high = _interval([0.3, 0.32, 0.31])
    assert (f"| 512 | 8 | infinite_former, memory wiped | 1,2,3 | {mean:.3f} [{low:.3f}, {high:.3f}] | "
            "0.300 / 0.320 / 0.310 | 33 | 0.550 | 65 | 0.580 | 0.340 | 0.125 | 1,000 |") in md
    assert "| 512 | 8 | transformer_lm | 1,2,3 | 0.410 [" in md and "| 56–63 | 0.600 | 56–63 | 0.600 |" in md
    saved = json.loads((tmp_path / "results.json").read_text())
    # the plot's view: each label's mean, the references of the memory arms' window
    assert saved["accuracy"]["512"]["memory_off"] == pytest.approx(sum(values["memory_off"]) / 3)
    assert saved["accuracy"]["512"]["window_count_baseline"] == 0.55
    assert saved["accuracy"]["512"]["receptive_field_baseline"] == 0.58
    assert summary["rows"][0]["receptive_field_baseline_window"] == [65] * 8
    assert sorting_plot.read_symbols(str(tmp_path)) == 8


def test_one_run_without_seed_folders(tmp_path, capsys):
    _write(tmp_path / "T64" / "infinite_former" / "accuracy.json", "infinite_former", 0.25, 0.35, [33] * 20,
           symbols=20, length=64, params=118080)
    _write(tmp_path / "T64" / "transformer_lm" / "accuracy.json", "transformer_lm", 0.1, 0.36, 63, symbols=20,
           length=64, params=68672)
    assert cli_main(["sorting", "table", str(tmp_path)]) == 0
    md = capsys.readouterr().out
    # files scored before the receptive field was recorded: those columns empty
    assert ("| 64 | 20 | infinite_former | – | 0.250 | 0.250 | 33 | 0.350 | – | – | 0.340 | 0.125 | "
            "118,080 |") in md
    assert "| 64 | 20 | transformer_lm | – | 0.100 | 0.100 | 63 | 0.360 | – | – |" in md
    assert json.loads((tmp_path / "results.json").read_text())["accuracy"]["64"]["infinite_former"] == 0.25


def test_two_alphabets_in_one_folder_are_refused(tmp_path, capsys):
    _write(tmp_path / "seed1" / "T512" / "memory_off" / "accuracy.json", "memory_off", 0.5, 0.55, [33] * 8)
    _write(tmp_path / "seed2" / "T512" / "memory_off" / "accuracy.json", "memory_off", 0.3, 0.35, [33] * 20,
           symbols=20)
    with pytest.raises(ConfigError, match="alphabets of \\[8, 20\\] symbols"):
        sorting_table.collect(str(tmp_path))
    assert cli_main(["sorting", "table", str(tmp_path)]) == 2
    assert capsys.readouterr().err.count("\n") == 1 and not (tmp_path / "results.md").exists()


def test_curves_of_every_seed(tmp_path):
    line = ("2026-12-01 23:01:01 | INFO | train_inner | epoch 001:    {u} / 6018 loss={v}, nll_loss={v}, "
            "num_updates={u}, lr=0.002\n")
    for seed, v in ((1, 2.5), (2, 2.25)):
        d = tmp_path / f"seed{seed}" / "T512" / "infinite_former"
        d.mkdir(parents=True)
        (d / "train.log").write_text(line.format(u=50, v=v))
    assert sorting_plot.curves(str(tmp_path)) == {512: {"infinite_former, seed 1": [(50, 2.5)],
                                                        "infinite_former, seed 2": [(50, 2.25)]}}
    assert sorting_plot.uniform_bits(8) == (3.0, pytest.approx(math.log2(math.factorial(8)) / 8))


def test_a_run_without_seeds_beside_seed_folders_is_refused(tmp_path, capsys):
    _write(tmp_path / "T512" / "memory_off" / "accuracy.json", "memory_off", 0.5, 0.55, [33] * 8)
    _write(tmp_path / "seed2" / "T512" / "memory_off" / "accuracy.json", "memory_off", 0.3, 0.55, [33] * 8)
    _write(tmp_path / "seedX" / "T512" / "memory_off" / "accuracy.json", "memory_off", 0.9, 0.55, [33] * 8)
    assert cli_main(["sorting", "table", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "separate --out" in err and not (tmp_path / "results.md").exists()
    (tmp_path / "T512" / "memory_off" / "accuracy.json").unlink()
    summary = sorting_table.summarize(str(tmp_path))  # seedX is not a seed folder
    assert [(r["seeds"], r["mean"]) for r in summary["rows"]] == [(["2"], 0.3)]
