"""``fairseq-longmem sorting plot``: the values it plots come from the run's files.

References: a hand-written ``results.json`` and fairseq-style ``train_inner`` log lines whose
numbers the test chose.
"""

import json

import pytest

from fairseq_plugins.cli import main as cli_main
from fairseq_plugins.lab.sorting import plot as sorting_plot
from fairseq_plugins.errors import ConfigError

LINE = ("2026-12-01 23:01:01 | INFO | train_inner | epoch 001:    {u} / 6018 loss={v}, nll_loss={v}, kl=1.5, "
        "ppl=21.03, wps=61.2, ups=3.19, wpb=19.2, bsz=16, num_updates={u}, lr=0.002, gnorm=0.025\n")


def _runs(tmp_path):
    accuracy = {"512": {"infinite_former": 0.5, "memory_off": 0.3, "window_count_baseline": 0.35,
                        "receptive_field_baseline": 0.4, "chance": 0.05, "chance_no_repeat": 0.18},
                # a length scored before the receptive field was recorded: its line skips it
                "1024": {"infinite_former": 0.45, "window_count_baseline": 0.3, "receptive_field_baseline": None,
                         "chance": 0.05, "chance_no_repeat": 0.18}}
    (tmp_path / "results.json").write_text(json.dumps({"accuracy": accuracy, "runs": []}))
    for arm, values in (("infinite_former", [4.3, 3.1]), ("memory_off", [4.4, 3.5])):
        d = tmp_path / "T512" / arm
        d.mkdir(parents=True)
        text = "train.sh: THREADS=1\n" + "".join(LINE.format(u=50 * (i + 1), v=v) for i, v in enumerate(values))
        text += "2026-12-01 23:05:00 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 3.0 | nll_loss 3.0\n"
        (d / "train.log").write_text(text)
    return tmp_path


def test_curves_and_results_are_the_files_numbers(tmp_path):
    runs = _runs(tmp_path)
    assert sorting_plot.curves(str(runs)) == {512: {"infinite_former": [(50, 4.3), (100, 3.1)],
                                                    "memory_off": [(50, 4.4), (100, 3.5)]}}
    results = sorting_plot.read_results(str(runs))
    assert results[512]["infinite_former"] == 0.5 and results[512]["full_count"] == 1.0
    assert sorting_plot._arms(results[512]) == ["infinite_former", "memory_off"]


def test_command_writes_both_plots(tmp_path, capsys):
    runs = _runs(tmp_path)
    assert cli_main(["sorting", "plot", str(runs)]) == 0
    for name in ("accuracy.png", "curves.png"):
        assert (runs / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in runs.iterdir()) == ["T512", "accuracy.png", "curves.png", "results.json"]


def test_a_folder_without_results_is_one_line(tmp_path, capsys):
    assert cli_main(["sorting", "plot", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("fairseq-longmem sorting plot: error: ") and "results.json" in err[0]
    with pytest.raises(ConfigError):
        sorting_plot.read_results(str(tmp_path))


def test_table_and_score_refuse_in_one_line_and_write_nothing(tmp_path, capsys):
    assert cli_main(["sorting", "table", str(tmp_path)]) == 2
    assert cli_main(["sorting", "score", "--checkpoint", str(tmp_path / "none.pt"), "--data", str(tmp_path)]) == 2
    assert cli_main(["sorting", "score", "--checkpoint", "a.pt", "b.pt", "--data", str(tmp_path),
                     "--json", str(tmp_path / "a.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert [line.split(": error: ")[0] for line in err] == ["fairseq-longmem sorting table"] + \
        ["fairseq-longmem sorting score"] * 2
    assert "accuracy.json" in err[0] and "none.pt not found" in err[1] and "2 checkpoints but 1 --json" in err[2]
    assert list(tmp_path.iterdir()) == []


def test_the_reference_lines_are_the_results_numbers(tmp_path, monkeypatch):
    runs = _runs(tmp_path)
    drawn = {}

    def keep(fig, path):
        import matplotlib.pyplot as plt

        drawn.update({line.get_label(): (list(line.get_xdata()), list(line.get_ydata()))
                      for line in fig.axes[0].get_lines()})
        plt.close(fig)

    monkeypatch.setattr(sorting_plot, "_save", keep)
    sorting_plot.plot_accuracy(sorting_plot.read_results(str(runs)), str(tmp_path / "accuracy.png"))
    assert drawn["window count baseline"] == ([512, 1024], [0.35, 0.3])
    assert drawn["receptive-field baseline"] == ([512], [0.4])  # the length without one is skipped
    assert drawn["infinite_former"] == ([512, 1024], [0.5, 0.45]) and drawn["memory_off"] == ([512], [0.3])
