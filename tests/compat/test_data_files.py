"""A data folder fairseq's own tasks cannot read (fairseq_plugins/compat/data_files.py): the
exception fairseq raises becomes one line naming the folder, what it holds and the option that
picks it; the same through the real fairseq-eval-lm and fairseq-generate."""

import os
import shutil
import sys

import pytest
from fairseq.data import data_utils

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


def test_a_path_like_split_names_the_slash_and_the_bare_split_name(tmp_path, monkeypatch):
    monkeypatch.setattr(data_files, "running_tool", lambda: "eval_lm")
    data = _folder(tmp_path / "bin", "valid.idx")
    for path in (f"{data}/test/", data):  # language_modeling names FOLDER/SPLIT, translation FOLDER
        message = data_files.missing_data_message(FileNotFoundError(f"Dataset not found: test/ ({path})"))
        assert message == (f"split 'test/' ends in a slash: a split is the name fairseq-preprocess gave its files in "
                           f"the data folder ({data} holds valid), not a path; pass --gen-subset test")
    message = data_files.missing_data_message(FileNotFoundError(f"Dataset not found: bin/valid ({data})"))
    assert message == (f"split 'bin/valid' is a path: a split is the name fairseq-preprocess gave its files in the "
                       f"data folder ({data} holds valid), not a path; pass --gen-subset valid")
    message = data_files.missing_data_message(FileNotFoundError(f"Dataset not found: bin/valid ({tmp_path}/bin/valid)"))
    assert message == (f"split 'bin/valid' is a path: a split is the name fairseq-preprocess gave its files in the "
                       f"data folder, not a path; {data} holds valid: pass {data} as the data folder and "
                       f"--gen-subset valid")


def test_a_path_like_split_of_fairseq_train_names_the_option_that_carries_it(tmp_path, monkeypatch):
    monkeypatch.setattr(data_files, "running_tool", lambda: "train")
    data = _folder(tmp_path / "bin", "dict.txt", "train.idx")
    monkeypatch.setattr(sys, "argv", ["fairseq-train", data, "--task", "language_modeling", "--arch",
                                      "transformer_lm", "--optimizer", "adam", "--valid-subset", "train/"])
    message = data_files.missing_data_message(FileNotFoundError(f"Dataset not found: train/ ({data}/train/)"))
    assert message.endswith(f"({data} holds train), not a path; pass --valid-subset train")


def _os_error(kind, path):
    exc = kind(2, os.strerror(2))
    exc.filename = str(path)
    return exc


def test_dictionaries_name_the_languages_held_or_the_task_to_pass(tmp_path):
    pair = _folder(tmp_path / "pair", "dict.src.txt", "dict.tgt.txt")
    message = data_files.missing_data_message(_os_error(FileNotFoundError, f"{pair}/dict.de.txt"))
    assert message == (f"{pair} holds the dictionaries of src, tgt (dict.src.txt, dict.tgt.txt), not de: pass "
                       f"-s/--source-lang and -t/--target-lang among them")  # no fairseq tool: no command line
    lm = _folder(tmp_path / "lm", "dict.txt")
    message = data_files.missing_data_message(_os_error(FileNotFoundError, f"{lm}/dict.src.txt"))
    assert message.startswith(f"{lm} holds one dictionary (dict.txt") and "--task language_modeling" in message
    message = data_files.missing_data_message(_os_error(FileNotFoundError, f"{pair}/dict.txt"))
    assert "not a language model's dict.txt" in message and "--task translation" in message
    afile = tmp_path / "lm" / "dict.txt"
    message = data_files.missing_data_message(_os_error(NotADirectoryError, f"{afile}/dict.txt"))
    assert message.startswith(f"{afile} is a file, not a data folder")


def test_wrong_languages_name_every_one_given_without_a_dictionary(tmp_path, monkeypatch):
    monkeypatch.setattr(data_files, "running_tool", lambda: "generate")
    pair = _folder(tmp_path / "pair", "dict.src.txt", "dict.tgt.txt")
    for given, missing, named in ((["-s", "de", "-t", "en"], "de", "de or en"), (["-s", "src", "-t", "en"], "en", "en"),
                                  (["--source-lang", "de", "--target-lang", "de"], "de", "de")):
        monkeypatch.setattr(sys, "argv", ["fairseq-generate", pair, *given])
        message = data_files.missing_data_message(_os_error(FileNotFoundError, f"{pair}/dict.{missing}.txt"))
        assert message == (f"{pair} holds the dictionaries of src, tgt (dict.src.txt, dict.tgt.txt), not {named}: "
                           f"pass -s/--source-lang and -t/--target-lang among them")


def test_a_file_as_the_data_folder_is_named_a_file(tmp_path):
    data = _folder(tmp_path / "bin", "dict.src.txt", "dict.tgt.txt")
    for path, beside in ((tmp_path / "bin" / "dict.src.txt", f"; {data}, the folder it is in, is one"),
                         (_folder(tmp_path) and tmp_path / "notes.txt", "")):
        path.write_text("")
        with pytest.raises(NotADirectoryError) as listed:  # the translation task infers the language pair
            data_utils.infer_language_pair(str(path))
        expected = f"{path} is a file, not a data folder: pass the folder fairseq-preprocess wrote (its --destdir)"
        assert diagnoses.fault_message(listed.value) == expected + beside
        read = _os_error(NotADirectoryError, f"{path}/dict.txt")  # a task reads the dictionary
        assert data_files.missing_data_message(read) == expected + beside
    with pytest.raises(FileNotFoundError) as listed:
        data_utils.infer_language_pair(str(tmp_path / "nowhere"))
    assert diagnoses.fault_message(listed.value) == (f"data folder {tmp_path / 'nowhere'} does not exist; pass the "
                                                     f"folder fairseq-preprocess wrote")


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
    one_line_error(proc, f"{mt} holds the dictionaries of src, tgt", "not de or en:")
    proc = fairseq("fairseq-generate", mt, *generate, "-s", "src", "-t", "tgt", "--gen-subset", "test/", check=False)
    one_line_error(proc, "split 'test/' ends in a slash", f"({mt} holds no binarized split)", "--gen-subset test")
    for folder in (str(tmp_path / "nowhere"), str(lm)):  # the folder listed to infer the pair; a language model's
        proc = fairseq("fairseq-generate", folder, *generate, check=False)
        one_line_error(proc, *(["does not exist"] if folder != str(lm) else ["--task language_modeling"]))


@pytest.mark.full
def test_a_file_as_the_data_folder_is_refused_in_one_line(tmp_path):
    afile = tmp_path / "train.txt"
    afile.write_text("hello world\n")
    expected = f"{afile} is a file, not a data folder: pass the folder fairseq-preprocess wrote (its --destdir)"
    proc = fairseq("fairseq-generate", afile, "--path", os.path.join(FIXTURES, "fastformer.pt"), "--batch-size", "2",
                   check=False)
    assert one_line_error(proc) == f"fairseq_plugins: error: {expected}"
    proc = fairseq("fairseq-train", afile, "--arch", "transformer", "--optimizer", "adam", "--lr", "0.001",
                   "--batch-size", "2", "--save-dir", tmp_path / "ckpt", check=False)
    assert one_line_error(proc) == f"fairseq_plugins: error: {expected}"
