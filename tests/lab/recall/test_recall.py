"""Recall by distance (docs/results/recall.md): generator, scorer, table and plot, refusals.

References are independent of the code under test: the binarized splits read with fairseq's own
``data_utils.load_indexed_dataset``, the ``streaming_lm`` task's own test dataset read segment by
segment (the training path), one forward call per example, stub models whose answers are known
and hand-counted, and the t quantile written out.
"""
import json
import math
import os
import re

import numpy as np
import pytest
import torch

import helpers
from fairseq_plugins.lab.recall import data as recall_data
from fairseq_plugins.lab.recall.symbols import KEY_MARKER, QUERY_MARKER, key_symbols
from fairseq_plugins.errors import ConfigError
from fairseq_plugins.lab.common import arms
from fairseq_plugins.lab.recall import score as recall
from fairseq_plugins.lab.recall import plot as recall_plot
from fairseq_plugins.lab.recall import table as recall_table
from fairseq_plugins.lab.common.answers import read_answers


WINDOW, MULTIPLES, KEYS, REPEAT = 16, ["0.5", "1", "2", "4"], 8, 2
OPTIONS = ["--window", str(WINDOW), "--distances", " ".join(MULTIPLES), "--keys", str(KEYS), "--repeat", str(REPEAT),
           "--train-examples", "24", "--valid-per-distance", "2", "--test-per-distance", "3"]
TINY = ["--decoder-layers", "1", "--decoder-embed-dim", "32", "--decoder-attention-heads", "2",
        "--decoder-ffn-embed-dim", "64"]
INFINITE_FORMER = ["--task", "streaming_lm", "--arch", "infinite_former_lm", "--tokens-per-sample", "8",
                   "--mem-len", "8", "--num-basis-functions", "8", "--num-samples", "8", "--batch-size", "4",
                   "--reset-memory-at-document-boundary", *TINY]
TRANSFORMER_LM = ["--task", "language_modeling", "--arch", "transformer_lm", "--tokens-per-sample", str(WINDOW), *TINY]


def _stage_args(books, out, seed, *extra):
    return [*OPTIONS, "--books", str(books), "--out", str(out), "--seed", str(seed), *extra]


@pytest.fixture(scope="module")
def data(books_bin, tmp_path_factory):
    """make-recall.sh on the books fixture: W 16, distances 0.5 1 2 4 x W, 8 keys, the key phrase twice."""
    out = tmp_path_factory.mktemp("recall") / "data"
    proc = helpers.data_prep("fairseq_plugins/lab/recall/make-recall.sh", *_stage_args(books_bin.parent, out, 1))
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.fixture(scope="module")
def checkpoints(data, tmp_path_factory):
    """Randomly initialised tiny checkpoints on the recall data (fairseq-train's layout)."""
    root = tmp_path_factory.mktemp("checkpoints")
    return {name: helpers.write_checkpoint(root / f"{name}.pt", data / "bin", *options)
            for name, options in (("infinite_former", INFINITE_FORMER), ("transformer_lm", TRANSFORMER_LM),
                                  ("memory_off", [*INFINITE_FORMER, "--no-long-term-memory"]))}


def _manifest(data):
    return json.loads((data / "manifest.json").read_text())


# ----------------------------------------------------------------------------- generator


def test_every_key_lies_at_its_distance_in_the_binarized_splits(data):
    from fairseq.data import Dictionary, data_utils

    manifest = _manifest(data)
    d = Dictionary.load(str(data / "bin" / "dict.txt"))
    closed = key_symbols(KEYS)
    assert manifest["keys"] == closed and manifest["chance"] == 1 / KEYS
    assert manifest["length"] == 4 * WINDOW + 2 * REPEAT + WINDOW  # the longest distance + 2ℓ + W
    for split in ("train", "valid", "test"):
        lines = data_utils.load_indexed_dataset(str(data / "bin" / split), d, combine=False)
        stream = torch.cat([lines[i] for i in range(len(lines))]).long()  # the split as the tasks concatenate it
        records = manifest["splits"][split]["records"]
        assert len(lines) == 2 * len(records)
        for i, r in enumerate(records):
            line = lines[r["item"]].long()
            assert r["item"] == 2 * i and lines[2 * i + 1].tolist() == [d.eos()]
            words = [d[t] for t in line[:-1].tolist()]
            assert len(words) == r["tokens"] <= manifest["length"]  # never longer than stated
            m = r["multiple"]
            assert r["distance"] == float(m) * WINDOW == manifest["distances"][m]
            assert r["query_offset"] - r["key_offset"] == r["distance"]  # exactly at the requested distance
            assert words[r["query_offset"]] == QUERY_MARKER and words[r["answer_offset"]] == r["key"]
            assert r["answer_offset"] == len(words) - 1  # the answer ends the line: the loss is on it alone
            assert r["key"] in closed
            assert [k for k, w in enumerate(words) if w == KEY_MARKER] == [k - 1 for k in r["key_offsets"]]
            assert [words[k] for k in r["key_offsets"]] == [r["key"]] * REPEAT
            assert r["key_offsets"][-1] == r["key_offset"]
            # the key occurs in the key phrases and as the answer, nowhere else; the rest is filler pieces
            ours = {k for k, w in enumerate(words) if w.startswith("@") and w != "@"}
            markers = {k - 1 for k in r["key_offsets"]}
            assert ours == {*r["key_offsets"], *markers, r["query_offset"], r["answer_offset"]}
            assert d.unk() not in line.tolist()
            # start: the example's place in the concatenated split
            assert stream[r["start"] + r["key_offset"]] == d.index(r["key"])
            assert stream[r["start"] + r["query_offset"] + 1] == d.index(r["key"])
    # test: the same number of examples at every distance; train: the token-balanced mix, short distances first
    per_test = {m: sum(r["multiple"] == m for r in manifest["splits"]["test"]["records"]) for m in MULTIPLES}
    assert per_test == {m: 3 for m in MULTIPLES}
    per_train = [sum(r["multiple"] == m for r in manifest["splits"]["train"]["records"]) for m in MULTIPLES]
    assert sum(per_train) == 24 and per_train == sorted(per_train, reverse=True) and per_train[0] > per_train[-1]


def test_filler_is_the_books_text_and_two_seeds_differ(data, books_bin, tmp_path):
    import sentencepiece

    sp = sentencepiece.SentencePieceProcessor(model_file=str(books_bin.parent / "spm.model"))
    paragraphs = [line for line in (books_bin.parent / "raw" / "test.txt").read_text(encoding="utf-8").splitlines()
                  if line.strip()]
    known = [[sp.id_to_piece(i) for i in ids if not sp.is_unknown(i)] for ids in sp.encode(paragraphs)]
    book = " " + " ".join(" ".join(pieces) for pieces in known) + " "
    for line in (data / "raw" / "test.txt").read_text(encoding="utf-8").split("\n")[::2][:-1]:
        filler = [w for w in line.split()[:-2] if w not in (KEY_MARKER, *key_symbols(KEYS))]
        assert " " + " ".join(filler) + " " in book  # one run of the books split's pieces, the key phrase cut out

    def generate(seed):
        raw = tmp_path / f"seed{seed}"
        assert recall_data.main(["generate", *_stage_args(books_bin.parent, tmp_path / "unused", seed),
                                 "--raw", str(raw)]) == 0
        return raw

    same, other = generate(1), generate(2)
    for split in ("train", "valid", "test"):
        mine = (data / "raw" / f"{split}.txt").read_text(encoding="utf-8")
        assert (same / f"{split}.txt").read_text(encoding="utf-8") == mine
        assert (other / f"{split}.txt").read_text(encoding="utf-8") != mine


def test_a_tight_length_puts_the_longest_distance_at_the_start(books_bin, tmp_path):
    args = [*_stage_args(books_bin.parent, tmp_path / "unused", 3), "--length", str(4 * WINDOW + 2 * REPEAT + 1)]
    assert recall_data.main(["generate", *args, "--raw", str(tmp_path / "raw")]) == 0
    for line in (tmp_path / "raw" / "test.jsonl").read_text().splitlines():
        r = json.loads(line)
        assert r["tokens"] <= 4 * WINDOW + 2 * REPEAT + 1 and (r["distance"] < 4 * WINDOW or r["prefix"] == 0)


@pytest.mark.parametrize("extra, needles", [
    (["--distances", "0.5 4", "--length", "50"], ["distance 4 x W = 64 tokens does not fit", "--length 50",
                                                  "raise --length or drop 4"]),
    (["--distances", "0.5 400"], ["400 x W = 6400 tokens needs up to", "filler text", "drop 400 from --distances"]),
    (["--distances", "0.3"], ["not a whole number", "tokens"]),
    (["--books", "/nonexistent/books"], ["no prepared books corpus", "bash data-prep/prepare-lm.sh --out"]),
])
def test_bad_data_options_are_one_line_and_write_nothing(books_bin, tmp_path, extra, needles):
    out = tmp_path / "out"
    proc = helpers.data_prep("fairseq_plugins/lab/recall/make-recall.sh", *_stage_args(books_bin.parent, out, 1), *extra)
    helpers.one_line_error(proc, *needles, prefix="make-recall.sh: error:", status=2, alone=True)
    assert not out.exists()


def test_rerun_is_up_to_date_and_other_options_are_refused(data, books_bin):
    before = helpers.snapshot(data)
    again = helpers.data_prep("fairseq_plugins/lab/recall/make-recall.sh", *_stage_args(books_bin.parent, data, 1))
    assert again.returncode == 0 and "up to date" in again.stdout
    other = helpers.data_prep("fairseq_plugins/lab/recall/make-recall.sh", *_stage_args(books_bin.parent, data, 2))
    helpers.one_line_error(other, "different options", "--force", prefix="make-recall.sh: error:", status=2)
    assert helpers.snapshot(data) == before


# ----------------------------------------------------------------------------- scorer


class _Stub(torch.nn.Module):
    """Logit 1 on one symbol per position, 0 elsewhere: at the query marker the key it sees in its
    input (the token after the last key marker) when that key's index is even, else the query
    marker itself; elsewhere ``</s>``."""

    def __init__(self, dictionary):
        super().__init__()
        self.d = dictionary

    def forward(self, tokens):
        logits = torch.zeros(*tokens.shape, len(self.d))
        marker, query = self.d.index(KEY_MARKER), self.d.index(QUERY_MARKER)
        for b, row in enumerate(tokens.tolist()):
            for t, token in enumerate(row):
                seen = [row[k + 1] for k in range(t) if row[k] == marker]
                guess = self.d.eos()
                if token == query:
                    guess = seen[-1] if seen and seen[-1] % 2 == 0 else query
                logits[b, t, guess] = 1.0
        return logits, {}


def test_accuracy_per_distance_is_the_hand_count(data):
    from fairseq.data import Dictionary

    manifest = _manifest(data)
    d = Dictionary.load(str(data / "bin" / "dict.txt"))
    examples = recall.load_examples(str(data / "bin"), "test", d, manifest)
    records = manifest["splits"]["test"]["records"]
    lose = -math.log(math.e + len(d) - 1)  # log-probability of a symbol whose logit is 0 beside one of 1
    for window in (None, WINDOW):
        got = recall.score_examples(_Stub(d), examples, manifest, window, batch_size=2)
        for cell in got["distances"]:
            mine = [r for r in records if r["multiple"] == cell["multiple"]]
            # the stub answers when the key's index is even and the key is in view: always when reading the
            # whole example, within the last W tokens only when d <= W - 1
            right = [d.index(r["key"]) % 2 == 0 and (window is None or r["distance"] <= window - 1) for r in mine]
            assert (cell["examples"], cell["correct"]) == (len(mine), sum(right))
            assert cell["accuracy"] == sum(right) / len(mine)
            assert cell["mean_log_prob"] == pytest.approx(np.mean([lose + 1.0 if ok else lose for ok in right]))
        assert got["correct"] == sum(c["correct"] for c in got["distances"]) and got["examples"] == len(records)


def test_checkpoints_score_as_one_call_per_example(data, checkpoints, tmp_path):
    """score (batched, padded, only the answer positions projected) = one forward per example, whole
    (∞-former) or its last W tokens (transformer_lm); the CLI's JSON = score()."""
    manifest = _manifest(data)
    records = manifest["splits"]["test"]["records"]
    for name in ("infinite_former", "transformer_lm"):
        result = recall.score(str(checkpoints[name]), str(data / "bin"), batch_size=5)
        model, cfg, task = recall.load_checkpoint(str(checkpoints[name]), str(data / "bin"))
        d = task.source_dictionary
        examples = recall.load_examples(str(data / "bin"), "test", d, manifest)
        hits, lps = [], []
        with torch.no_grad():
            for row, r in zip(examples.rows, records):
                context = row if name == "infinite_former" else row[-WINDOW:]
                logits = model(context.unsqueeze(0))[0][0, -1]
                hits.append(int(logits.argmax()) == d.index(r["key"]))
                lps.append(float(torch.log_softmax(logits.double(), -1)[d.index(r["key"])]))
        for cell in result["distances"]:
            mine = [i for i, r in enumerate(records) if r["multiple"] == cell["multiple"]]
            assert cell["correct"] == sum(hits[i] for i in mine)
            assert cell["mean_log_prob"] == pytest.approx(np.mean([lps[i] for i in mine]), abs=1e-4)
        assert result["window"] == WINDOW and result["keys"] == KEYS and not result["memory_wiped"]
        out = tmp_path / f"{name}.json"
        status, _, err = helpers.longmem_in_process("recall", "score", "--checkpoint", checkpoints[name],
                                                    "--data", data / "bin", "--batch-size", "5", "--json", out)
        assert status == 0, err
        written = json.loads(out.read_text())
        assert written["distances"] == result["distances"]
        assert written["provenance"]["seeds"] == {str(checkpoints[name]): 1}  # the training seed it records
        again = helpers.longmem_in_process("recall", "score", "--checkpoint", checkpoints[name], "--data",
                                           data / "bin", "--json", out)
        assert again[0] == 2 and "--force" in again[2] and json.loads(out.read_text()) == written


def test_memory_arms_match_the_streaming_task(data, checkpoints):
    """The ∞-former's answer logits in score's reading = the training path: the streaming_lm task's own
    test dataset, segment after segment, memory reset at each document (the examples that a stream
    boundary cuts in two, read there from an empty memory, are left out)."""
    from fairseq.data import Dictionary

    model, cfg, task = recall.load_checkpoint(str(checkpoints["infinite_former"]), str(data / "bin"))
    assert cfg.task.reset_memory_at_document_boundary
    task.load_dataset("test")
    dataset, query = task.dataset("test"), task.source_dictionary.index(QUERY_MARKER)
    src, logits = [], []
    with torch.no_grad():
        for i in range(len(dataset)):
            batch = dataset.collater([dataset[i]])
            src.append(batch["net_input"]["src_tokens"])
            logits.append(model(**batch["net_input"])[0])
    src, logits = torch.cat(src, 1), torch.cat(logits, 1)
    at = (src == query).nonzero().tolist()  # the examples in order: the streams hold them one after the other
    whole = [i for i, (b, j) in enumerate(at) if bool(dataset.starts[b, :j + 1].any())]
    assert len(at) == 4 * 3 and len(whole) >= 8
    streamed = torch.stack([logits[b, j] for b, j in at])[whole]
    d = Dictionary.load(str(data / "bin" / "dict.txt"))
    examples = recall.load_examples(str(data / "bin"), "test", d, _manifest(data))
    with torch.no_grad():
        direct = torch.stack([model(examples.rows[i].unsqueeze(0))[0][0, -1] for i in whole])
    torch.testing.assert_close(direct, streamed, atol=1e-4, rtol=1e-4)
    got = read_answers(model, examples.rows, examples.positions, examples.answers, batch_size=4)
    assert torch.equal(got.predictions[whole, 0], streamed.argmax(-1))


def test_a_checkpoint_of_another_dictionary_is_one_line(books_bin, data, tmp_path):
    other = helpers.write_checkpoint(tmp_path / "books.pt", books_bin, *TRANSFORMER_LM)
    out = tmp_path / "r.json"
    status, _, err = helpers.longmem_in_process("recall", "score", "--checkpoint", other, "--data", data / "bin",
                                                "--json", out)
    assert status == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith("fairseq-longmem recall score: error: ") and "another dictionary" in err
    assert "score it on the data it was trained on" in err and not out.exists()


@pytest.mark.parametrize("option, value, what", [("--batch-size", "-1", "a positive integer"),
                                                  ("--batch-size", "0", "a positive integer"),
                                                  ("--max-examples", "0", "a positive integer"),
                                                  ("--max-examples", "-1", "a positive integer")])
def test_counts_no_run_can_honour_are_refused_before_scoring(data, checkpoints, tmp_path, option, value, what):
    """A negative --batch-size used to score nothing and write accuracy 0 into the JSON, --max-examples 0
    to score every example, -1 all but the last, --batch-size 0 to end in a traceback: each is
    argparse's one line naming the option, exit status 2, nothing written."""
    out = tmp_path / "r.json"
    proc = helpers.longmem_here("recall", "score", "--checkpoint", checkpoints["infinite_former"], "--data",
                                data / "bin", option, value, "--json", out, check=False)
    helpers.one_line_error(proc, f"argument {option}: must be {what}, got '{value}'",
                           prefix="fairseq-longmem recall score: error:", status=2, alone=True)
    assert not out.exists()


def test_a_torch_file_that_is_no_checkpoint_is_one_line(data, tmp_path):
    """A Hugging Face pytorch_model.bin (a plain state dict) used to end in fairseq's KeyError:
    'best_loss' traceback: one line naming the file and the fix, exit status 2, nothing written."""
    hf = tmp_path / "pytorch_model.bin"
    torch.save({"transformer.wte.weight": torch.zeros(8, 4), "lm_head.weight": torch.zeros(8, 4)}, hf)
    out = tmp_path / "r.json"
    proc = helpers.longmem_here("recall", "score", "--checkpoint", hf, "--data", data / "bin", "--json", out,
                                check=False)
    line = helpers.one_line_error(proc, prefix="fairseq-longmem recall score: error:", status=2, alone=True)
    assert line == (f"fairseq-longmem recall score: error: {hf} is a torch file but not a fairseq checkpoint: it is "
                    "a plain state dict of 2 tensors (as a Hugging Face pytorch_model.bin or model.state_dict() is), "
                    "without fairseq's model, cfg (or args), optimizer_history, extra_state; it was left as it is; "
                    "pass a checkpoint_*.pt written by fairseq-train with --checkpoint (a Hugging Face GPT-2 folder "
                    "becomes one with `fairseq-longmem gpt2 convert --hf-dir DIR --out OUT`)")
    assert not out.exists()


def test_memory_wiped_without_long_term_memory_is_one_line(data, checkpoints, tmp_path):
    out = tmp_path / "wiped.json"
    status, _, err = helpers.longmem_in_process("recall", "score", "--checkpoint", checkpoints["memory_off"],
                                                "--data", data / "bin", "--memory-wiped", "--json", out)
    assert status == 2 and len(err.strip().splitlines()) == 1, err
    assert "--memory-wiped needs a model with a long-term memory" in err and "drop --memory-wiped" in err
    assert not out.exists()
    wiped = recall.score(str(checkpoints["infinite_former"]), str(data / "bin"), memory_wiped=True)
    assert wiped["memory_wiped"] and wiped["examples"] == 4 * 3


# ----------------------------------------------------------------------------- table, plot, recipe


def _write_result(run_dir, arm, seed, accuracies, wiped=False):
    distances = [{"multiple": m, "distance": int(float(m) * 128), "examples": 10, "correct": round(a * 10),
                  "accuracy": a, "mean_log_prob": -1.0} for m, a in accuracies.items()]
    path = run_dir / arm / f"seed{seed}" / ("recall-wiped.json" if wiped else "recall.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"window": 128, "keys": 32, "chance": 1 / 32, "data": "/d/bin", "memory_wiped": wiped,
                                "distances": distances}))


def test_table_gives_the_mean_over_seeds_with_a_t_interval(tmp_path):
    for seed, a in ((1, 0.2), (2, 0.4), (3, 0.6)):
        _write_result(tmp_path, "infinite_former", seed, {"1": a, "64": 1.0})
        _write_result(tmp_path, "infinite_former", seed, {"1": 0.1, "64": 0.1}, wiped=True)
    _write_result(tmp_path, "transformer_lm", 1, {"1": 0.05, "64": 0.03})
    status, out, err = helpers.longmem_in_process("recall", "table", tmp_path)
    assert status == 0, err
    t = 4.302652729911275  # t(2, 0.975)
    half = t * 0.2 / math.sqrt(3)
    summary = json.loads((tmp_path / "results.json").read_text())
    rows = {r["label"]: r for r in summary["rows"]}
    assert list(rows) == ["infinite_former", "infinite_former, memory wiped", "transformer_lm"]
    cell = rows["infinite_former"]["cells"]["1"]
    assert cell["mean"] == pytest.approx(0.4) and cell["low"] == pytest.approx(0.4 - half)
    assert cell["high"] == pytest.approx(0.4 + half) and cell["per_seed"] == {"1": 0.2, "2": 0.4, "3": 0.6}
    assert rows["infinite_former"]["cells"]["64"] == {"mean": 1.0, "low": 1.0, "high": 1.0, "examples": 10,
                                                     "per_seed": {"1": 1.0, "2": 1.0, "3": 1.0}}
    assert rows["transformer_lm"]["cells"]["1"]["low"] is None  # one seed: no interval
    assert f"| infinite_former | 1,2,3 | 0.400 [{0.4 - half:.3f}, {0.4 + half:.3f}] | 1.000 [1.000, 1.000] |" in out
    assert "| transformer_lm | 1 | 0.050 | 0.030 |" in out and "chance 1/K = 1/32 = 0.031" in out
    assert (tmp_path / "results.md").read_text() == out
    # the plot: one line per row with the means, chance 1/K as a horizontal line
    fig = recall_plot.figure(recall_table.summarize(str(tmp_path)))
    lines = {line.get_label(): line for line in fig.axes[0].get_lines()}
    assert list(lines["infinite_former"].get_xdata()) == [1.0, 64.0]
    assert list(lines["infinite_former"].get_ydata()) == pytest.approx([0.4, 1.0])
    assert lines["infinite_former, memory wiped"].get_linestyle() == "--"
    assert list(lines["chance 1/K = 1/32"].get_ydata()) == [1 / 32, 1 / 32]
    status, out, err = helpers.longmem_in_process("recall", "plot", tmp_path)
    assert status == 0 and (tmp_path / "accuracy.png").read_bytes()[:4] == b"\x89PNG", err


def test_table_and_plot_refuse_a_folder_without_results(tmp_path):
    for verb in ("table", "plot"):
        status, _, err = helpers.longmem_in_process("recall", verb, tmp_path)
        assert status == 2 and len(err.strip().splitlines()) == 1 and "fairseq_plugins/lab/recall/recall.sh" in err, err
    assert os.listdir(tmp_path) == []
    _write_result(tmp_path, "memory_off", 1, {"1": 0.5})
    _write_result(tmp_path, "infinite_former", 1, {"1": 0.5})
    (tmp_path / "infinite_former" / "seed1" / "recall.json").write_text(json.dumps(
        {"window": 64, "keys": 32, "chance": 1 / 32, "data": "/d/bin", "distances": []}))
    with pytest.raises(ConfigError, match="were scored on different data"):
        recall_table.summarize(str(tmp_path))


def test_recall_job_arms():
    assert arms.names("recall") == arms.names("lm") and arms.names("recall", True) == arms.names("lm", True)
    for arm in arms.names("recall"):
        args = arms.train_options("recall", arm, "s", cpu=True, env={})
        tail = args[args.index("--validate-interval"):]
        assert tail[:6] == ["--validate-interval", "1000000", "--save-interval", "1000000", "--loss-after-symbol",
                            QUERY_MARKER]
        streaming = args[args.index("--task") + 1] == "streaming_lm"
        assert ("--reset-memory-at-document-boundary" in tail) == streaming
        assert args[args.index("--criterion") + 1] == "infinite_former_kl"
        assert args[:args.index("--criterion")] == arms.train_options("lm", arm, "s", cpu=True, env={})[
            :args.index("--criterion")]


def test_recipe_refuses_a_seed_given_twice_before_anything(tmp_path):
    proc = helpers.run(["bash", "fairseq_plugins/lab/recall/recall.sh", "--seeds", "1,2,1", "--out", tmp_path / "runs", "--data",
                        tmp_path / "data"], check=False)
    helpers.one_line_error(proc, "seed 1 given twice", "give each seed once", prefix="recall.sh: error:", status=2,
                           alone=True)
    assert os.listdir(tmp_path) == []
    helped = helpers.run(["bash", "fairseq_plugins/lab/recall/recall.sh", "--help"])
    assert re.search(r"MAX_UPDATE=\d+", helped.stdout) and "minutes" in helped.stdout


@pytest.mark.full
def test_options_after_double_dash_reach_the_training(books_bin, tmp_path):
    """recall.sh -- OPTIONS passes them to each arm's fairseq-train after the arm's own (so they
    override the budget): --max-update 2 against --quick's 3, and the model option --tau."""
    proc = helpers.run(["bash", "fairseq_plugins/lab/recall/recall.sh", "--quick", "--arms", "infinite_former", "--out", tmp_path / "runs",
                        "--data", tmp_path / "data", "--", "--max-update", "2", "--tau", "0.75"],
                       extra_env={"BOOKS": str(books_bin.parent)})
    run = tmp_path / "runs" / "infinite_former" / "seed1"
    assert json.loads((run / "recall.json").read_text())["num_updates"] == 2, proc.stdout[-2000:]
    cfg = torch.load(run / "checkpoint_last.pt", weights_only=False)["cfg"]["model"]
    assert cfg["tau"] == 0.75
    # the same --out with other options after --: refused before anything, the run untouched
    before = {p: p.stat().st_mtime_ns for p in (tmp_path / "runs").rglob("*") if p.is_file()}
    other = helpers.run(["bash", "fairseq_plugins/lab/recall/recall.sh", "--quick", "--arms", "infinite_former", "--out",
                         tmp_path / "runs", "--data", tmp_path / "data2", "--", "--max-update", "2", "--tau", "0.5"],
                        extra_env={"BOOKS": str(books_bin.parent)}, check=False)
    helpers.one_line_error(other, f"{run} was trained with another budget (options after -- "
                           "'--max-update 2 --tau 0.75' -> '--max-update 2 --tau 0.5')", "another --out",
                           prefix="recall.sh: error:", status=2)
    # ... and the same options on other data: refused too; neither rerun generated its data
    other = helpers.run(["bash", "fairseq_plugins/lab/recall/recall.sh", "--quick", "--arms", "infinite_former", "--out",
                         tmp_path / "runs", "--data", tmp_path / "data2", "--", "--max-update", "2", "--tau", "0.75"],
                        extra_env={"BOOKS": str(books_bin.parent), "DATA_SEED": "2"}, check=False)
    helpers.one_line_error(other, f"{run} holds a run scored on other data than {tmp_path / 'data2'}",
                           "another --out", prefix="recall.sh: error:", status=2)
    assert not (tmp_path / "data2").exists()
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "runs").rglob("*") if p.is_file()} == before
