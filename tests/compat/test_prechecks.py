"""The command-line checks made before a fairseq tool starts (fairseq_plugins/compat/prechecks.py):
each refusal is a ConfigError naming the option and the fix, and a command line that passes
them is left to fairseq; and streaming_lm's refusal, when it builds the model, of a model it
cannot feed."""

import argparse
import logging

import pytest

from fairseq_plugins.compat import checkpoint_files, prechecks
from fairseq_plugins.errors import ConfigError


def test_train_without_arch_names_the_option_and_the_choices(monkeypatch):
    monkeypatch.setattr(checkpoint_files, "check", lambda tool, argv: [])
    with pytest.raises(ConfigError, match=r"needs --arch .*infinite_former_lm"):
        prechecks.check("train", ["data/bin", "--task", "streaming_lm"])
    with pytest.raises(ConfigError, match=r"needs --optimizer"):
        prechecks.check("train", ["data/bin", "--task", "streaming_lm", "--arch", "infinite_former_lm"])
    for arch in (["--arch", "infinite_former_lm"], ["-a", "transformer_lm"]):
        prechecks.check("train", ["data/bin", "--task", "streaming_lm", *arch, "--optimizer", "adam"])
    prechecks.check("train", ["--help"])  # fairseq prints its help
    prechecks.check("train", ["-h"])
    prechecks.check("eval_lm", ["data/bin", "--path", "ck.pt"])  # eval-lm reads the arch from the checkpoint


def test_train_without_task_refuses_a_language_model_and_passes_a_translation_model(monkeypatch):
    """fairseq-train's default task is translation; a language model's configuration reads
    --tokens-per-sample from its task, which then ends in an omegaconf traceback."""
    monkeypatch.setattr(checkpoint_files, "check", lambda tool, argv: [])
    for arch in ("infinite_former_lm", "fastformer_lm", "infinite_former_gpt2", "transformer_lm"):
        with pytest.raises(ConfigError, match=rf"--arch {arch} reads --tokens-per-sample from its task.*--task "
                                              r"streaming_lm"):
            prechecks.check("train", ["data/bin", "--arch", arch, "--optimizer", "adam"])
        prechecks.check("train", ["data/bin", "--task", "language_modeling", "--arch", arch, "--optimizer", "adam"])
    for arch in ("fastformer_tiny", "transformer"):  # encoder-decoders: translation has what they read
        prechecks.check("train", ["data/bin", "--arch", arch, "--optimizer", "adam"])


@pytest.mark.parametrize("task, checkpoint, warned", [
    (None, {"cfg": {"model": {"_name": "infinite_former_lm"}}}, True),  # eval-lm's default task
    ("language_modeling", {"cfg": {"model": {"_name": "infinite_former_gpt2"}}}, True),
    ("language_modeling", {"cfg": None, "args": argparse.Namespace(arch="infinite_former_lm")}, True),
    ("streaming_lm", {"cfg": {"model": {"_name": "infinite_former_lm"}}}, False),
    ("language_modeling", {"cfg": {"model": {"_name": "fastformer_lm"}}}, False),  # no memory between blocks
    ("language_modeling", {"cfg": {"model": {"_name": "transformer_lm"}}}, False),
])
def test_eval_lm_of_a_memory_model_outside_streaming_lm_warns_once(monkeypatch, caplog, task, checkpoint, warned):
    """Under a task other than streaming_lm an ∞-former LM scores each block from an empty memory:
    one warning names the task to pass; a model without memory between blocks gets none."""
    monkeypatch.setattr(checkpoint_files, "check", lambda tool, argv: [checkpoint])
    argv = ["data/bin", "--path", "a.pt", *([f"--task={task}"] if task else [])]
    with caplog.at_level(logging.WARNING, logger=prechecks.__name__):
        prechecks.check("eval_lm", argv)
        prechecks.check("generate", argv)  # generation reads no blocks from an empty memory
        prechecks.check("eval_lm", [*argv, "--tas", "streaming_lm"])  # refused by fairseq's parser: its line alone
    lines = [r.getMessage() for r in caplog.records if "from an empty memory" in r.getMessage()]
    assert len(lines) == (1 if warned else 0), lines
    if warned:
        assert f"under --task {task or 'language_modeling'} " in lines[0] and "--task streaming_lm" in lines[0]


def test_eval_lm_refuses_a_list_of_checkpoints(tmp_path):
    """fairseq-eval-lm reads --path A:B as one file name (generate and interactive, as an ensemble)."""
    for name in ("a.pt", "b.pt"):
        (tmp_path / name).write_bytes(b"")
    both = f"{tmp_path / 'a.pt'}:{tmp_path / 'b.pt'}"
    with pytest.raises(ConfigError, match=r"fairseq-eval-lm scores one checkpoint, and --path .* names 2 .*pass one "
                                          r"--path"):
        checkpoint_files.files_to_read("eval_lm", prechecks.command_line(["data", "--path", both]))
    assert len(checkpoint_files.files_to_read("generate", prechecks.command_line(["data", "--path", both]))) == 2


def test_fp16_without_cuda_is_refused_unless_the_gradients_stay_unflattened():
    args = prechecks.command_line(["data/bin", "--fp16"])
    with pytest.raises(ConfigError, match="--fp16 needs a CUDA GPU .*a CPU trains in fp32"):
        prechecks.check_fp16(args, cuda_available=False)
    with pytest.raises(ConfigError, match="--cpu was passed"):
        prechecks.check_fp16(prechecks.command_line(["data/bin", "--fp16", "--cpu"]), cuda_available=True)
    prechecks.check_fp16(args, cuda_available=True)
    prechecks.check_fp16(prechecks.command_line(["data/bin", "--fp16", "--fp16-no-flatten-grads"]), False)
    prechecks.check_fp16(prechecks.command_line(["data/bin", "--memory-efficient-fp16"]), False)


def test_fairseqs_own_launcher_on_a_cpu_is_refused_naming_torchrun():
    args = prechecks.command_line(["data/bin", "--distributed-world-size", "2", "--cpu"])
    with pytest.raises(ConfigError, match="--distributed-world-size 2 without torchrun: .*torchrun --nproc_per_node 2 "
                                          ".*scripts/distributed-train.sh"):
        prechecks.check_launcher(args, cuda_available=False, environ={})
    prechecks.check_launcher(args, cuda_available=False, environ={"RANK": "0"})  # under torchrun
    prechecks.check_launcher(prechecks.command_line(["data/bin", "--distributed-world-size", "2"]), True, {})
    prechecks.check_launcher(prechecks.command_line(["data/bin", "--cpu"]), False, {})


def test_several_ranks_read_the_checkpoint_they_resume_from_themselves():
    from fairseq_plugins.compat.distributed_resume import OPTION, all_ranks_load

    argv = ["fairseq-train", "data/bin", "--cpu"]
    assert not all_ranks_load(argv, {}) and OPTION not in argv  # one process: nothing to add
    assert all_ranks_load(argv, {"WORLD_SIZE": "2"}) and argv[-1] == OPTION
    assert not all_ranks_load(argv, {"WORLD_SIZE": "2"}) and argv.count(OPTION) == 1  # there already
    argv = ["fairseq-train", "data/bin", "--distributed-world-size", "4"]
    assert all_ranks_load(argv, {}) and argv[-1] == OPTION


def test_bf16_without_cuda_is_refused_and_with_cuda_passes():
    args = prechecks.command_line(["data/bin", "--bf16"])
    with pytest.raises(ConfigError, match="--bf16"):
        prechecks.check_bf16(args, cuda_available=False)
    prechecks.check_bf16(args, cuda_available=True)
    prechecks.check_bf16(prechecks.command_line(["data/bin"]), cuda_available=False)


def test_streaming_lm_refuses_a_model_that_cannot_take_the_streams_starts(books_bin, tmp_path):
    """fairseq's transformer_lm under --task streaming_lm: one ConfigError naming the task to use
    (its decoder's forward takes no ``reset_memory``), while fastformer_lm builds."""
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    import fairseq_plugins  # noqa: F401  (registers the task and models)

    def build(*arch):
        parsed = options.parse_args_and_arch(options.get_training_parser(), input_args=[
            str(books_bin), "--task", "streaming_lm", "--tokens-per-sample", "16", *arch])
        cfg = convert_namespace_to_omegaconf(parsed)
        return tasks.setup_task(cfg.task).build_model(cfg.model)

    with pytest.raises(ConfigError, match=r"runs the plugin's language models .*not transformer_lm.*"
                                          r"--task language_modeling"):
        build("--arch", "transformer_lm", "--decoder-layers", "1", "--decoder-embed-dim", "16",
              "--decoder-ffn-embed-dim", "16", "--decoder-attention-heads", "2")
    build("--arch", "fastformer_lm", "--decoder-layers", "1", "--decoder-embed-dim", "16",
          "--decoder-ffn-embed-dim", "16", "--decoder-attention-heads", "2")


def test_model_overrides_that_are_no_dict_literal_are_one_line(monkeypatch):
    """fairseq reads --model-overrides with ast.literal_eval: unquoted keys or key=value end in a
    ValueError or SyntaxError traceback; a dict literal passes."""
    monkeypatch.setattr(checkpoint_files, "check", lambda tool, argv: [])
    for tool in ("generate", "eval_lm", "interactive"):
        for bad in ("{memory_wiped: True}", "memory_wiped=True", "['memory_wiped']"):
            with pytest.raises(ConfigError, match=r"--model-overrides .* is not a Python dict literal.*"
                                                  r"\"\{'memory_wiped': True\}\""):
                prechecks.check(tool, ["data/bin", "--path", "ck.pt", "--model-overrides", bad])
        prechecks.check(tool, ["data/bin", "--path", "ck.pt", "--model-overrides", "{'memory_wiped': True}"])
        prechecks.check(tool, ["data/bin", "--path", "ck.pt"])


def test_the_memory_wiped_control_is_refused_in_training(monkeypatch):
    """--memory-wiped is an evaluation control; fairseq-train used to train with it (a memory that
    learns nothing) without a word."""
    monkeypatch.setattr(checkpoint_files, "check", lambda tool, argv: [])
    base = ["data/bin", "--task", "streaming_lm", "--arch", "infinite_former_lm", "--optimizer", "adam"]
    with pytest.raises(ConfigError) as e:
        prechecks.check("train", [*base, "--memory-wiped"])
    assert str(e.value) == ("--memory-wiped is an evaluation control (every read of the memory sees it empty): "
                            "trained with it, the memory would learn nothing; drop it from fairseq-train and score "
                            "the trained checkpoint with it instead (fairseq-eval-lm --model-overrides "
                            "\"{'memory_wiped': True}\", or the analysis commands' --memory-wiped)")
    prechecks.check("train", base)
    prechecks.check("eval_lm", ["data/bin", "--path", "ck.pt", "--model-overrides", "{'memory_wiped': True}"])


def _translation_data(folder, sources, targets):
    """DATA/train.source-target.{source,target}.{bin,idx} of examples of the given token counts, and
    the two dictionaries."""
    import numpy as np
    import torch
    from fairseq.data.indexed_dataset import MMapIndexedDatasetBuilder

    from helpers import dictionary

    folder.mkdir()
    for side, lengths in (("source", sources), ("target", targets)):
        dictionary(20, side[0]).save(str(folder / f"dict.{side}.txt"))
        builder = MMapIndexedDatasetBuilder(str(folder / f"train.source-target.{side}.bin"), dtype=np.uint16)
        for n in lengths:
            builder.add_item(torch.full((n,), 5))
        builder.finalize(str(folder / f"train.source-target.{side}.idx"))
    return folder


SUMMARIZER = ["--task", "translation", "--source-lang", "source", "--target-lang", "target", "--arch",
              "infinite_former_summarizer", "--optimizer", "adam", "--lead-window", "4", "--encoder-chunk-length", "4"]


def test_a_translation_split_fairseq_would_drop_whole_is_refused(tmp_path, monkeypatch):
    """Every training source longer than --max-source-positions (or every target than
    --max-target-positions) used to end in fairseq's 'The dataset is empty' traceback."""
    monkeypatch.setattr(checkpoint_files, "check", lambda tool, argv: [])
    data = _translation_data(tmp_path / "bin", [9, 12, 10], [3, 4, 5])
    with pytest.raises(ConfigError) as e:
        prechecks.check("train", [str(data), *SUMMARIZER, "--max-source-positions", "8"])
    assert str(e.value) == (f"every one of the 3 train sources is longer than --max-source-positions 8 (the longest: "
                            f"12 tokens with </s>, in {data}/train.source-target.source), so fairseq-train would drop "
                            f"them all and stop in 'The dataset is empty'; pass --max-source-positions 12 (or "
                            f"--truncate-source to cut the sources)")
    with pytest.raises(ConfigError, match=r"^no train example fits --max-source-positions 16 and "
                                          r"--max-target-positions 2 \(the longest target: 5 tokens with </s>\).*"
                                          r"pass --max-target-positions 5$"):
        prechecks.check("train", [str(data), *SUMMARIZER, "--max-source-positions", "16", "--max-target-positions",
                                  "2"])
    # one example that fits, or sources that are cut to fit: fairseq trains
    prechecks.check("train", [str(data), *SUMMARIZER, "--max-source-positions", "9"])
    prechecks.check("train", [str(data), *SUMMARIZER, "--max-source-positions", "8", "--truncate-source"])


@pytest.mark.full
def test_fairseq_train_refuses_it_in_one_line_and_leaves_no_save_dir(tmp_path):
    from helpers import fairseq, one_line_error

    data = _translation_data(tmp_path / "bin", [9, 12, 10], [3, 4, 5])
    for extra, needle in ((["--max-source-positions", "8"], "every one of the 3 train sources is longer than "
                                                            "--max-source-positions 8 (the longest: 12 tokens"),
                          (["--max-source-positions", "16", "--memory-wiped"], "--memory-wiped is an evaluation "
                                                                                "control")):
        proc = fairseq("fairseq-train", data, *SUMMARIZER, "--lr", "0.001", "--max-update", "1",
                       "--save-dir", tmp_path / "ck", *extra, check=False)
        one_line_error(proc, needle)
        assert "Exception: The dataset is empty" not in proc.stdout + proc.stderr and not (tmp_path / "ck").exists()


def test_fairseqs_own_parse_logs_nothing_and_leaves_the_command_line(monkeypatch, caplog):
    """The parse behind the checks reads the line as the tool does, without a second
    '--user-dir has already been imported' record (which the fairseq-longmem command hides with a
    note that a redirected stderr would swallow), and puts sys.argv back."""
    import sys

    from fairseq_plugins.compat.process import fairseq_command_line

    line = ["fairseq-eval-lm", "data/bin", "--path", "a.pt", "--user-dir", prechecks.__file__.rsplit("/compat", 1)[0]]
    monkeypatch.setattr(sys, "argv", list(line))
    with caplog.at_level(logging.INFO):
        parsed = fairseq_command_line("eval_lm", strict=True)
        assert fairseq_command_line("eval_lm", [*line[1:], "--no-such-option"], strict=True) is None
    assert parsed.task == "language_modeling" and parsed.path == "a.pt" and parsed.data == "data/bin"
    assert sys.argv == line
    assert not [r for r in caplog.records if "already been imported" in r.getMessage()]
