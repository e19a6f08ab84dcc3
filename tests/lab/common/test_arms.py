"""fairseq_plugins.lab.common.arms (the registry of experiment arms) and the results-table writer (fairseq_plugins.lab.common.table).

The expected command lines are the ones scripts/train.sh, train-summarizer.sh and gpu-checks.sh
wrote out by hand before the registry (copied from their output with fairseq-train stubbed by
`echo`), so a change to the registry that changes a command shows here.
"""
import json
import os

import pytest
import torch

import helpers
from helpers import ROOT as REPO

from fairseq_plugins.errors import ConfigError  # noqa: E402
from fairseq_plugins.lab.common import arms  # noqa: E402
from fairseq_plugins.lab.common import table as results_table  # noqa: E402

OLD_TRANSFORMER_LM = [
    "--task", "language_modeling", "--arch", "transformer_lm", "--criterion", "cross_entropy",
    "--sample-break-mode", "none", "--decoder-normalize-before", "--decoder-input-dim", "128",
    "--decoder-output-dim", "128", "--tokens-per-sample", "128", "--batch-size", "8", "--decoder-layers", "2",
    "--decoder-embed-dim", "128", "--decoder-attention-heads", "4", "--decoder-ffn-embed-dim", "512",
    "--share-decoder-input-output-embed", "--dropout", "0.1", "--optimizer", "adam", "--adam-betas", "(0.9, 0.98)",
    "--clip-norm", "1.0", "--lr", "0.002", "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "100",
    "--max-update", "600", "--seed", "1", "--save-dir", "save", "--no-epoch-checkpoints",
    "--validate-interval-updates", "600", "--log-format", "simple", "--log-interval", "50",
    "--required-batch-size-multiple", "1", "--cpu"]
OLD_INFINITE_SUMMARIZER = [
    "--user-dir", "/r/fairseq_plugins", "--arch", "infinite_former_summarizer", "--criterion", "infinite_former_kl",
    "--encoder-chunk-length", "256", "--lead-window", "256", "--num-basis-functions", "256", "--encoder-layers", "2",
    "--decoder-layers", "2", "--encoder-embed-dim", "128", "--decoder-embed-dim", "128",
    "--encoder-attention-heads", "4", "--decoder-attention-heads", "4", "--encoder-ffn-embed-dim", "512",
    "--decoder-ffn-embed-dim", "512", "--share-all-embeddings", "--task", "translation", "--source-lang", "source",
    "--target-lang", "target", "--max-source-positions", "131072", "--max-target-positions", "1280",
    "--dropout", "0.1", "--batch-size", "2", "--required-batch-size-multiple", "1", "--optimizer", "adam",
    "--adam-betas", "(0.9, 0.98)", "--clip-norm", "1.0", "--lr", "0.001", "--lr-scheduler", "inverse_sqrt",
    "--warmup-updates", "100", "--max-update", "800", "--seed", "1", "--save-dir", "save", "--no-epoch-checkpoints",
    "--validate-interval", "1000000", "--validate-interval-updates", "800", "--log-format", "simple",
    "--log-interval", "10", "--cpu"]


PLUGIN = ["--user-dir", "/r/fairseq_plugins"]


def test_train_commands_are_the_hand_written_ones():
    # every arm loads the plugin (fairseq's own transformer_lm and transformer too: its checks and the
    # torch.load allow-list); fairseq-longmem passes --user-dir itself, so the options it runs lack it
    assert arms.train_args("lm", "transformer_lm", "/r", "save", cpu=True, env={}) == PLUGIN + OLD_TRANSFORMER_LM
    assert arms.train_options("lm", "transformer_lm", "save", cpu=True, env={}) == OLD_TRANSFORMER_LM
    assert arms.train_args("summarization", "infinite_former", "/r", "save", cpu=True, env={}) \
        == OLD_INFINITE_SUMMARIZER
    assert arms.train_options("summarization", "infinite_former", "save", cpu=True, env={}) \
        == OLD_INFINITE_SUMMARIZER[2:]
    transformer = arms.train_args("summarization", "transformer", "/r", "save", cpu=True, env={})
    assert transformer[:2] == PLUGIN and transformer[2:6] == ["--arch", "transformer", "--criterion", "cross_entropy"]
    # memory_off = infinite_former + --no-long-term-memory at the end; sorting adds its options after it
    inf = arms.train_args("lm", "infinite_former", "/r", "s", cpu=False, env={"SEGMENT": "32"})
    assert arms.train_args("lm", "memory_off", "/r", "s", cpu=False, env={"SEGMENT": "32"}) == \
        inf + ["--no-long-term-memory"]
    assert inf[inf.index("--mem-len") + 1] == "32"
    assert arms.job("sorting").extra(arms.job("sorting").arm("transformer_lm")) == \
        ["--validate-interval", "1000000", "--save-interval", "1000000", "--loss-after-symbol", "sep"]
    # sorting's transformer_lm: the lm job's command with the plugin's criterion (for the answer-only loss)
    lm = arms.train_args("lm", "transformer_lm", "/r", "s", cpu=True, env={})
    sort = arms.train_args("sorting", "transformer_lm", "/r", "s", cpu=True, env={})
    assert sort[:2] == PLUGIN
    assert sort[sort.index("--criterion") + 1] == "infinite_former_kl" and "cross_entropy" not in sort
    extra = arms.job("sorting").extra(arms.job("sorting").arm("transformer_lm"))
    assert sort[-len(extra):] == extra
    assert sort[:sort.index("--criterion")] == lm[:lm.index("--criterion")]


def test_eval_commands():
    # what scripts/evaluate.sh ran for each kind of arm (fairseq-eval-lm, DATA first)
    assert arms.eval_options("lm", "infinite_former", "c.pt", cpu=True, env={"STREAMS": "2"}) == [
        "--task", "streaming_lm", "--path", "c.pt", "--gen-subset", "test", "--tokens-per-sample", "64",
        "--batch-size", "2", "--log-format", "simple", "--log-interval", "1000", "--cpu"]
    assert arms.eval_args("lm", "transformer_lm", "/r", "c.pt", cpu=False, env={}) == PLUGIN + [
        "--task", "language_modeling", "--path", "c.pt", "--gen-subset", "test", "--sample-break-mode", "none",
        "--tokens-per-sample", "128", "--context-window", "64", "--batch-size", "16", "--log-format", "simple",
        "--log-interval", "1000"]
    with pytest.raises(ConfigError, match="job 'summarization' has no fairseq-eval-lm command"):
        arms.eval_options("summarization", "transformer", "c.pt", cpu=True)


def test_precision_models_are_gpu_checks_old_lists():
    small = ["--decoder-embed-dim", "64", "--decoder-attention-heads", "4", "--decoder-ffn-embed-dim", "128"]
    old = {
        "infinite_former_lm": ["--task", "streaming_lm", "--arch", "infinite_former_lm",
                               "--criterion", "infinite_former_kl", "--tokens-per-sample", "32", "--batch-size", "8",
                               "--num-basis-functions", "32", "--num-samples", "32", *small],
        "fastformer_lm": ["--task", "language_modeling", "--arch", "fastformer_lm_tiny",
                          "--tokens-per-sample", "128", "--sample-break-mode", "none", "--batch-size", "8", *small],
        "fastformer_tiny": ["--task", "translation", "--arch", "fastformer_tiny", "--batch-size", "16",
                            "--encoder-embed-dim", "64", "--encoder-attention-heads", "4",
                            "--encoder-ffn-embed-dim", "128", *small],
    }
    assert {name: arms.train_args("precision", name, "", "", False) for name in arms.names("precision")} == old


def test_names_budget_and_errors():
    assert arms.names("lm") == ["infinite_former", "memory_off", "infinite_former_evicted",
                                "infinite_former_no_sticky", "memory_off_matched", "compressive",
                                "infinite_former_mixture", "transformer_lm", "fastformer_lm"]
    # the registry answers which arms read a memory (the recipes score those with it wiped too)
    assert [a for a in arms.names("lm") if arms.get_arm("lm", a).has_memory] == [
        "infinite_former", "infinite_former_evicted", "infinite_former_no_sticky", "compressive",
        "infinite_former_mixture"]
    assert arms.names("lm", default_only=True) == ["infinite_former", "memory_off", "transformer_lm"]
    assert arms.names("summarization") == ["infinite_former", "infinite_former_lead_only", "fastformer", "transformer"]
    assert arms.names("summarization", default_only=True) == ["infinite_former", "fastformer", "transformer"]
    assert arms.names("benchmark")[-1] == "infinite_former_lm (LTM off)"
    assert arms.budget("summarization", {"LAYERS": "", "LR": ""})["LAYERS"] == "2"  # empty = unset
    # the summarizer's sizes, counts and limits positive; no lead window and no dropout are settings
    for name in ("LAYERS", "DOCS", "MAX_UPDATE", "CHUNK", "NUM_BASIS", "MAX_TARGET", "INF_MAX_SOURCE"):
        with pytest.raises(ConfigError, match=f"{name} must be a positive integer, not '0'"):
            arms.budget("summarization", {name: "0"})
    assert arms.budget("summarization", {"LEAD_WINDOW": "0", "DROPOUT": "0", "SEED": "0"})["LEAD_WINDOW"] == "0"
    # a decimal variable is a finite number, positive where 0 means nothing (LR)
    for job in ("lm", "summarization", "mqar"):
        for bad in ("x", "nan", "inf", "-0.1", "0"):
            with pytest.raises(ConfigError, match=rf"LR must be a positive number \(e.g. 0.\d+\), not '{bad}'"):
                arms.budget(job, {"LR": bad})
        assert arms.budget(job, {"LR": "3e-4"})["LR"] == "3e-4"
    with pytest.raises(ConfigError, match="DROPOUT must be a non-negative number"):
        arms.budget("summarization", {"DROPOUT": "-1"})
    # the list of jobs keeps its order whichever experiments' jobs were built before
    with pytest.raises(ConfigError, match=r"unknown job 'x' \(lm, benchmark, precision, sorting, recall, "
                                          r"summarization, mqar\)"):
        arms.job("mqar") and arms.job("x")
    with pytest.raises(ConfigError, match="LAYERS must be a non-negative integer, not 'x'"):
        arms.budget("summarization", {"LAYERS": "x"})
    # every job's budget: sizes, counts and MAX_UPDATE positive (fairseq reads --max-update 0 as no
    # limit), SEED and WARMUP non-negative
    for job in ("lm", "recall", "sorting", "mqar"):
        with pytest.raises(ConfigError, match="MAX_UPDATE must be a non-negative integer, not '-3'"):
            arms.budget(job, {"MAX_UPDATE": "-3"})
        for name in ("STREAMS", "SEGMENT", "LAYERS", "MAX_UPDATE"):
            with pytest.raises(ConfigError, match=f"{name} must be a positive integer, not '0'"):
                arms.budget(job, {name: "0"})
        assert arms.budget(job, {"SEED": "0", "WARMUP": "0"})["SEED"] == "0"
        assert arms.budget(job, {"LR": "0.01"})["LR"] == "0.01"
    with pytest.raises(ConfigError, match=r"unknown ARM 'gpt' \(infinite_former, memory_off, infinite_former_evicted, "
                                          r"infinite_former_no_sticky, memory_off_matched, compressive, "
                                          r"infinite_former_mixture, transformer_lm or fastformer_lm\)"):
        arms.get_arm("lm", "gpt")


@pytest.mark.full
def test_cli_prints_one_argument_per_line_and_one_error_line(tmp_path):
    def cli(*args, **env):  # fairseq-longmem arms ARGS with the budget variables env
        return helpers.longmem("arms", *args, check=False, extra_env=env)
    proc = cli("train-args", "lm", "transformer_lm", "--root", "/r", "--save-dir", "save", "--cpu",
               LAYERS="", WIDTH="", HEADS="", FFN="", SEGMENT="", STREAMS="", MAX_UPDATE="", LR="", WARMUP="",
               NUM_BASIS="", SEED="")
    assert proc.returncode == 0 and proc.stdout.splitlines() == PLUGIN + OLD_TRANSFORMER_LM
    proc = cli("eval-args", "lm", "memory_off", "--checkpoint", "c.pt")  # --root: this checkout
    assert proc.stdout.splitlines()[:2] == ["--user-dir", os.path.join(REPO, "fairseq_plugins")]
    proc = cli("check", "sorting", "--arms=infinite_former fastformer_lm", "--prog", "sorting.sh")
    assert proc.returncode == 2 and proc.stderr == (
        "sorting.sh: error: unknown arm 'fastformer_lm' (infinite_former, memory_off, infinite_former_evicted, "
        "infinite_former_no_sticky, memory_off_matched, compressive, infinite_former_mixture or transformer_lm)\n")
    proc = cli("list", "summarization", "--join", "comma")
    assert proc.stdout == "infinite_former, infinite_former_lead_only, fastformer, transformer\n"
    proc = cli("get", "summarization", "fastformer", "label", FASTFORMER_MAX_SOURCE="2048")
    assert proc.stdout == "fastformer (source cut at 2048)\n"
    proc = cli("get", "lm", "infinite_former", "label")  # no label of its own: its name
    assert proc.stdout == "infinite_former\n"


def test_results_table_cells():
    cols = [results_table.Column("a", "A"), results_table.Column("x", "X", ".2f", align="---:", missing="–")]
    rows = [{"a": "p|q", "x": 1.234}, {"a": ""}, {"a": "r", "x": "OOM"}]
    assert results_table.markdown(rows, cols) == "| A | X |\n|---|---:|\n| p|q | 1.23 |\n| | – |\n| r | OOM |"
    assert results_table.markdown(rows[:1], cols, escape=True).endswith("| p\\|q | 1.23 |")
    assert results_table.markdown(rows[1:2], cols, pad_empty=True).endswith("|  | – |")
    with pytest.raises(ConfigError, match="exists"):
        results_table.write_files(__file__, "x", force=False)


@pytest.mark.full
def test_fairseqs_transformer_summarizer_resumes_with_a_larger_max_update(tmp_path):
    """train-summarizer.sh transformer run again with a larger MAX_UPDATE continues from its
    checkpoint (fairseq's own argparse-configured model: the plugin's torch.load allow-list)."""
    data, save = tmp_path / "data", tmp_path / "transformer"
    helpers.run(["bash", "data-prep/prepare-summarization.sh", "--corpus", "source-target", "--input",
                 os.path.join(REPO, "tests", "fixtures", "summarization", "source_target"), "--out", data,
                 "--vocab-size", "150", "--workers", "1"])
    tiny = {"LAYERS": "1", "WIDTH": "32", "HEADS": "2", "FFN": "64", "DOCS": "4", "WARMUP": "1", "MAX_TARGET": "128",
            "TRANSFORMER_MAX_SOURCE": "48"}
    command = ["bash", "scripts/train-summarizer.sh", "transformer", data / "bin", save]
    first = helpers.run(command, extra_env={**tiny, "MAX_UPDATE": "2"})
    assert "num_updates 2" in first.stdout + first.stderr
    # run again at the same budget: a finished arm is left as it is, and the run says so
    before = (save / "checkpoint_last.pt").read_bytes()
    again = helpers.run(command, extra_env={**tiny, "MAX_UPDATE": "2"})
    assert "transformer is trained" in again.stderr and "at update 2 of --max-update 2" in again.stderr, again.stderr
    assert "Loaded checkpoint" not in again.stdout + again.stderr
    assert (save / "checkpoint_last.pt").read_bytes() == before
    second = helpers.run(command, extra_env={**tiny, "MAX_UPDATE": "4"})
    log = second.stdout + second.stderr
    assert "Loaded checkpoint" in log and "(epoch 1 @ 2 updates)" in log, log[-3000:]
    assert "num_updates 4" in log and "Traceback" not in log
    state = torch.load(save / "checkpoint_last.pt", map_location="cpu", weights_only=False)
    assert state["optimizer_history"][-1]["num_updates"] == 4


def test_lm_results_table_is_the_logs_numbers(tmp_path, capsys):
    """``fairseq-longmem results lm``: the numbers of hand-written fairseq log lines, in the table."""
    from fairseq_plugins.cli import main as cli_main

    arm = tmp_path / "infinite_former"
    arm.mkdir()
    (arm / "train.log").write_text(
        "2026-12-01 11:51:05 | INFO | train_inner | epoch 001:  50 / 139 loss=9.1, num_updates=50, lr=0.001\n"
        "2026-12-01 11:51:09 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 8.2 | ppl 294.07 | "
        "num_updates 600\n")
    (arm / "eval.log").write_text("2026-12-01 | INFO | fairseq_cli.eval_lm | num. model params: 1,234,567\n"
                                  "INFO:fairseq_cli.eval_lm:Evaluated 45,678 tokens in 1.0s (45678.00 tokens/s)\n"
                                  "INFO:fairseq_cli.eval_lm:Loss (base 2): 8.0766, Perplexity: 270.23\n")
    (arm / "seconds").write_text("300 12\n")
    assert cli_main(["results", "lm", str(tmp_path), "infinite_former"]) == 0
    table = ("| arm | test ppl (fairseq-eval-lm) | valid ppl | params | updates | test tokens | train s | eval s |\n"
             "|---|---|---|---|---|---|---|---|\n"
             "| infinite_former | 270.23 | 294.07 | 1,234,567 | 600 | 45,678 | 300 | 12 |\n")
    assert capsys.readouterr().out == table == (tmp_path / "results.md").read_text()
    row = json.loads((tmp_path / "results.json").read_text())[0]
    assert row["test_loss_bits"] == 8.0766 and row["params"] == 1234567.0
    # an arm without logs: one line, nothing written
    (tmp_path / "results.md").unlink()
    assert cli_main(["results", "lm", str(tmp_path), "infinite_former", "memory_off"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("fairseq-longmem results lm: error: ") and "memory_off" in err[0]
    assert not (tmp_path / "results.md").exists()


def test_a_save_folder_of_another_model_is_named():
    """arms train into a folder whose checkpoint is another model's: the differences are named
    (fairseq would otherwise stop in a state_dict mismatch, or a finished run be taken for this one)."""
    from fairseq_plugins.lab.common.arms_cli import _model_differences

    saved = {"_name": "compressive_transformer_lm", "decoder_embed_dim": 128, "decoder_layers": 2, "dropout": 0.1}
    assert _model_differences(saved, "compressive_transformer_lm", ["--decoder-embed-dim", "128", "--seed", "1"]) == []
    assert _model_differences(saved, "transformer_lm", ["--decoder-embed-dim", "64", "--decoder-layers", "2"]) == [
        "--arch compressive_transformer_lm, not transformer_lm", "--decoder-embed-dim 128, not 64"]
    assert _model_differences({}, "transformer", ["--decoder-layers", "3"]) == []  # an argparse config: unknown


def test_a_checkpoints_arm_is_the_most_specific_match():
    """A checkpoint's model config names its LM arm: the memory read picks the mixture arm over
    the paper's, an older config without the read or the flag is the paper's arm."""
    from types import SimpleNamespace as Config

    arch = "infinite_former_lm"
    assert arms.arm_of_model("lm", arch, Config(no_long_term_memory=False, memory_read="mixture")) \
        == "infinite_former_mixture"
    assert arms.arm_of_model("lm", arch, Config(no_long_term_memory=False, memory_read="location")) \
        == "infinite_former"
    assert arms.arm_of_model("lm", arch, Config()) == "infinite_former"
    assert arms.arm_of_model("lm", arch, Config(no_long_term_memory=True, memory_read="mixture")) == "memory_off"
    assert arms.arm_of_model("lm", "transformer_lm", Config()) == "transformer_lm"
    assert arms.arm_of_model("lm", "no_such_arch", Config()) is None
