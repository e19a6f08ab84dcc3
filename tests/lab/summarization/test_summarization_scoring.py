"""``fairseq-longmem summarize score | lead`` and ``results summarization`` (the library
:mod:`fairseq_plugins.lab.summarization`) and the n-gram blocking fix of :mod:`fairseq_plugins.compat`,
checked against direct rouge-score / sacrebleu calls, hand-computed values and a naive n-gram search."""

import json
import pathlib

import pytest
import sacrebleu
import torch
from rouge_score import rouge_scorer

from fairseq_plugins.compat import ngram_blocking
from fairseq_plugins.lab.summarization.lead import lead
from fairseq_plugins.lab.summarization import scoring
from fairseq_plugins.lab.summarization import tokenizers
from fairseq_plugins.lab.summarization.sentences import split_sentences
from helpers import ROOT, longmem_here, one_line_error, run

ROOT_PATH = pathlib.Path(ROOT)

HYPS = [
    "the cats were running in the garden",
    "We propose a new parser. It is fast and accurate.",
    "",  # an empty hypothesis scores 0, it is not an error
    "Results improve by two points on the benchmark.",
]
REFS = [
    "the cat ran in the garden",
    "We present a fast parser. It is accurate.",
    "Nothing was generated here.",
    "Our results improve by 2 points on the standard benchmark.",
]


def write(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return str(path)


def test_rouge_and_bleu_equal_direct_library_calls():
    got = scoring.score(HYPS, REFS)
    scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=True)
    direct = [scorer.score(r, h) for h, r in zip(HYPS, REFS)]
    for t in ("rouge1", "rouge2", "rougeL"):
        assert got[t] == pytest.approx(100 * sum(s[t].fmeasure for s in direct) / len(HYPS), abs=1e-9)
    # rougeLsum on texts split into sentences by hand (one per line)
    lsum = rouge_scorer.RougeScorer(["rougeLsum"], use_stemmer=True)
    split_h = ["the cats were running in the garden", "We propose a new parser.\nIt is fast and accurate.", "",
               "Results improve by two points on the benchmark."]
    split_r = ["the cat ran in the garden", "We present a fast parser.\nIt is accurate.",
               "Nothing was generated here.", "Our results improve by 2 points on the standard benchmark."]
    expected = sum(lsum.score(r, h)["rougeLsum"].fmeasure for h, r in zip(split_h, split_r)) / 4
    assert got["rougeLsum"] == pytest.approx(100 * expected, abs=1e-9)
    assert got["bleu"] == pytest.approx(sacrebleu.corpus_bleu(HYPS, [REFS]).score, abs=1e-9)
    assert got["n"] == 4 and got["empty_hypotheses"] == 1
    assert got["hyp_words_mean"] == pytest.approx((7 + 10 + 0 + 8) / 4)
    assert got["bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")


def test_rouge_uses_the_porter_stemmer_hand_computed():
    # stemmed: hyp [the, cat, were, run], ref [the, cat, ran]: 2 unigrams shared -> F1 = 2*(1/2*2/3)/(7/6) = 4/7
    # (without stemming only "the" matches: 2/7); bigram "the cat" shared: P 1/3, R 1/2 -> F1 = 2/5
    got = scoring.score(["the cats were running"], ["the cat ran"])
    assert got["rouge1"] == pytest.approx(400 / 7, abs=1e-9)
    assert got["rouge2"] == pytest.approx(40.0, abs=1e-9)
    assert got["rougeL"] == pytest.approx(400 / 7, abs=1e-9)
    assert scoring.score(["a b c d"], ["a b c d"])["bleu"] == pytest.approx(100.0)


def test_split_sentences_on_fixed_text():
    text = ("We propose a method, e.g. for parsing. It works well (Smith et al. 2020). Results are in "
            "Fig. 3 and Tab. 2. Dr. Who agrees! Does it? \"Yes.\" J. R. R. Tolkien wrote 3.5 books. 42 is the end")
    assert split_sentences(text) == [
        "We propose a method, e.g. for parsing.",
        "It works well (Smith et al. 2020).",
        "Results are in Fig. 3 and Tab. 2.",
        "Dr. Who agrees!",
        "Does it?",
        "\"Yes.\"",
        "J. R. R. Tolkien wrote 3.5 books.",
        "42 is the end",
    ]
    assert split_sentences("  ") == []
    assert lead("One. Two. Three. Four.", 3) == "One. Two. Three."


@pytest.mark.full
def test_lead_k_cli_keeps_one_line_per_document(tmp_path):
    src = write(tmp_path / "test.source", ["First one. Second one. Third one. Fourth.", "", "Only sentence"])
    out = tmp_path / "lead2.txt"
    proc = longmem_here("summarize", "lead", "--source", src, "--k", "2", "--out", out)
    assert proc.stdout.strip() == f"fairseq-longmem summarize lead: wrote lead-2 of 3 documents to {out}"
    assert out.read_text(encoding="utf-8").split("\n") == ["First one. Second one.", "", "Only sentence", ""]
    before = out.read_bytes()
    again = longmem_here("summarize", "lead", "--source", src, "--k", "2", "--out", out, check=False)
    assert again.returncode == 2 and "exists" in one_line_error(again, prefix="fairseq-longmem summarize lead: error:")
    for bad, needle in [(["--k", "0"], "--k: must be a positive integer"), (["--source", tmp_path / "none"], "not found"),
                        (["--bogus"], "unrecognized arguments: --bogus")]:
        args = {"--source": src, "--k": "2", "--out": tmp_path / "new.txt"}
        argv = [a for k, v in args.items() if k not in bad for a in (k, v)] + bad
        one_line_error(longmem_here("summarize", "lead", *argv, check=False), needle,
                       prefix="fairseq-longmem summarize lead: error:")
    assert out.read_bytes() == before and not (tmp_path / "new.txt").exists()


@pytest.mark.full
def test_score_cli_writes_results_and_merges_tables(tmp_path):
    hyp, ref = write(tmp_path / "hyp.txt", HYPS), write(tmp_path / "ref.txt", REFS)
    longmem_here("summarize", "score", "--hyp", hyp, "--ref", ref, "--model", "infinite_former", "--checkpoint",
            "ck/checkpoint_last.pt", "--split", "test", "--decoding", "beam=4 lenpen=2.0", "--out", tmp_path / "a")
    row = json.loads((tmp_path / "a" / "results.json").read_text())
    direct = scoring.score(HYPS, REFS)
    for key in ("rouge1", "rouge2", "rougeL", "rougeLsum", "bleu", "n"):
        assert row[key] == pytest.approx(direct[key])
    assert (row["model"], row["checkpoint"], row["split"], row["decoding"]) == (
        "infinite_former", "ck/checkpoint_last.pt", "test", "beam=4 lenpen=2.0")
    assert row["provenance"]["command"].startswith("fairseq-longmem summarize score --hyp ")
    assert "--model infinite_former" in row["provenance"]["command"] and row["provenance"]["fairseq_longmem"]
    assert row["provenance"]["seeds"] == {"ck/checkpoint_last.pt": None}  # no such file: no seed to read
    md = (tmp_path / "a" / "results.md").read_text().splitlines()
    assert md[0].startswith("| model | checkpoint | params | split | examples | ROUGE-1 | ROUGE-2 | ROUGE-L |")
    cells = [c.strip() for c in md[2].strip("|").split("|")]
    assert cells[:5] == ["infinite_former", "ck/checkpoint_last.pt", "-", "test", "4"]  # no such file: no params
    assert cells[5:10] == [f"{row[k]:.2f}" for k in ("rouge1", "rouge2", "rougeL", "rougeLsum", "bleu")]
    assert cells[-1] == "beam=4 lenpen=2.0"
    # a second row (perfect hypotheses), then the merged table keeps the order given
    longmem_here("summarize", "score", "--hyp", ref, "--ref", ref, "--model", "oracle", "--split", "test",
            "--out", tmp_path / "b")
    proc = longmem_here("results", "summarization", tmp_path / "b" / "results.json", tmp_path / "a" / "results.json",
                   "--out", tmp_path / "cmp")
    rows = json.loads((tmp_path / "cmp" / "comparison.json").read_text())
    assert [r["model"] for r in rows] == ["oracle", "infinite_former"]
    assert rows[0]["rouge1"] == pytest.approx(100.0) and rows[0]["bleu"] == pytest.approx(100.0)
    lines = (tmp_path / "cmp" / "comparison.md").read_text().splitlines()
    assert len(lines) == 4 and lines[2].startswith("| oracle | - | - | test | 4 | 100.00 | 100.00 | 100.00 | 100.00 | 100.00")
    assert proc.stdout.strip() == "\n".join(lines)
    # bad input to the merge: one line, nothing written
    before = (tmp_path / "cmp" / "comparison.md").read_bytes()
    (tmp_path / "bad.json").write_text("{")
    (tmp_path / "row.json").write_text(json.dumps({"model": "m"}))
    for args, needle in [([tmp_path / "none.json"], "not found"), ([tmp_path / "bad.json"], "is not JSON"),
                         ([tmp_path / "row.json"], "lacks split, n, rouge1"),
                         ([tmp_path / "a" / "results.json"], "exists (use --force"),
                         ([tmp_path / "a" / "results.json", "--bogus"], "unrecognized arguments: --bogus")]:
        proc = longmem_here("results", "summarization", *args, "--out", tmp_path / "cmp", check=False)
        one_line_error(proc, needle, prefix="fairseq-longmem results summarization: error:")
    assert (tmp_path / "cmp" / "comparison.md").read_bytes() == before
    assert sorted(p.name for p in (tmp_path / "cmp").iterdir()) == ["comparison.json", "comparison.md"]


def test_the_same_results_file_given_twice_is_refused(tmp_path):
    """The same results.json given twice (or by two names) used to make two rows of one result."""
    row = {"model": "m", "split": "test", "n": 4, "rouge1": 1.0, "rouge2": 0.5, "rougeL": 1.0, "bleu": 2.0}
    (tmp_path / "a").mkdir()
    first = tmp_path / "a" / "results.json"
    first.write_text(json.dumps(row))
    (tmp_path / "link.json").symlink_to(first)
    for paths, needle in (([first, first], f"{first} given twice (the same file), which would make two rows of "
                                           "one result; give each results.json once"),
                          ([first, tmp_path / "link.json"], f"{first} and {tmp_path / 'link.json'} given twice "
                                                             "(the same file, by two names)")):
        proc = longmem_here("results", "summarization", *paths, "--out", tmp_path / "cmp", check=False)
        one_line_error(proc, needle, prefix="fairseq-longmem results summarization: error:", status=2, alone=True)
    assert not (tmp_path / "cmp").exists()


@pytest.mark.full
def test_score_cli_errors(tmp_path):
    hyp = write(tmp_path / "hyp.txt", HYPS[:2])
    ref = write(tmp_path / "ref.txt", REFS[:3])
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    base = ["--model", "m", "--split", "test", "--out", str(tmp_path / "out")]
    proc = longmem_here("summarize", "score", "--hyp", hyp, "--ref", ref, *base, check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"fairseq-longmem summarize score: error: --hyp {hyp} has 2 lines but --ref {ref} has 3: the files must be "
        "line-aligned (one summary per line)"]
    assert not (tmp_path / "out").exists()
    proc = longmem_here("summarize", "score", "--hyp", empty, "--ref", ref, *base, check=False)
    assert proc.returncode == 2 and "is empty" in proc.stderr
    proc = longmem_here("summarize", "score", "--hyp", tmp_path / "missing.txt", "--ref", ref, *base, check=False)
    assert proc.returncode == 2 and "not found" in proc.stderr
    proc = longmem_here("summarize", "score", "--hyp", ref, "--ref", ref, *base, "--bleu-tokenize", "klingon", check=False)
    one_line_error(proc, "invalid choice: 'klingon'", prefix="fairseq-longmem summarize score: error:")
    assert not (tmp_path / "out").exists()
    longmem_here("summarize", "score", "--hyp", ref, "--ref", ref, *base)
    before = (tmp_path / "out" / "results.json").read_bytes()
    proc = longmem_here("summarize", "score", "--hyp", ref, "--ref", ref, *base, check=False)
    assert proc.returncode == 2 and "results.md, " in proc.stderr and "already exist; pass --force" in proc.stderr
    assert (tmp_path / "out" / "results.json").read_bytes() == before
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes("caf\u00e9 one\nb two\ncafe three\n".encode("latin-1"))
    proc = longmem_here("summarize", "score", "--hyp", latin1, "--ref", ref, *base, "--force", check=False)
    one_line_error(proc, f"--hyp {latin1}:1 is not UTF-8 text", prefix="fairseq-longmem summarize score: error:")


def _naive_banned(prefix, n):
    """Tokens that would complete an n-gram already in ``prefix`` (a list)."""
    if len(prefix) < n - 1:
        return set()
    tail = prefix[len(prefix) - (n - 1):]
    return {prefix[i + n - 1] for i in range(len(prefix) - n + 1) if prefix[i:i + n - 1] == tail}


def test_ngram_blocker_fix_bans_exactly_the_repeated_ngrams(monkeypatch):
    from fairseq.ngram_repeat_block import NGramRepeatBlock

    # restore fairseq's class after the test (the patch is process-wide)
    monkeypatch.setattr(NGramRepeatBlock, "forward", NGramRepeatBlock.forward)
    monkeypatch.setattr(NGramRepeatBlock, "_prefix_fix", False, raising=False)
    ngram_blocking.install()
    gen = torch.Generator().manual_seed(0)
    bsz, beam, vocab, step, n, pad = 2, 3, 7, 11, 3, 1
    tokens = torch.full((bsz * beam, step + 6), pad, dtype=torch.long)  # fairseq's buffer: max_len + 2 columns
    tokens[:, : step + 1] = torch.randint(3, 6, (bsz * beam, step + 1), generator=gen)  # few symbols: many repeats
    blocker = NGramRepeatBlock(n, use_extension=False)
    lprobs = blocker(tokens, torch.zeros(bsz * beam, vocab), bsz, beam, step)
    total = 0
    for row in range(bsz * beam):
        banned = _naive_banned(tokens[row, : step + 1].tolist(), n)
        total += len(banned)
        assert {i for i in range(vocab) if lprobs[row, i] == float("-inf")} == banned
    assert total > 0


@pytest.mark.full
def test_shell_scripts_help_and_errors(tmp_path):
    def bash(*args):
        return run(["bash", *args], check=False)

    helped = bash("scripts/train-summarizer.sh", "--help")
    assert helped.returncode == 0 and "--truncate-source --max-source-positions 1024" in helped.stdout
    assert "infinite_former" in helped.stdout and "fastformer" in helped.stdout
    proc = bash("scripts/train-summarizer.sh", "lstm", tmp_path, tmp_path / "ck")
    assert proc.returncode == 2 and proc.stderr.strip() == (
        "train-summarizer.sh: error: unknown ARM 'lstm' (infinite_former, infinite_former_lead_only, fastformer or transformer)")
    proc = bash("scripts/train-summarizer.sh", "transformer", tmp_path / "nothing", tmp_path / "ck")
    assert proc.returncode == 2 and proc.stderr.strip().startswith("train-summarizer.sh: error: ") \
        and "dict.source.txt not found" in proc.stderr
    proc = bash("scripts/generate-summaries.sh", tmp_path / "missing.pt", tmp_path, "test", tmp_path / "gen")
    assert proc.returncode == 2 and proc.stderr.strip() == (
        f"generate-summaries.sh: error: checkpoint {tmp_path / 'missing.pt'} not found")
    ckpt = tmp_path / "c.pt"
    ckpt.write_bytes(b"")
    proc = bash("scripts/generate-summaries.sh", ckpt, tmp_path, "test", tmp_path / "gen")
    assert proc.returncode == 2 and "holds neither bin/dict.source.txt nor dict.source.txt" in proc.stderr
    assert bash("scripts/generate-summaries.sh", "--help").stdout.count("--post-process sentencepiece") >= 1
    proc = bash("scripts/summarization-comparison.sh", "--split", "train")
    assert proc.returncode == 2 and proc.stderr.strip() == (
        "summarization-comparison.sh: error: --split must be valid or test, not 'train'")
    proc = bash("scripts/summarization-comparison.sh", "--seeds", "3,3")
    assert proc.returncode == 2 and proc.stderr.strip() == (
        "summarization-comparison.sh: error: seed 3 given twice in --seeds 3,3; give each seed once")
    proc = bash("scripts/summarization-comparison.sh", "--rouge-tokenizer", "nltk")
    assert proc.returncode == 2 and proc.stderr.strip() == (
        "summarization-comparison.sh: error: --rouge-tokenizer must be unicode or rouge-score, not 'nltk'")
    # an empty list and a bad budget are refused before any data is prepared or any folder made
    out = tmp_path / "comparison"
    for args, env, message in ((["--seeds", ""], {}, "--seeds needs at least one seed (e.g. --seeds 1,2,3)"),
                               (["--arms", ""], {}, "--arms needs at least one arm (infinite_former, "
                                                    "infinite_former_lead_only, fastformer, transformer)"),
                               ([], {"MAX_UPDATE": "abc"}, "MAX_UPDATE must be a non-negative integer, not 'abc'"),
                               ([], {"LR": "x"}, "LR must be a positive number (e.g. 0.001), not 'x'"),
                               ([], {"LAYERS": "0"}, "LAYERS must be a positive integer, not '0'")):
        proc = run(["bash", "scripts/summarization-comparison.sh", "--out", out, "--data", tmp_path / "data", *args],
                   check=False, extra_env=env)
        assert proc.returncode == 2 and proc.stderr == f"summarization-comparison.sh: error: {message}\n", proc
        assert proc.stdout == "" and not out.exists() and not (tmp_path / "data").exists()


@pytest.mark.full
def test_generate_refuses_a_truncated_checkpoint_in_one_line(tmp_path):
    data = tmp_path / "bin"
    data.mkdir()
    for name in ("dict.source.txt", "dict.target.txt", "test.source-target.source.idx"):
        (data / name).write_text("")
    checkpoint = tmp_path / "checkpoint_last.pt"
    buffer = __import__("io").BytesIO()
    torch.save({"model": {"w": torch.zeros(1000)}}, buffer)
    checkpoint.write_bytes(buffer.getvalue()[:2000])  # cut short, as by a crash mid-copy
    before = checkpoint.read_bytes()
    proc = run(["bash", "scripts/generate-summaries.sh", checkpoint, data, "test", tmp_path / "out"], check=False)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip() and "tensorboardX" not in line]
    assert len(lines) == 1 and "cannot read checkpoint" in lines[0] and "truncated" in lines[0], proc.stderr
    assert checkpoint.read_bytes() == before
    assert not (tmp_path / "out").exists()


NON_LATIN = {
    "Cyrillic": "Мы предлагаем новый синтаксический анализатор. Он быстрый и точный.",
    "Greek": "Προτείνουμε έναν νέο συντακτικό αναλυτή. Είναι γρήγορος και ακριβής.",
    "Japanese": "新しい構文解析器を提案する。高速で正確である。",
    "Hindi": "हम एक नया पार्सर प्रस्तावित करते हैं। यह तेज़ और सटीक है।",
    "Chinese": "我们提出了一种新的句法分析器。它快速而准确。",
    "Thai": "เราเสนอตัวแยกวิเคราะห์ประโยคแบบใหม่ที่รวดเร็วและแม่นยำ",  # one sentence, no spaces
}


@pytest.mark.parametrize("script", sorted(NON_LATIN))
def test_identical_non_latin_texts_score_100(script):
    """rouge-score's default tokenizer keeps [a-z0-9] only: these scored 0."""
    text = NON_LATIN[script]
    got = scoring.score([text], [text])
    for t in ("rouge1", "rouge2", "rougeL", "rougeLsum", "bleu"):
        assert got[t] == pytest.approx(100.0), (script, t, got[t])
    # and a different text in the same script scores below 100 but above 0 (shared words/characters)
    other = scoring.score([text], [NON_LATIN[script][: len(text) // 2]])
    assert 0 < other["rouge1"] < 100


def test_unicode_tokenizer_equals_rouge_score_on_ascii_and_is_in_the_signature():
    from rouge_score.tokenizers import DefaultTokenizer

    default = DefaultTokenizer(use_stemmer=True)
    ours = tokenizers.UnicodeTokenizer()
    for text in HYPS + REFS + ["snake_case x2 3.5% U.S.A. (running) don't THE-END", "   "]:
        assert ours.tokenize(text) == default.tokenize(text), text
    # the English fixtures score exactly as rouge-score's own tokenizer scores them
    fixtures = ROOT_PATH / "tests" / "fixtures" / "summarization"
    for path in fixtures.rglob("*"):
        if path.suffix in (".target", ".source", ".jsonl"):
            for line in path.read_text(encoding="utf-8").splitlines():
                assert ours.tokenize(line) == default.tokenize(line), (path.name, line[:80])
    assert "tokenizer" in scoring.score(["a b"], ["a b"])["rouge_signature"]


def test_thai_and_other_unspaced_alphabets_are_one_letter_per_token():
    """A space-free Thai sentence was one ROUGE token: identical single sentences scored ROUGE-2 0."""
    tok = tokenizers.UnicodeTokenizer()
    # แ ม+mai-ek น ย ำ: each letter a token, the tone mark (a combining mark) joins its letter
    assert tok.tokenize("แม่นยำ") == ["แ", "ม\u0e48", "น", "ย", "ำ"]
    # Latin after Thai starts a word of its own; spaces and punctuation separate as before
    assert tok.tokenize("กขABC, ค") == ["ก", "ข", "abc", "ค"]
    text = NON_LATIN["Thai"]
    assert len(tok.tokenize(text)) > 20
    # hand-computed: hypothesis = the reference's first half of its letters -> every hypothesis
    # bigram is in the reference: ROUGE-2 precision 1, recall (h-1)/(r-1)
    ref = tok.tokenize(text)
    h = len(ref) // 2
    hyp_text = "".join(ref[:h])
    p, r = 1.0, (h - 1) / (len(ref) - 1)
    assert scoring.score([hyp_text], [text])["rouge2"] == pytest.approx(100 * 2 * p * r / (p + r))


@pytest.mark.parametrize("script,tokenize", [("Chinese", "zh"), ("Japanese", "char"), ("Thai", "char"),
                                             ("Cyrillic", "13a"), ("Hindi", "13a"), ("Greek", "13a")])
def test_bleu_tokenizer_is_chosen_from_the_references(script, tokenize):
    text = NON_LATIN[script]
    half = text[: len(text) // 2]
    got = scoring.score([half], [text])
    assert got["bleu_signature"].startswith(f"nrefs:1|case:mixed|eff:no|tok:{tokenize}|"), got["bleu_signature"]
    assert got["bleu"] == pytest.approx(sacrebleu.corpus_bleu([half], [[text]], tokenize=tokenize).score, abs=1e-9)
    assert got["bleu_tokenize_choice"].startswith(f"auto: {tokenize}")


def test_bleu_tokenizer_keeps_13a_for_english_with_a_quotation_and_can_be_forced():
    english = [REFS[1] + " The example 我们提出了 is Chinese."]
    assert scoring.score(english, english)["bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a|")
    assert tokenizers.choose_bleu_tokenizer(["", " "])[0] == "13a"
    text = NON_LATIN["Chinese"]
    forced = scoring.score([text[:9]], [text], bleu_tokenize="char")
    assert forced["bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:char|")
    assert forced["bleu"] == pytest.approx(sacrebleu.corpus_bleu([text[:9]], [[text]], tokenize="char").score)
    assert forced["bleu_tokenize_choice"] == "--bleu-tokenize char"
    assert scoring.warnings(forced) == []  # another unspaced tokenizer: the user's choice, no warning


@pytest.mark.parametrize("script,recommended", [("Chinese", "zh"), ("Japanese", "char")])
def test_a_space_tokenizer_on_unspaced_references_gets_one_warning(script, recommended):
    text = NON_LATIN[script]
    half = text[: len(text) // 2]
    row = scoring.score([half], [text], bleu_tokenize="13a")
    assert row["bleu"] < 1.0 < scoring.score([half], [text])["bleu"]  # the silent near-0
    (warning,) = scoring.warnings(row)
    assert "--bleu-tokenize 13a" in warning and f"use --bleu-tokenize {recommended}" in warning, warning
    english = [REFS[1]]
    assert scoring.warnings(scoring.score(english, english, bleu_tokenize="13a")) == []


def test_rouge_score_tokenizer_reproduces_rouge_score_itself():
    """--rouge-tokenizer rouge-score: rouge-score's own tokenizer ([a-z0-9] words), which drops
    the accented letters the default Unicode tokenizer keeps (docs/results/aclsum.md's ACLSum table)."""
    hyps, refs = ["Hajič and Padó (2010) parse Czech."], ["Hajic and Pad parse Czech and German."]
    got = scoring.score(hyps, refs, rouge_tokenizer_name="rouge-score")
    direct = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=True).score(refs[0], hyps[0])
    for t in ("rouge1", "rouge2", "rougeL"):
        assert got[t] == pytest.approx(100 * direct[t].fmeasure, abs=1e-9)
    assert got["rouge1"] != pytest.approx(scoring.score(hyps, refs)["rouge1"])
    assert "rouge-score default" in got["rouge_signature"]


def test_results_record_the_versions_that_decide_the_scores():
    from importlib import metadata

    versions = scoring.versions()
    assert versions == {"rouge_score_version": metadata.version("rouge-score"),
                        "nltk_version": metadata.version("nltk"), "sacrebleu_version": metadata.version("sacrebleu")}
    signature = scoring.score(["a b"], ["a b"])["rouge_signature"]
    assert f"nltk {metadata.version('nltk')}" in signature and "unicode-v2" in signature
