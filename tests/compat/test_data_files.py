"""A data folder fairseq's own tasks cannot read (fairseq_plugins/compat/data_files.py): the
exception fairseq raises becomes one line naming the folder, what it holds and the option that
picks it; the same through the real fairseq-eval-lm and fairseq-generate."""

import os
import shutil

import pytest

from fairseq_plugins.compat import data_files, diagnoses
from helpers import ROOT, fairseq, one_line_error

FIXTURES = os.path.join(ROOT, "tests", "fixtures", "legacy_checkpoints")


def _folder(root, *names):
    root.mkdir(parents=True, exist_ok=True)
    for name in names:
        (root / name).write_text("")
    return str(root)


@pytest.mark.parametrize("tool, option", [("eval_lm", "--gen-subset"), ("train", "--train-subset/--valid-subset")])
def test_a_split_never_binarized_names_the_splits_held_and_the_option(tmp_path, monkeypatch, tool, option):
    monkeypatch.setattr(data_files, "running_tool", lambda: tool)
    data = _folder(tmp_path / "bin", "dict.txt", "train.bin", "train.idx", "valid.bin", "valid.idx")
    lm = FileNotFoundError(f"Dataset not found: test ({os.path.join(data, 'test')})")  # language_modeling
    mt = FileNotFoundError(f"Dataset not found: test ({data})")  # translation: the folder itself
    for exc in (lm, mt):
        message = data_files.missing_data_message(exc)
        assert message.startswith(f"split 'test' not found in {data} ") and "holds train, valid" in message
        assert f"with {option}" in message


def test_a_pair_folder_lists_each_split_once_under_its_pair(tmp_path):
    data = _folder(tmp_path / "mt", "dict.en.txt", "dict.de.txt", "train.en-de.en.idx", "train.en-de.de.idx",
                   "valid.en-de.en.idx", "test.fr-en.fr.idx")
    assert data_files.held_splits(data) == {"en-de": ["train", "valid"], "fr-en": ["test"]}
    message = data_files.missing_data_message(FileNotFoundError(f"Dataset not found: test ({data})"))
    assert "this folder holds train, valid for en-de; test for fr-en)" in message


def test_a_split_name_with_a_slash_is_the_splits_fault_not_the_folders(tmp_path):
    data = _folder(tmp_path / "bin", "valid.idx")
    message = data_files.missing_data_message(FileNotFoundError(f"Dataset not found: test/ ({data}/test/)"))
    assert message.startswith(f"split 'test/' not found in {data} ") and "holds valid" in message


def _os_error(kind, path):
    exc = kind(2, os.strerror(2))
    exc.filename = str(path)
    return exc


def test_dictionaries_name_the_languages_held_or_the_task_to_pass(tmp_path):
    pair = _folder(tmp_path / "pair", "dict.src.txt", "dict.tgt.txt")
    message = data_files.missing_data_message(_os_error(FileNotFoundError, f"{pair}/dict.de.txt"))
    assert message == (f"{pair} holds the dictionaries of src, tgt (dict.src.txt, dict.tgt.txt), not de: pass "
                       f"-s/--source-lang and -t/--target-lang among them")
    lm = _folder(tmp_path / "lm", "dict.txt")
    message = data_files.missing_data_message(_os_error(FileNotFoundError, f"{lm}/dict.src.txt"))
    assert message.startswith(f"{lm} holds one dictionary (dict.txt") and "--task language_modeling" in message
    message = data_files.missing_data_message(_os_error(FileNotFoundError, f"{pair}/dict.txt"))
    assert "not a language model's dict.txt" in message and "--task translation" in message
    afile = tmp_path / "lm" / "dict.txt"
    message = data_files.missing_data_message(_os_error(NotADirectoryError, f"{afile}/dict.txt"))
    assert message.startswith(f"{afile} is a file, not a data folder")


def test_a_folder_without_splits_or_dictionary_points_at_data_preps_bin(tmp_path):
    out = tmp_path / "out"
    _folder(out / "bin", "dict.txt", "test.bin", "test.idx")
    message = data_files.missing_data_message(FileNotFoundError(f"Dataset not found: test ({out / 'test'})"))
    assert "holds no binarized split" in message and f"the fairseq data folder is {out / 'bin'}" in message
    assert "fairseq-preprocess (--testpref FILE" in message
    message = data_files.missing_data_message(_os_error(FileNotFoundError, out / "dict.txt"))
    assert message.startswith(f"{out / 'dict.txt'} is missing: {out} is not a fairseq-preprocess output folder")
    assert f"the fairseq data folder is {out / 'bin'}" in message
    message = data_files.missing_data_message(_os_error(FileNotFoundError, tmp_path / "nowhere" / "dict.en.txt"))
    assert message.startswith(f"data folder {tmp_path / 'nowhere'} does not exist")


def test_other_errors_keep_their_traceback(tmp_path):
    for exc in (_os_error(FileNotFoundError, tmp_path / "model.pt"), _os_error(NotADirectoryError, tmp_path / "x"),
                FileNotFoundError("Dataset not found in config file: test"),
                ValueError("Dataset not found: x (y)"), Exception("something else")):
        assert data_files.missing_data_message(exc) is None
        assert diagnoses.fault_message(exc) is None


def test_the_message_is_found_anywhere_in_the_chain(tmp_path):
    data = _folder(tmp_path / "bin", "valid.idx")
    try:
        try:
            raise FileNotFoundError(f"Dataset not found: test ({data}/test)")
        except FileNotFoundError as inner:
            raise RuntimeError("wrapped") from inner
    except RuntimeError as outer:
        assert diagnoses.fault_message(outer).startswith(f"split 'test' not found in {data} ")


@pytest.mark.full
def test_fairseqs_own_tasks_refuse_missing_data_in_one_line(tmp_path):
    lm = tmp_path / "lm"
    shutil.copytree(os.path.join(FIXTURES, "lm-bin"), lm)  # a dictionary and no split
    proc = fairseq("fairseq-eval-lm", str(lm), "--path", os.path.join(FIXTURES, "infinite_former_lm.pt"),
                   "--task", "language_modeling", "--tokens-per-sample", "16", "--batch-size", "2", check=False)
    one_line_error(proc, f"split 'test' not found in {lm}", "holds no binarized split")
    mt = os.path.join(FIXTURES, "mt-bin")  # dict.src.txt and dict.tgt.txt, no split
    generate = ["--path", os.path.join(FIXTURES, "fastformer.pt"), "--batch-size", "2"]
    proc = fairseq("fairseq-generate", mt, *generate, check=False)
    one_line_error(proc, "cannot tell the language pair", f"{mt}, which holds the dictionaries of src, tgt",
                   "-s/--source-lang and -t/--target-lang")
    proc = fairseq("fairseq-generate", mt, *generate, "-s", "de", "-t", "en", check=False)
    one_line_error(proc, f"{mt} holds the dictionaries of src, tgt", "not de")
    for folder in (str(tmp_path / "nowhere"), str(lm)):  # the folder listed to infer the pair; a language model's
        proc = fairseq("fairseq-generate", folder, *generate, check=False)
        one_line_error(proc, *(["does not exist"] if folder != str(lm) else ["--task language_modeling"]))
