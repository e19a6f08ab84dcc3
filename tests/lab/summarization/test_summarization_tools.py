"""``fairseq-longmem summarize check-lengths | task-args | hypotheses`` (the library's
:mod:`~fairseq_plugins.lab.summarization.lengths` and :mod:`~fairseq_plugins.lab.summarization.generation`)
against hand-made binaries, checkpoints and fairseq-generate outputs; bad input to each verb is
one line and writes nothing."""

import argparse

import numpy as np
import pytest
import torch
from fairseq.data.indexed_dataset import MMapIndexedDatasetBuilder

from fairseq_plugins.errors import ConfigError
from fairseq_plugins.lab.summarization.generation import read_hypotheses, task_args, write_hypotheses
from fairseq_plugins.lab.summarization.lengths import check_lengths
from helpers import longmem_here, one_line_error

TASK = {"_name": "translation", "source_lang": "source", "target_lang": "target", "max_source_positions": 1024,
        "max_target_positions": 1280, "truncate_source": True}


def binarize(folder, split, sources, targets):
    """DATA/SPLIT.source-target.{source,target}.{bin,idx} holding examples of the given token counts."""
    folder.mkdir(exist_ok=True)
    for side, lengths in (("source", sources), ("target", targets)):
        prefix = str(folder / f"{split}.source-target.{side}")
        builder = MMapIndexedDatasetBuilder(prefix + ".bin", dtype=np.uint16)
        for n in lengths:
            builder.add_item(torch.full((n,), 5))
        builder.finalize(prefix + ".idx")
    return folder


def test_check_lengths_against_hand_counts(tmp_path):
    data = binarize(tmp_path / "bin", "test", [5, 12, 3], [4, 7, 2])
    # mean (5 + 12 + 3) / 3 = 6.67; cut to 10: 5 + 10 + 3 = 18 of 20 source tokens kept
    assert list(check_lengths(str(data), 10, 8, True, ["test"])) == [
        "test: 3 examples, source tokens mean 7 max 12, target max 7 (limits 10 / 8, counting </s>); "
        "--truncate-source cuts 1 of 3 sources to 9 tokens + </s> (keeps 90.0% of source tokens)"]
    with pytest.raises(ConfigError, match=r"^test: 1 sources longer than --max-source-positions 10 \(longest 12\); "
                                          r"fairseq would drop or reject these examples$"):
        list(check_lengths(str(data), 10, 8, False, ["test"]))
    with pytest.raises(ConfigError, match=r"test: 1 targets longer than --max-target-positions 6 \(longest 7\); "
                                          r"raise MAX_TARGET"):
        list(check_lengths(str(data), 12, 6, False, ["test"]))
    lines = check_lengths(str(data), 12, 8, False, ["test", "valid"])
    assert next(lines).startswith("test: 3 examples")  # each split's line comes before a later refusal
    with pytest.raises(ConfigError, match="valid.source-target.{source,target}.idx not found"):
        next(lines)


def save_checkpoint(path, task):
    # fairseq's own argparse-configured models store an argparse.Namespace (the safe loader's allow-list)
    torch.save({"cfg": {"task": task, "model": argparse.Namespace(arch="transformer")}, "model": {},
                "optimizer_history": [{"num_updates": 0}], "extra_state": {}}, str(path))
    return path


def test_task_args_of_a_checkpoint(tmp_path):
    ckpt = save_checkpoint(tmp_path / "c.pt", TASK)
    assert task_args(str(ckpt)) == ["--source-lang", "source", "--target-lang", "target", "--max-source-positions",
                                    "1024", "--max-target-positions", "1280", "--truncate-source"]
    ckpt = save_checkpoint(tmp_path / "d.pt", {**TASK, "truncate_source": False, "max_source_positions": 131072})
    assert task_args(str(ckpt))[-2:] == ["--max-target-positions", "1280"] and "131072" in task_args(str(ckpt))
    ckpt = save_checkpoint(tmp_path / "lm.pt", {"_name": "language_modeling"})
    with pytest.raises(ConfigError, match="trained with task 'language_modeling', not translation"):
        task_args(str(ckpt))
    with pytest.raises(ConfigError, match="not found"):
        task_args(str(tmp_path / "none.pt"))
    cut = tmp_path / "cut.pt"
    cut.write_bytes((tmp_path / "c.pt").read_bytes()[:100])
    with pytest.raises(ConfigError, match="cannot read checkpoint .* truncated or corrupt"):
        task_args(str(cut))


GENERATE_OUT = ("S-1\tsecond source\nT-1\tsecond ref\nH-1\t-0.5\t▁second\nD-1\t-0.5\tsecond summary\n"
                "P-1\t-0.1 -0.2\nS-0\tfirst source\nH-0\t-0.3\t▁first\nD-0\t-0.3\tfirst summary\n"
                "Generate test with beam=4: BLEU4 = 0\n")


def test_hypotheses_in_example_order(tmp_path):
    data = binarize(tmp_path / "bin", "test", [3, 4], [2, 2])
    out = tmp_path / "gen" / "generate.out"
    out.parent.mkdir()
    out.write_text(GENERATE_OUT, encoding="utf-8")
    ref = tmp_path / "test.target"
    ref.write_text("a\nb")  # the last line without its newline counts
    assert write_hypotheses(str(out), str(data), "test", str(tmp_path / "gen" / "hyp.txt"), str(ref)) == 2
    assert (tmp_path / "gen" / "hyp.txt").read_text(encoding="utf-8") == "first summary\nsecond summary\n"
    assert read_hypotheses(str(out), 2) == ["first summary", "second summary"]
    with pytest.raises(ConfigError, match=r"1 of 3 examples have no hypothesis in .* \(first ids \[2\]\)"):
        read_hypotheses(str(out), 3)
    twice = tmp_path / "twice.out"
    twice.write_text(GENERATE_OUT + "D-0\t-0.9\tanother\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"example 0 has two hypotheses in .* \(use --nbest 1\)"):
        read_hypotheses(str(twice), 2)
    ref.write_text("a\nb\nc\n")
    with pytest.raises(ConfigError, match=r"test.target has 3 lines but .* holds 2 test examples"):
        write_hypotheses(str(out), str(data), "test", str(tmp_path / "new.txt"), str(ref))
    assert not (tmp_path / "new.txt").exists()


@pytest.mark.full
def test_verbs_print_for_the_recipes_and_refuse_in_one_line(tmp_path):
    data = binarize(tmp_path / "bin", "train", [5, 12, 3], [4, 7, 2])
    prog = "train-summarizer.sh (fastformer)"
    proc = longmem_here("summarize", "check-lengths", data, "--max-source", "10", "--max-target", "8", "--truncate-source",
                   "--splits", "train", "--prog", prog)
    assert proc.stdout.splitlines() == [
        f"{prog}: train: 3 examples, source tokens mean 7 max 12, target max 7 (limits 10 / 8, counting </s>); "
        "--truncate-source cuts 1 of 3 sources to 9 tokens + </s> (keeps 90.0% of source tokens)"]
    proc = longmem_here("summarize", "check-lengths", data, "--max-source", "12", "--max-target", "6", "--splits", "train",
                   "--prog", prog, check=False)
    assert proc.returncode == 2 and proc.stdout.startswith(f"{prog}: train: 3 examples")
    one_line_error(proc, "1 targets longer than --max-target-positions 6", prefix=f"{prog}: error: train: ")
    proc = longmem_here("summarize", "check-lengths", data, "--max-source", "12", check=False)
    one_line_error(proc, "--max-target", prefix="fairseq-longmem summarize check-lengths: error:")
    proc = longmem_here("summarize", "check-lengths", data, "--max-source", "12", "--max-target", "8", check=False)
    one_line_error(proc, "valid.source-target.{source,target}.idx not found",
                   prefix="fairseq-longmem summarize check-lengths: error:")

    ckpt = save_checkpoint(tmp_path / "c.pt", TASK)
    proc = longmem_here("summarize", "task-args", ckpt)
    assert proc.stdout.splitlines() == task_args(str(ckpt))
    cut = tmp_path / "cut.pt"
    cut.write_bytes(ckpt.read_bytes()[:100])
    proc = longmem_here("summarize", "task-args", cut, "--prog", "generate-summaries.sh", check=False)
    one_line_error(proc, "cannot read checkpoint", prefix="generate-summaries.sh: error:")
    assert proc.stdout == ""

    data = binarize(tmp_path / "bin", "test", [3, 4], [2, 2])
    out = tmp_path / "generate.out"
    out.write_text(GENERATE_OUT, encoding="utf-8")
    hyp = tmp_path / "gen" / "hyp.txt"
    proc = longmem_here("summarize", "hypotheses", out, "--data", data, "--split", "test", "--out", hyp)
    assert proc.stdout.strip() == f"fairseq-longmem summarize hypotheses: wrote 2 summaries to {hyp}"
    assert hyp.read_text(encoding="utf-8") == "first summary\nsecond summary\n"
    ref = tmp_path / "test.target"
    ref.write_text("a\n")
    new = tmp_path / "new" / "hyp.txt"
    for args, needle in [([out, "--ref", ref], "has 1 lines but"), ([tmp_path / "none.out"], "not found"),
                         ([out, "--split", "valid"], "valid.source-target"), ([out, "--nbest", "1"], "unrecognized")]:
        argv = [*args, "--data", data, "--out", new] + ([] if "--split" in args else ["--split", "test"])
        proc = longmem_here("summarize", "hypotheses", *argv, check=False)
        one_line_error(proc, needle, prefix="fairseq-longmem summarize hypotheses: error:")
    assert not new.parent.exists()
