"""The facts corpus (prepare-summarization.sh --corpus facts; fairseq_plugins/lab/facts/
reader.py; docs/data-preparation.md, "The facts corpus").

Filler text: the books fixture, its books divided over three split files. Checks read the
written text independently: each manifest position holds its value inside its carrier sentence,
no value occurs anywhere else, the filler sentences come from the matching split only, the
facts fall into the strata the design states, the token offsets index the pieces of tok/, no
summary repeats a piece trigram, and a set generated twice is identical byte for byte.
"""
import json
import re
import shutil
import unicodedata
from pathlib import Path

import pytest

from fairseq_plugins.lab.facts import reader as facts
from fairseq_plugins.errors import ConfigError
from facts_filler import write_filler
from helpers import run
from prep_command import prep

SPLITS = ("train", "valid", "test")


@pytest.fixture(scope="module")
def filler(tmp_path_factory):
    """A folder with {train,valid,test}.txt: the fixture's books, one paragraph per line."""
    return write_filler(tmp_path_factory.mktemp("filler"))


def lines_of(path):
    return Path(path).read_text(encoding="utf-8").split("\n")[:-1]


def examples(folder, **options):
    return list(facts.read(str(folder), **options))


def nfkc_words(path):
    """The words of a split file, NFKC-normalised (an independent reading of the filler)."""
    return unicodedata.normalize("NFKC", Path(path).read_text(encoding="utf-8"))


def test_facts_are_where_the_manifest_says(filler):
    found = examples(filler, doc_tokens="1024", facts="4", examples="5,2,2", seed="3")
    assert [(e[0], e[1]) for e in found] == [(s, f"facts-{s}-{i}") for s, n in zip(SPLITS, (5, 2, 2)) for i in range(n)]
    value_re = re.compile(r"\b(" + "|".join(facts.VALUES) + r")\b", re.IGNORECASE)
    for split, ex_id, document, summary, _, manifest in found:
        assert manifest["id"] == ex_id
        values = [f["value"] for f in manifest["facts"]]
        assert len(values) == 4 == len(set(values)) and set(values) <= set(facts.VALUES)
        assert summary == " ".join(values)
        for fact in manifest["facts"]:
            value, char, start = fact["value"], fact["char"], fact["sentence_char"]
            assert document[char:char + len(value)] == value
            assert document[start:start + len(value) + 20] == f"The hidden word is {value}."
            assert start == 0 or document[start - 1] == " "
        # the carrier sentences are the only places a value (in any case) occurs, in manifest order
        assert [m.group(0) for m in value_re.finditer(document)] == values
        assert [m.start() for m in value_re.finditer(document)] == [f["char"] for f in manifest["facts"]]
        assert document.count("hidden word") == 4


def test_filler_comes_from_the_matching_split_only(filler):
    texts = {s: nfkc_words(filler / f"{s}.txt") for s in SPLITS}
    for split, _, document, _, _, manifest in examples(filler, doc_tokens="1024", facts="3", examples="3,2,2"):
        rest = document
        for fact in reversed(manifest["facts"]):
            carrier = f"The hidden word is {fact['value']}. "
            assert rest[fact["sentence_char"]:].startswith(carrier)
            rest = rest[:fact["sentence_char"]] + rest[fact["sentence_char"] + len(carrier):]
        # what is left is this split's text: its word 6-grams occur in this split's books (all but
        # those across a junction: a skipped sentence, the wrap-around) and never in another split's
        grams = set(zip(*[rest.split()[i:] for i in range(6)]))
        own = set(zip(*[texts[split].split()[i:] for i in range(6)]))
        assert len(grams & own) >= 0.75 * len(grams), (split, len(grams & own), len(grams))
        for other in set(SPLITS) - {split}:
            assert not grams & set(zip(*[texts[other].split()[i:] for i in range(6)])), (split, other)


def test_filler_sentences_are_real_text_without_values(filler):
    text = " ".join(nfkc_words(filler / "train.txt").split())
    found = facts.filler_sentences(str(filler / "train.txt"))
    assert len(found) > 100
    for sentence, words in found:
        assert sentence in text and words == len(sentence.split()) and 4 <= words <= 60
        assert "hidden word" not in sentence.lower()
        assert not any(re.search(rf"\b{v}\b", sentence, re.IGNORECASE) for v in facts.VALUES), sentence


@pytest.fixture(scope="module")
def long_filler(filler, tmp_path_factory):
    """The filler repeated 12 times: enough words for 16k-token documents."""
    folder = tmp_path_factory.mktemp("long_filler")
    for split in SPLITS:
        (folder / f"{split}.txt").write_text((filler / f"{split}.txt").read_text(encoding="utf-8") * 12, encoding="utf-8")
    return folder


def test_facts_are_stratified_over_the_windows(long_filler):
    # strata by hand (TOKENS_PER_WORD 1.3, margin 10%): a 16384-token document has [0, 1024),
    # [1024, 4096), [4096, 16384) in tokens; 7 facts -> 3, 2, 2; each placed in
    # [lo * 1.1, hi * 0.9) tokens, i.e. those bounds / 1.3 in words
    def flat(strata):
        return [x for stratum in strata for x in stratum]

    assert flat(facts.strata(16384, 7)) == pytest.approx(flat([(0, 1024 * 0.9 / 1.3, 3),
                                                               (1024 * 1.1 / 1.3, 4096 * 0.9 / 1.3, 2),
                                                               (4096 * 1.1 / 1.3, 16384 * 0.9 / 1.3, 2)]))
    assert flat(facts.strata(4096, 6)) == pytest.approx(flat([(0, 1024 * 0.9 / 1.3, 3),
                                                             (1024 * 1.1 / 1.3, 4096 * 0.9 / 1.3, 3)]))
    assert flat(facts.strata(1024, 5)) == pytest.approx([0, 1024 * 0.9 / 1.3, 5])
    for _, _, document, _, _, manifest in examples(long_filler, doc_tokens="16384", facts="7", examples="2,1,1"):
        words_before = [len(document[:f["sentence_char"]].split()) - 5 * i for i, f in enumerate(manifest["facts"])]
        bounds = facts.strata(16384, 7)
        expected = [b for b, (_, _, n) in enumerate(bounds) for _ in range(n)]
        for words, b in zip(words_before, expected):
            lo, hi, _ = bounds[b]
            # the carrier goes before a sentence that starts in [lo, hi) words of filler
            assert lo <= words < hi, (words, b)


def test_uniform_placement_spreads_the_facts_in_proportion_to_length(long_filler):
    # uniform over the sentence boundaries of [0, 0.9 end): at 16384 tokens (12603 words) the
    # strata [0, 1k), [1k, 4k), [4k, end) get 1024 / 14746, 3072 / 14746 and 10650 / 14746 of the
    # facts (6.9%, 20.8%, 72.2%); 40 documents x 7 facts (binomial sd about 2.7 points)
    end = 16384 * 0.9 / 1.3
    assert facts.regions(16384, 7, "uniform") == [(0.0, pytest.approx(end), 7)]
    found = examples(long_filler, doc_tokens="16384", facts="7", examples="40,1,1", placement="uniform")
    words = [len(document[:f["sentence_char"]].split()) - 5 * i
             for _, _, document, _, _, manifest in found for i, f in enumerate(manifest["facts"])]
    assert len(words) == 42 * 7 and all(0 <= w < end for w in words)
    edges = (1024 / 1.3, 4096 / 1.3)
    shares = [sum(w < edges[0] for w in words), sum(edges[0] <= w < edges[1] for w in words),
              sum(w >= edges[1] for w in words)]
    for share, expected in zip(shares, (1024 / 14746, 3072 / 14746, 10650 / 14746)):
        assert share / len(words) == pytest.approx(expected, abs=0.08), shares
    # the default stays stratified (equal counts): a third past 4k
    strat = examples(long_filler, doc_tokens="16384", facts="6", examples="3,1,1")
    past = [len(d[:f["sentence_char"]].split()) - 5 * i >= edges[1] for _, _, d, _, _, m in strat
            for i, f in enumerate(m["facts"])]
    assert sum(past) * 3 == len(past)


def test_generated_twice_identical_and_seeded(filler):
    a = examples(filler, doc_tokens="1024", facts="4", examples="3,1,1", seed="7")
    assert a == examples(filler, doc_tokens="1024", facts="4", examples="3,1,1", seed="7")
    b = examples(filler, doc_tokens="1024", facts="4", examples="3,1,1", seed="8")
    assert [x[2] for x in a] != [x[2] for x in b]
    # example i does not depend on how many examples are drawn
    assert examples(filler, doc_tokens="1024", facts="4", examples="5,1,1", seed="7")[:3] == a[:3]


@pytest.mark.parametrize("options, needle", [
    ({"doc_tokens": "12"}, "--doc-tokens must be an integer >= 64, not '12'"),
    ({"facts": "0"}, "--facts must be an integer >= 1, not '0'"),
    ({"facts": "33"}, "--facts must be at most 32"),
    ({"examples": "10,5"}, "--examples must be TRAIN,VALID,TEST"),
    ({"seed": "x"}, "--seed must be an integer >= 0, not 'x'"),
    ({"doc_tokens": "64", "facts": "9"}, "--doc-tokens 64 is too short for 9 facts"),
    ({"placement": "random"}, "--placement must be one of strata, uniform, not 'random'"),
])
def test_bad_options_one_line(options, needle):
    with pytest.raises(ConfigError) as err:
        facts.options(**options)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_bad_inputs_one_line(filler, tmp_path):
    # a folder without the split files, text shorter than one document, an option for another corpus
    proc = prep("summarization", "convert", "--corpus", "facts", "--input", tmp_path, "--out", tmp_path / "o")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "holds neither raw/{train,valid,test}.txt nor {train,valid,test}.txt" in proc.stderr
    with pytest.raises(ConfigError, match=r"^train \(.*train.txt\): the filler text has \d+ words, fewer than one document's 12603 words"):
        examples(filler, doc_tokens="16384", facts="4", examples="1,1,1")
    with pytest.raises(ConfigError, match=r"^--seed applies to --corpus facts only$"):
        from fairseq_plugins.lab.data import readers
        readers.check_options(readers.get("summarization", "jsonl"), {"seed": "1"}, ("seed",))


# ---- the pipeline, end to end (sentencepiece, fairseq-preprocess)


@pytest.fixture(scope="module")
def built(filler, tmp_path_factory):
    outs = []
    for name in ("a", "b"):
        out = tmp_path_factory.mktemp("facts") / name
        run(["bash", "data-prep/prepare-summarization.sh", "--corpus", "facts", "--input", filler, "--out", out,
             "--doc-tokens", 1024, "--facts", 4, "--examples", "6,2,2", "--seed", 5, "--vocab-size", 400,
             "--workers", 1])
        outs.append(out)
    return outs


@pytest.mark.full
def test_pipeline_twice_gives_identical_files(built):
    a, b = built
    # (spm.model records the paths it was trained from; its pieces are spm.vocab)
    files = sorted(p.relative_to(a) for p in a.rglob("*")
                   if p.is_file() and p.parts[-2] in ("raw", "tok", "spm", "bin") and p.suffix != ".log" and p.name != "spm.model")
    assert Path("raw/test.facts.jsonl") in files and Path("tok/train.source") in files
    for rel in files:
        assert (a / rel).read_bytes() == (b / rel).read_bytes(), rel
    options = json.loads((a / "prepare.json").read_text())["options"]
    assert options["corpus"] == "facts" and options["examples"] == [6, 2, 2] and options["doc_tokens"] == 1024
    assert options["generator"]["values"][:2] == ["Agate", "Amber"]


@pytest.mark.full
def test_rerun_up_to_date_and_other_options_refused(built, filler):
    args = ["bash", "data-prep/prepare-summarization.sh", "--corpus", "facts", "--input", filler, "--out", built[0],
            "--doc-tokens", 1024, "--facts", 4, "--seed", 5, "--vocab-size", 400, "--workers", 1]
    assert "is up to date (corpus facts)" in run(args + ["--examples", "6,2,2"]).stdout
    proc = run(args + ["--examples", "6,2,3"], check=False)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "was prepared with different options: examples=[6, 2, 2] (requested [6, 2, 3])" in proc.stderr


@pytest.mark.full
def test_a_manifest_from_before_placement_reads_as_strata(built, filler, tmp_path):
    """A corpus prepared before --placement existed (no ``placement`` in prepare.json) was built
    with the strata: it is up to date for a request of strata, and refused for uniform."""
    old = tmp_path / "old"
    shutil.copytree(built[0], old)
    manifest = json.loads((old / "prepare.json").read_text())
    del manifest["options"]["placement"]
    (old / "prepare.json").write_text(json.dumps(manifest))
    args = ["bash", "data-prep/prepare-summarization.sh", "--corpus", "facts", "--input", filler, "--out", old,
            "--doc-tokens", 1024, "--facts", 4, "--seed", 5, "--vocab-size", 400, "--workers", 1,
            "--examples", "6,2,2"]
    assert "is up to date (corpus facts)" in run(args).stdout
    proc = run(args + ["--placement", "uniform"], check=False)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "placement=strata (requested uniform)" in proc.stderr, proc.stderr


@pytest.fixture(scope="module")
def built_uniform(filler, tmp_path_factory):
    out = tmp_path_factory.mktemp("facts") / "uniform"
    run(["bash", "data-prep/prepare-summarization.sh", "--corpus", "facts", "--input", filler, "--out", out,
         "--doc-tokens", 1800, "--facts", 6, "--examples", "6,2,2", "--seed", 5, "--vocab-size", 400,
         "--workers", 1, "--placement", "uniform"])
    return out


@pytest.mark.full
def test_token_offsets_index_the_pieces(built):
    check_token_offsets(built[0])


@pytest.mark.full
def test_uniform_corpus_offsets_index_the_binarized_source(built_uniform, filler):
    """The corpus of ``--placement uniform``: the manifest's token offsets index the pieces of
    tok/ and, through the dictionary, the binarized source fairseq reads; the option is recorded
    and a rerun without it is refused in one line."""
    from fairseq.data import Dictionary, data_utils

    out = built_uniform
    check_token_offsets(out)
    assert json.loads((out / "prepare.json").read_text())["options"]["placement"] == "uniform"
    dictionary = Dictionary.load(str(out / "bin" / "dict.source.txt"))
    for split in SPLITS:
        binarized = data_utils.load_indexed_dataset(str(out / "bin" / f"{split}.source-target.source"), dictionary)
        pieces = [line.split(" ") for line in lines_of(out / "tok" / f"{split}.source")]
        entries = [json.loads(line) for line in lines_of(out / "raw" / f"{split}.facts.jsonl")]
        assert len(binarized) == len(entries)
        for i, entry in enumerate(entries):
            ids = binarized[i].tolist()
            assert len(ids) == entry["tokens"] + 1 and ids[-1] == dictionary.eos()  # fairseq's </s>
            for fact in entry["facts"]:
                span = pieces[i][fact["token"]:fact["token_end"]]
                assert ids[fact["token"]:fact["token_end"]] == [dictionary.index(p) for p in span]
    proc = run(["bash", "data-prep/prepare-summarization.sh", "--corpus", "facts", "--input", filler,
                "--out", out, "--doc-tokens", 1800, "--facts", 6, "--examples", "6,2,2", "--seed", 5,
                "--vocab-size", 400, "--workers", 1], check=False)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "placement=uniform (requested strata)" in proc.stderr


def check_token_offsets(out):
    for split in SPLITS:
        pieces = [line.split(" ") for line in lines_of(out / "tok" / f"{split}.source")]
        entries = [json.loads(line) for line in lines_of(out / "raw" / f"{split}.facts.jsonl")]
        stats = json.loads((out / "stats.json").read_text())["splits"][split]["source"]["spm_tokens"]
        assert len(pieces) == len(entries) and max(e["tokens"] for e in entries) == stats["max"]
        sources = lines_of(out / "raw" / f"{split}.source")
        for toks, entry, source in zip(pieces, entries, sources):
            assert entry["tokens"] == len(toks)
            for fact in entry["facts"]:
                span = "".join(toks[fact["token"]:fact["token_end"]]).replace("\u2581", " ")
                # the span covers the value, and neither end piece can be dropped
                assert fact["value"] in span
                assert fact["value"] not in "".join(toks[fact["token"] + 1:fact["token_end"]]).replace("\u2581", " ")
                assert fact["value"] not in "".join(toks[fact["token"]:fact["token_end"] - 1]).replace("\u2581", " ")
                # the pieces before the value spell the document up to it
                before = "".join(toks[:fact["token"]]).replace("\u2581", " ")
                assert before.strip() == source[:fact["char"]].strip()


@pytest.mark.full
def test_summaries_repeat_no_piece_trigram(built):
    # generate-summaries.sh decodes with --no-repeat-ngram-size 3: a reference must not need a repeat
    for split in SPLITS:
        for line in lines_of(built[0] / "tok" / f"{split}.target"):
            toks = line.split(" ")
            trigrams = list(zip(toks, toks[1:], toks[2:]))
            assert len(trigrams) == len(set(trigrams)), line
