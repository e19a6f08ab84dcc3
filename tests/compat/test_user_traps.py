"""What a new user runs into with the fairseq CLIs, through the real tools on tiny models:
evaluation lengths a model cannot honour, refusals that must come before any output, messages
that must name what the user passed, fairseq's own models next to the plugin (every example
generated, checkpoints resumed), prompts that fairseq-interactive would not continue. Each case
ends in one line ``fairseq_plugins: error: ...`` (or does what was asked), never a traceback."""

import os
import re

import pytest
import torch

from helpers import BIN, ROOT, USER_DIR, fairseq, one_line_error, run
from test_inference_traps import SMALL, data, ok, preprocess, train, work  # noqa: F401  (fixtures)


LM32 = ["--task", "language_modeling", "--tokens-per-sample", "32", "--sample-break-mode", "none",
        "--batch-size", "4", *SMALL]


@pytest.fixture(scope="module")
def learned_fastformer(work, data):
    """fastformer_lm with learned positions, trained on blocks of 32 tokens (max_positions 32)."""
    return train(data, work / "ff_learned", "--arch", "fastformer_lm", *LM32, "--decoder-learned-pos")


@pytest.fixture(scope="module")
def transformer_lm(work, data):
    """fairseq's own transformer_lm, trained on blocks of 32 tokens (max_positions 32)."""
    return train(data, work / "tlm", "--arch", "transformer_lm", *LM32)


# ---- a model's position table: the same one line under both tasks -------------------------------


@pytest.mark.full
@pytest.mark.parametrize("task", [["--task", "streaming_lm"], ["--task", "language_modeling"]])
def test_learned_positions_refuse_longer_segments_under_both_tasks(data, learned_fastformer, task):
    proc = fairseq("fairseq-eval-lm", data, "--path", learned_fastformer, "--batch-size", "4",
                   "--tokens-per-sample", "64", *task, check=False)
    line = one_line_error(proc, "max_positions=32", "--tokens-per-sample 32")
    assert "IndexError" not in proc.stderr and "Perplexity" not in proc.stdout + proc.stderr
    assert "fairseq-eval-lm" in line


@pytest.mark.full
def test_a_transformer_lm_refusal_names_its_own_positions(data, transformer_lm):
    proc = fairseq("fairseq-eval-lm", data, "--path", transformer_lm, "--batch-size", "4", "--tokens-per-sample", "64",
                   "--task", "language_modeling", check=False)
    line = one_line_error(proc, "max_positions=32", "--tokens-per-sample 32")
    assert "fastformer" not in line and "--decoder-learned-pos" not in line, line


# ---- messages that name what the user passed ------------------------------------------------------


@pytest.mark.full
@pytest.mark.parametrize("tokens", ["32", "31"])
def test_context_window_under_streaming_lm_names_the_context_window(data, tokens):
    proc = fairseq("fairseq-eval-lm", data, "--task", "streaming_lm", "--path", "none.pt", "--batch-size", "2",
                   "--tokens-per-sample", tokens, "--context-window", "32", check=False)
    line = one_line_error(proc, "--context-window", "streaming_lm")
    assert "must be positive" not in line and "got 0" not in line, line


@pytest.mark.full
def test_context_window_as_long_as_the_block_is_refused_before_loading(data):
    # the checkpoint does not exist: the option check comes first
    proc = fairseq("fairseq-eval-lm", data, "--path", "none.pt", "--batch-size", "2", "--tokens-per-sample", "32",
                   "--context-window", "32", check=False)
    one_line_error(proc, "--context-window 32", "--tokens-per-sample 32")


@pytest.mark.full
@pytest.mark.parametrize("flags, needles, absent", [
    (["--bf16"], ["--bf16", "GPU"], "xla_device"),
    (["--fp16"], ["--fp16 needs a CUDA GPU", "a CPU trains in fp32"], "not compiled with CUDA"),
    (["--distributed-world-size", "2"], ["--distributed-world-size 2 without torchrun", "scripts/distributed-train.sh"],
     "Default process group"),
], ids=["bf16", "fp16", "own-launcher"])
def test_options_a_cpu_cannot_run_are_one_line(data, tmp_path, flags, needles, absent):
    """--bf16, --fp16 and fairseq-train's own multi-process launcher on a CPU: one line naming the
    option and the fix, not fairseq's later traceback, and no save folder."""
    proc = fairseq("fairseq-train", data, "--task", "language_modeling", "--arch", "transformer_lm", *SMALL, *flags,
                   "--optimizer", "adam", "--lr", "1e-3", "--max-update", "1", "--batch-size", "4",
                   "--save-dir", tmp_path / "ckpt", check=False)
    one_line_error(proc, *needles)
    assert absent not in proc.stderr
    assert not (tmp_path / "ckpt").exists()


def test_an_fp16_overflow_at_the_first_update_names_update_1():
    """fairseq logs its ``num_updates`` metric only once an update is done: none yet means the
    failing update is the first one."""
    from fairseq.logging import metrics

    from fairseq_plugins.compat.diagnoses import failing_update

    metrics.reset()
    assert failing_update() == "1"
    metrics.log_scalar("num_updates", 5, weight=0)
    assert failing_update() == "6"
    metrics.reset()


# ---- fairseq-generate: every example, refusals before any output ------------------------------------


def _hypotheses(out):
    return sorted(int(m) for m in re.findall(r"^H-(\d+)\t", out, flags=re.M))


@pytest.fixture(scope="module")
def prompts(work, data):
    """Eleven short prompts (the first words of test lines), a test split of the LM's dictionary."""
    lines = [x for x in (work / "data" / "test.spm").read_text(encoding="utf-8").splitlines() if x.strip()]
    raw = work / "prompts.txt"
    raw.write_text("".join(" ".join(line.split()[:6]) + "\n" for line in lines[:11]))
    preprocess("--only-source", "--testpref", raw, "--destdir", work / "prompts", "--srcdict", data / "dict.txt")
    return work / "prompts"


@pytest.mark.full
def test_fairseqs_own_model_generates_every_example(prompts, transformer_lm):
    # fairseq's batch sampler would drop the last batch (3 of 11) as 3 is no multiple of 8
    args = ["fairseq-generate", prompts, "--task", "language_modeling", "--path", transformer_lm,
            "--batch-size", "4", "--beam", "1", "--max-len-b", "10", "--sample-break-mode", "eos"]
    out = ok(fairseq(*args))
    assert _hypotheses(out) == list(range(11)), out[-2000:]
    # one start-up line says what the plugin changes in fairseq; the switch runs stock fairseq
    (line,) = [x for x in out.splitlines() if "fairseq_plugins changes in fairseq for this process" in x]
    assert "generate keeps a last batch of any size" in line and "FAIRSEQ_LONGMEM_STOCK=1" in line, line
    stock = ok(fairseq(*args, extra_env={"FAIRSEQ_LONGMEM_STOCK": "1"}))
    assert len(_hypotheses(stock)) == 8, stock[-2000:]  # fairseq's own sampler drops the last batch (3 of 11)
    assert "fairseq's behaviour is unchanged in this process" in stock


@pytest.mark.full
def test_beam_search_over_an_end_of_sentence_prefix_is_refused_before_any_output(data, transformer_lm):
    proc = fairseq("fairseq-generate", data, "--path", transformer_lm, "--task", "language_modeling",
                   "--max-len-b", "20", "--batch-size", "4", "--tokens-per-sample", "32", "--prefix-size", "3", "--beam", "4", check=False)
    one_line_error(proc, "--beam 4", "end-of-sentence", "--beam 1")
    assert _hypotheses(proc.stdout + proc.stderr) == [], proc.stdout[-2000:]


# ---- fairseq's own checkpoints resume and load next to the plugin ------------------------------------


@pytest.fixture(scope="module")
def pairs(work):
    """A toy translation corpus (the first words of the fixture's lines → the same words reversed)."""
    lines = [x for x in (work / "data" / "train.spm").read_text(encoding="utf-8").splitlines() if x.strip()]
    raw = work / "pairs"
    raw.mkdir()
    for split, chunk in (("train", lines[:200]), ("valid", lines[-20:])):
        words = [line.split()[:8] for line in chunk]
        (raw / f"{split}.src").write_text("".join(" ".join(w) + "\n" for w in words))
        (raw / f"{split}.tgt").write_text("".join(" ".join(reversed(w)) + "\n" for w in words))
    preprocess("-s", "src", "-t", "tgt", "--trainpref", raw / "train", "--validpref", raw / "valid",
               "--destdir", work / "mt", "--joined-dictionary")
    return work / "mt"


@pytest.mark.full
def test_fairseqs_transformer_resumes_and_loads_with_the_plugin(pairs, tmp_path):
    args = ["--task", "translation", "--arch", "transformer", "--encoder-layers", "1", "--decoder-layers", "1",
            "--encoder-embed-dim", "16", "--decoder-embed-dim", "16", "--encoder-ffn-embed-dim", "32",
            "--decoder-ffn-embed-dim", "32", "--encoder-attention-heads", "2", "--decoder-attention-heads", "2",
            "--optimizer", "adam", "--lr", "1e-3", "--batch-size", "8", "--save-dir", tmp_path,
            "--no-epoch-checkpoints", "--num-workers", "0"]
    ok(fairseq("fairseq-train", pairs, *args, "--max-update", "1"))
    resumed = ok(fairseq("fairseq-train", pairs, *args, "--max-update", "2"))
    assert "num_updates 2" in resumed or "num_updates=2" in resumed or "done training" in resumed, resumed[-2000:]
    state = torch.load(tmp_path / "checkpoint_last.pt", weights_only=False)
    assert state["optimizer_history"][-1]["num_updates"] == 2
    out = ok(fairseq("fairseq-generate", pairs, "--path", tmp_path / "checkpoint_last.pt", "--gen-subset", "valid",
                     "--batch-size", "8", "--beam", "1", "--max-len-b", "5"))
    assert _hypotheses(out) == list(range(20)), out[-2000:]


def test_the_allow_list_is_what_fairseqs_own_checkpoints_need():
    import argparse

    from fairseq_plugins.compat.checkpoints import SAFE_GLOBALS

    assert SAFE_GLOBALS == (argparse.Namespace,)


# ---- fairseq-interactive: a prompt it would not continue -----------------------------------------------


INTERACTIVE = ["--task", "language_modeling", "--beam", "1", "--seed", "1"]


@pytest.mark.full
def test_interactive_skips_an_empty_line_and_generates_the_prompts_after_it(data, transformer_lm):
    proc = fairseq("fairseq-interactive", data, "--path", transformer_lm, *INTERACTIVE, "--max-len-a", "1",
                   "--max-len-b", "4", input="▁the ▁of\n\n▁of ▁the\n")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert [line.split("\t")[1] for line in proc.stdout.splitlines() if line.startswith("S-")] == \
        ["▁the ▁of", "▁of ▁the"]
    assert len(re.findall(r"^H-\d", proc.stdout, flags=re.M)) == 2, proc.stdout[-2000:]
    skipped = [line for line in proc.stderr.splitlines() if "is empty: skipped" in line]
    assert len(skipped) == 1 and "input line 2" in skipped[0], proc.stderr[-2000:]


@pytest.mark.full
def test_interactive_prompts_follow_the_unknown_symbol_policy(data, transformer_lm):
    some = ok(fairseq("fairseq-interactive", data, "--path", transformer_lm, *INTERACTIVE, "--max-len-a", "1",
                      "--max-len-b", "4", input="▁the zzqq ▁of\n"))
    assert "1 of the 3 tokens of the prompt is <unk>" in some and re.search(r"^H-0", some, flags=re.M), some[-2000:]
    proc = fairseq("fairseq-interactive", data, "--path", transformer_lm, *INTERACTIVE, "--max-len-a", "1",
                   "--max-len-b", "4", input="zzqq yyxx\n", check=False)
    one_line_error(proc, "every token of the prompt is <unk>")
    assert not re.search(r"^H-", proc.stdout, flags=re.M), proc.stdout[-2000:]


@pytest.mark.full
def test_interactive_refuses_a_length_limit_inside_the_prompt(data, transformer_lm):
    prompt = " ".join(["▁the"] * 20) + "\n"
    proc = fairseq("fairseq-interactive", data, "--path", transformer_lm, *INTERACTIVE, "--max-len-b", "10",
                   input=prompt, check=False)
    one_line_error(proc, "--max-len-b 10", "--max-len-a 1")
    followed = ok(fairseq("fairseq-interactive", data, "--path", transformer_lm, *INTERACTIVE, "--max-len-a", "1",
                          "--max-len-b", "5", input=prompt))
    hypothesis = re.search(r"^H-0\t\S+\t(.*)$", followed, flags=re.M).group(1).split()
    assert len(hypothesis) > 20, followed[-2000:]  # the prompt, then tokens generated after it


# ---- without --user-dir: the message fairseq prints has a home in the docs; the wrapper passes it ----


@pytest.mark.full
def test_missing_user_dir_errors_are_documented_and_the_wrapper_runs(data, learned_fastformer):
    with open(os.path.join(ROOT, "docs", "troubleshooting.md"), encoding="utf-8") as f:
        page = f.read()
    ev = ["--path", learned_fastformer, "--batch-size", "4", "--tokens-per-sample", "32"]
    bare = fairseq("fairseq-eval-lm", data, *ev, user_dir=False, check=False)
    assert bare.returncode != 0
    assert "KeyError: \"'_name'\"" in bare.stderr.strip().splitlines()[-1], bare.stderr[-2000:]
    assert "## `KeyError: \"'_name'\"`" in page
    task = fairseq("fairseq-eval-lm", data, "--task", "streaming_lm", *ev, user_dir=False, check=False)
    assert "invalid choice: 'streaming_lm'" in task.stderr, task.stderr[-2000:]
    assert "## `invalid choice: 'streaming_lm'`" in page
    wrapped = ok(run([os.path.join(BIN, "fairseq-longmem"), "eval-lm", data, *ev, "--cpu"]))
    assert re.search(r"Loss \(base 2\): [0-9.]+", wrapped), wrapped[-2000:]
    twice = run([os.path.join(BIN, "fairseq-longmem"), "eval-lm", data, *ev, "--cpu", "--user-dir", USER_DIR],
                check=False)
    assert twice.returncode == 2 and twice.stderr.strip().splitlines()[-1].startswith(
        "fairseq-longmem eval-lm: error: fairseq-longmem eval-lm passes --user-dir itself"), twice.stderr[-2000:]
