"""data-prep/prepare-lm.sh --bpe gpt2 without the [hf] extra (docs/gpt2.md, "Vocabulary,
documents and lines"): a hand-made byte-level GPT-2 vocabulary (the 256 byte symbols, two
merges, ``<|endoftext|>``) written as ``vocab.json``/``merges.txt``, and the one-line errors.
The comparison with a real tokenizer is in tests/lab/gpt2/test_gpt2.py."""

import pytest
import json
import os
import subprocess
import sys

from helpers import ROOT


def bytes_to_unicode():
    """GPT-2's byte → printable character table (Radford et al. 2019, encoder.py), written out
    here rather than imported so that the test does not take it from the code under test."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def write_vocab(folder):
    folder.mkdir()
    symbols = sorted(bytes_to_unicode().values()) + ["th", "the", "<|endoftext|>"]
    (folder / "vocab.json").write_text(json.dumps({s: i for i, s in enumerate(symbols)}), encoding="utf-8")
    (folder / "merges.txt").write_text("#version: 0.2\nt h\nth e\n", encoding="utf-8")
    return {s: i for i, s in enumerate(symbols)}


def prepare(*args):
    env = {**os.environ, "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"],
           "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run(["bash", "data-prep/prepare-lm.sh", "--corpus", "txt", "--input",
                           "tests/fixtures/books_txt", "--workers", "1", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True)


@pytest.mark.full
def test_gpt2_bpe_data_and_dictionary(tmp_path):
    vocab = write_vocab(tmp_path / "hf")
    proc = prepare("--out", str(tmp_path / "data"), "--bpe", "gpt2", "--hf-dir", str(tmp_path / "hf"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    eot = vocab["<|endoftext|>"]
    symbols = [line.split()[0] for line in (tmp_path / "data" / "dict.txt").read_text().splitlines()]
    assert symbols == [str(i) for i in range(len(vocab)) if i != eot]
    assert (tmp_path / "data" / "bin" / "dict.txt").read_text() == (tmp_path / "data" / "dict.txt").read_text()
    # one line per document, documents separated by one empty line, the paragraphs joined by "\n"
    raw_docs = (tmp_path / "data" / "raw" / "train.txt").read_text(encoding="utf-8").split("\n\n")
    lines = (tmp_path / "data" / "train.bpe").read_text().split("\n\n")
    assert len(lines) == len(raw_docs) and all("\n" not in line.strip("\n") for line in lines)
    newline = str(vocab[bytes_to_unicode()[ord("\n")]])
    paragraphs = raw_docs[0].strip("\n").count("\n")
    assert lines[0].split().count(newline) == paragraphs
    assert str(vocab["the"]) in lines[0].split()  # the merges apply
    manifest = json.loads((tmp_path / "data" / "prepare.json").read_text())
    assert manifest["options"]["bpe"] == "gpt2"
    again = prepare("--out", str(tmp_path / "data"), "--bpe", "gpt2", "--hf-dir", str(tmp_path / "hf"))
    assert again.returncode == 0 and "up to date" in again.stdout


@pytest.mark.full
def test_gpt2_bpe_bad_input_is_one_line(tmp_path):
    write_vocab(tmp_path / "hf")
    cases = [(["--bpe", "gpt2"], "needs --hf-dir"),
             (["--bpe", "gpt2", "--hf-dir", str(tmp_path / "hf"), "--vocab-size", "100"], "does not apply"),
             (["--hf-dir", str(tmp_path / "hf")], "applies to --bpe gpt2 only"),
             (["--bpe", "gpt3"], "--bpe must be sentencepiece or gpt2")]
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "vocab.json").write_text((tmp_path / "hf" / "vocab.json").read_text())
    cases.append((["--bpe", "gpt2", "--hf-dir", str(tmp_path / "broken")], "merges.txt is missing"))
    for args, message in cases:
        proc = prepare("--out", str(tmp_path / "out"), *args)
        err = proc.stderr.strip()
        assert proc.returncode != 0 and len(err.splitlines()) == 1 and message in err, (args, err)
        assert not (tmp_path / "out").exists()
