"""MQAR (docs/results/mqar.md): the generator, the binarized data, the scorer, the state count, the
table and plot, the arms and the recipe's refusals.

References are independent of the code under test: the examples read token by token against the
spec, the criterion's own loss mask (:func:`~fairseq_plugins.criterions.loss_mask.after_symbol_mask`)
over the binarized split, the power law's CDF summed by hand with the Dvoretzky–Kiefer–Wolfowitz
bound as the tolerance, stub models whose answers are known, hand-counted accuracies and state
sizes, one forward call per example, and the t quantile written out.
"""
import json
import math
import os
import sys
from argparse import Namespace

import numpy as np
import pytest
import torch

from helpers import ROOT, longmem_in_process, one_line_error, run, write_checkpoint
from fairseq_plugins.errors import ConfigError
from fairseq_plugins.lab.common import arms
from fairseq_plugins.lab.mqar import data as mqar_data
from fairseq_plugins.lab.mqar import generator
from fairseq_plugins.lab.mqar import plot as mqar_plot
from fairseq_plugins.lab.mqar import score as mqar
from fairseq_plugins.lab.mqar import table as mqar_table
from fairseq_plugins.lab.mqar.symbols import FILLER, QUERY_MARKER, task_symbols


V, K, L, W = 32, 4, 63, 8  # S = (63 - 9) // 4 = 13 slots; the longest distance 2·4 + 4·12 = 56 = 7 W
BUCKETS = "0.5 1 2"
LAYOUT = dict(vocab=V, pairs=K, length=L, power_a=0.01, filler="zeros", window=W, buckets=BUCKETS)
SPLIT_SIZES = {"train": 24, "valid": 3, "test": 6}
TINY = ["--decoder-layers", "1", "--decoder-embed-dim", "32", "--decoder-attention-heads", "2",
        "--decoder-ffn-embed-dim", "64"]
INFINITE_FORMER = ["--task", "streaming_lm", "--arch", "infinite_former_lm", "--tokens-per-sample", "8",
                   "--mem-len", "8", "--num-basis-functions", "8", "--num-samples", "8", "--batch-size", "4",
                   "--reset-memory-at-document-boundary", *TINY]
TRANSFORMER_LM = ["--task", "language_modeling", "--arch", "transformer_lm", "--tokens-per-sample", str(L),
                  "--sample-break-mode", "complete_doc", *TINY]


def _layout(**change):
    return generator.layout(Namespace(**{**LAYOUT, **change}))


def _stage_args(out, seed=1, **change):
    options = {**LAYOUT, **change}
    args = ["--out", str(out), "--seed", str(seed)]
    for name, value in options.items():
        args += [f"--{name.replace('_', '-')}", str(value)]
    for split, n in SPLIT_SIZES.items():
        args += [f"--{split}-examples", str(n)]
    return args


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """The MQAR data build (the stages data-prep/stages.sh's build_generated runs): V 32, 4 pairs, length 63."""
    out = tmp_path_factory.mktemp("mqar") / "data"
    args = _stage_args(out)
    assert mqar_data.main(["state", *args]) == 0
    assert mqar_data.main(["generate", *args, "--raw", str(out / "raw")]) == 0
    assert mqar_data.main(["write-dict", *args, "--path", str(out / "dict.txt")]) == 0
    run([os.path.join(os.path.dirname(sys.executable), "fairseq-preprocess"), "--only-source", "--trainpref",
         out / "raw" / "train.txt", "--validpref", out / "raw" / "valid.txt", "--testpref", out / "raw" / "test.txt",
         "--srcdict", out / "dict.txt", "--destdir", out / "bin", "--workers", "1"])
    assert mqar_data.main(["finish", *args]) == 0
    return out


def _manifest(data):
    return json.loads((data / "manifest.json").read_text())


# ----------------------------------------------------------------------------- generator


def test_an_example_holds_exactly_what_the_spec_says():
    lay = _layout()
    assert (lay.slots, lay.longest) == (13, 56)
    half = V // 2
    for i in range(200):
        codes, r = generator.make_example(lay, generator.example_rng(7, "train", i))
        codes = codes.tolist()
        keys = [int(s[1:]) for s in r["keys"]]
        values = [int(s[1:]) for s in r["values"]]
        # k distinct keys of the key half 1..V/2-1, k distinct values of the value half V/2..V-1
        assert len(set(keys)) == K and all(1 <= k < half for k in keys)
        assert len(set(values)) == K and all(half <= v < V for v in values)
        assert codes[:2 * K] == [t for pair in zip(keys, values) for t in pair]  # k1 v1 k2 v2 ...
        # each key queried once more, in a slot of its own: "k @query v </s>" at 2k + 4(x - 1)
        assert len(set(r["slots"])) == K and all(1 <= x <= lay.slots for x in r["slots"])
        for j, (key, value, x) in enumerate(zip(keys, values, r["slots"])):
            o = 2 * K + 4 * (x - 1)
            assert r["query_offsets"][j] == o and r["distances"][j] == o - 2 * j
            assert codes[o:o + 4] == [key, generator.MARKER_CODE, value, generator.LINE_END]
        for key in keys:
            assert codes.count(key) == 2  # in its pair and in its query, nowhere else
        for value in values:
            assert codes.count(value) == 2
        assert codes.count(generator.MARKER_CODE) == K
        # every other position of the query region is filler (the zeros), and the example ends a line
        queried = {o + d for o in r["query_offsets"] for d in range(4)}
        rest = [c for p, c in enumerate(codes) if p >= 2 * K and p not in queried]
        assert rest in ([0] * (len(rest) - 1) + [generator.LINE_END], [0] * len(rest))
        assert codes[-1] == generator.LINE_END and len(codes) == r["tokens"] <= L
        assert r["lines"] == codes.count(generator.LINE_END)


def test_random_filler_draws_the_task_vocabulary():
    lay = _layout(filler="random")
    seen = set()
    for i in range(50):
        codes, r = generator.make_example(lay, generator.example_rng(1, "test", i))
        queried = {o + d for o in r["query_offsets"] for d in range(4)}
        filler = [c for p, c in enumerate(codes.tolist()[:-1]) if p >= 2 * K and p not in queried]
        assert all(0 <= c < V for c in filler)
        seen.update(filler)
    assert len(seen) > V // 2  # uniform over the V tokens, not the zeros


def _cdf(slots, a):
    """F(x) = Σ_{j ≤ x} a·j^(a-1) / Σ_{j ≤ S} a·j^(a-1), summed term by term."""
    terms = [a * j ** (a - 1) for j in range(1, slots + 1)]
    total = sum(terms)
    out, acc = [], 0.0
    for t in terms:
        acc += t
        out.append(acc / total)
    return np.array(out)


@pytest.mark.parametrize("a", [0.01, 0.5, 1.0])
def test_gaps_follow_the_power_law(a):
    """One pair per example: its slot is one draw from p(x) ∝ a·x^(a-1). The empirical CDF of n draws
    lies within the DKW bound sqrt(ln(2/α) / 2n) of the exact one (α = 1e-4: a false alarm once in
    ten thousand runs; the draws are seeded, so the test is deterministic)."""
    lay = _layout(pairs=1, power_a=a)
    n = 4000
    slots = np.array([generator.make_example(lay, generator.example_rng(3, "train", i))[1]["slots"][0]
                      for i in range(n)])
    empirical = np.array([(slots <= x).mean() for x in range(1, lay.slots + 1)])
    bound = math.sqrt(math.log(2 / 1e-4) / (2 * n))
    assert np.abs(empirical - _cdf(lay.slots, a)).max() < bound
    if a == 0.01:  # short gaps strongly favoured: slot 1 takes 1 / Σ j^-0.99 of the draws
        assert empirical[0] == pytest.approx(1 / sum(j ** -0.99 for j in range(1, lay.slots + 1)), abs=bound)


def test_examples_are_seeded_per_split_and_index(tmp_path):
    lay = _layout()
    first = generator.make_example(lay, generator.example_rng(1, "train", 5))
    again = generator.make_example(lay, generator.example_rng(1, "train", 5))
    assert first[1] == again[1] and np.array_equal(first[0], again[0])
    for other in (generator.example_rng(2, "train", 5), generator.example_rng(1, "test", 5),
                  generator.example_rng(1, "train", 6)):
        assert generator.make_example(lay, other)[1] != first[1]

    def generate(name, seed, train=SPLIT_SIZES["train"]):
        raw = tmp_path / name
        args = _stage_args(tmp_path / "unused", seed)
        args[args.index("--train-examples") + 1] = str(train)
        assert mqar_data.main(["generate", *args, "--raw", str(raw)]) == 0
        return {s: (raw / f"{s}.txt").read_text() for s in SPLIT_SIZES}

    same, other, longer = generate("a", 1), generate("b", 2), generate("c", 1, train=30)
    assert same == generate("a2", 1)
    assert all(same[s] != other[s] for s in SPLIT_SIZES)
    assert longer["train"].startswith(same["train"]) and longer["test"] == same["test"]  # example i: its own seed


# ----------------------------------------------------------------------------- the binarized data


def test_the_loss_mask_counts_the_query_values_and_nothing_else(data):
    """The criterion's --loss-after-symbol @query mask over each split read as one stream (the order
    streaming_lm cuts it in): exactly the values of the queries are scored, k per example, in order."""
    from fairseq.data import Dictionary, data_utils

    from fairseq_plugins.criterions.loss_mask import after_symbol_mask

    manifest = _manifest(data)
    d = Dictionary.load(str(data / "bin" / "dict.txt"))
    assert d.symbols[4:] == task_symbols(V) + [QUERY_MARKER]
    assert manifest["reference"] == {"2/V": 2 / V, "1/k": 1 / K, "1.0": 1.0}
    for split in ("valid", "test"):
        lines = data_utils.load_indexed_dataset(str(data / "bin" / split), d, combine=False)
        stream = torch.cat([lines[i] for i in range(len(lines))]).long()
        src, tgt = stream[:-1].unsqueeze(0), stream[1:].unsqueeze(0)
        keep = after_symbol_mask(src, tgt, d.index(QUERY_MARKER), d.eos(), d.pad())[0]
        records = manifest["splits"][split]["records"]
        want = []
        for r in records:
            order = sorted(range(K), key=lambda j: r["query_offsets"][j])
            want += [(r["start"] + r["query_offsets"][j] + 1, d.index(r["values"][j])) for j in order]
            assert stream[r["start"]:r["start"] + 2 * K].tolist() == [d.index(s) for pair in
                                                                      zip(r["keys"], r["values"]) for s in pair]
        assert [(int(p), int(tgt[0, p])) for p in keep.nonzero().view(-1)] == want
        assert manifest["splits"][split]["examples"] == SPLIT_SIZES[split]
        assert sum(manifest["splits"][split]["queries"]) == K * SPLIT_SIZES[split]


def test_a_rerun_is_up_to_date_and_other_options_are_refused(data, capsys):
    assert mqar_data.main(["state", *_stage_args(data)]) == 3
    assert "up to date" in capsys.readouterr().out
    with pytest.raises(ConfigError, match="different options: pairs=4"):
        mqar_data.main(["state", *_stage_args(data, pairs=5)])


@pytest.mark.parametrize("change, needles", [
    ({"pairs": 16}, ["--pairs 16 is more than the 15 keys of the vocabulary's key half", "--vocab 32"]),
    ({"vocab": 31}, ["--vocab must be an even integer"]),
    ({"length": 20}, ["--length 20 has no room for 4 pairs and their 4 queries", ">= 25"]),
    ({"window": 56}, ["--window 56 is not shorter than the longest key–query gap", "(56 tokens)"]),
    ({"buckets": "0.5 8"}, ["--buckets 8 x W = 64 tokens is a gap longer than the sequence allows", "drop 8"]),
    ({"buckets": "1 1"}, ["--buckets gives 1 twice"]),
    ({"power_a": 0}, ["--power-a must be a positive number"]),
])
def test_bad_data_options_are_one_line_and_write_nothing(tmp_path, change, needles):
    raw = tmp_path / "raw"
    status, out, err = longmem_in_process("prep", "mqar", "generate", *_stage_args(tmp_path / "out", **change),
                                          "--raw", raw)
    assert status == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith("fairseq-longmem prep mqar: error: "), err
    for needle in needles:
        assert needle in err, err
    assert os.listdir(tmp_path) == []


# ----------------------------------------------------------------------------- scorer


class _Stub(torch.nn.Module):
    """Logit 1 on one symbol per position, 0 elsewhere: at a query marker the value of the key
    before it when that key's task id is even (the pair read off the row), else the filler."""

    def __init__(self, dictionary):
        super().__init__()
        self.d = dictionary

    def forward(self, tokens):
        logits = torch.zeros(*tokens.shape, len(self.d))
        marker = self.d.index(QUERY_MARKER)
        for b, row in enumerate(tokens.tolist()):
            for t, token in enumerate(row):
                guess = self.d.index(FILLER)
                if token == marker:
                    key = row[t - 1]
                    pair = next(p for p in range(1, t) if row[p] == key)  # the first: in the context
                    if int(self.d[key][1:]) % 2 == 0:
                        guess = row[pair + 1]
                logits[b, t, guess] = 1.0
        return logits, {}


def test_accuracy_is_the_hand_count(data):
    from fairseq.data import Dictionary

    manifest = _manifest(data)
    d = Dictionary.load(str(data / "bin" / "dict.txt"))
    examples = mqar.load_examples(str(data / "bin"), "test", d, manifest)
    records = manifest["splits"]["test"]["records"]
    got = mqar.score_examples(_Stub(d), examples, manifest, batch_size=4)
    right = [[int(k[1:]) % 2 == 0 for k in r["keys"]] for r in records]
    assert got["per_example"] == pytest.approx([sum(x) / K for x in right])
    assert got["accuracy"] == pytest.approx(np.mean([sum(x) / K for x in right]))
    assert (got["queries"], got["correct"]) == (K * len(records), sum(map(sum, right)))
    edges = [0.5 * W, 1 * W, 2 * W]
    for b, cell in enumerate(got["buckets"]):
        mine = [ok for r, x in zip(records, right) for d_, ok in zip(r["distances"], x)
                if (b == 0 or d_ > edges[b - 1]) and (b == len(edges) or d_ <= edges[b])]
        assert (cell["queries"], cell["correct"]) == (len(mine), sum(mine))
        assert cell["accuracy"] == (sum(mine) / len(mine) if mine else None)
    assert [c["label"] for c in got["buckets"]] == ["<= 0.5 W", "0.5-1 W", "1-2 W", "> 2 W"]


def test_accuracy_is_the_mean_over_examples_on_a_tiny_hand_made_case():
    """Two examples of two queries, a stub that predicts the token after each one (its id + 1):
    example 0 answers both, example 1 one of two, so the accuracy is (2/2 + 1/2) / 2 = 0.75."""

    class NextId(torch.nn.Module):
        def forward(self, tokens):
            return torch.nn.functional.one_hot(tokens + 1, 10).float(), {}

    examples = mqar.MqarExamples(rows=[torch.tensor([0, 5, 6, 7, 8]), torch.tensor([0, 2, 2, 4, 9])],
                                 positions=torch.tensor([[1, 3], [1, 3]]), answers=torch.tensor([[6, 8], [3, 4]]),
                                 distances=torch.tensor([[3, 9], [20, 2]]))
    manifest = {"options": {**LAYOUT, "pairs": 2, "buckets": ["0.5", "1", "2"]}, "buckets": _layout(pairs=2).buckets()}
    got = mqar.score_examples(NextId(), examples, manifest, batch_size=1)
    assert got["per_example"] == [1.0, 0.5] and got["accuracy"] == 0.75
    assert (got["queries"], got["correct"]) == (4, 3)
    # buckets (0, 4], (4, 8], (8, 16], > 16: d = 3 (hit), 2 (miss) -> the first; 9 (hit) -> the third; 20 (hit)
    assert [(c["queries"], c["correct"]) for c in got["buckets"]] == [(2, 1), (0, 0), (1, 1), (1, 1)]
    assert [c["accuracy"] for c in got["buckets"]] == [0.5, None, 1.0, 1.0]


@pytest.fixture(scope="module")
def checkpoints(data, tmp_path_factory):
    """Randomly initialised tiny checkpoints on the MQAR data (fairseq-train's layout)."""
    root = tmp_path_factory.mktemp("checkpoints")
    return {name: write_checkpoint(root / f"{name}.pt", data / "bin", *options)
            for name, options in (("infinite_former", INFINITE_FORMER), ("transformer_lm", TRANSFORMER_LM),
                                  ("memory_off", [*INFINITE_FORMER, "--no-long-term-memory"]))}


def test_checkpoints_score_as_one_call_per_example(data, checkpoints, tmp_path):
    """score (batched, padded, only the query positions projected) = one forward per example over its
    whole row, argmax at each query marker; the CLI's JSON = score()."""
    from fairseq.data import Dictionary, data_utils

    manifest = _manifest(data)
    records = manifest["splits"]["test"]["records"]
    lines = data_utils.load_indexed_dataset(str(data / "bin" / "test"), Dictionary.load(str(data / "bin" / "dict.txt")),
                                            combine=False)
    for name in ("infinite_former", "transformer_lm"):
        result = mqar.score(str(checkpoints[name]), str(data / "bin"), batch_size=4)
        model, cfg, task = mqar.load_checkpoint(str(checkpoints[name]), str(data / "bin"))
        d = task.source_dictionary
        fractions = []
        with torch.no_grad():
            for r in records:
                ids = [d.eos()] + [t for j in range(r["lines"]) for t in lines[r["item"] + j].tolist()]
                ids = ids[:max(r["query_offsets"]) + 3]  # up to the last marker
                logits = model(torch.tensor([ids]))[0][0]
                hits = [int(logits[o + 2].argmax()) == d.index(v) for o, v in zip(r["query_offsets"], r["values"])]
                fractions.append(sum(hits) / K)
        assert result["per_example"] == pytest.approx(fractions)
        assert result["accuracy"] == pytest.approx(np.mean(fractions))
        assert result["arm"] == name and result["pairs"] == K and result["reference"]["1/k"] == 1 / K
        out = tmp_path / f"{name}.json"
        status, _, err = longmem_in_process("mqar", "score", "--checkpoint", checkpoints[name], "--data",
                                            data / "bin", "--batch-size", "4", "--json", out)
        assert status == 0, err
        written = json.loads(out.read_text())
        assert written["buckets"] == result["buckets"] and written["state"] == result["state"]
        again = longmem_in_process("mqar", "score", "--checkpoint", checkpoints[name], "--data", data / "bin",
                                   "--json", out)
        assert again[0] == 2 and "--force" in again[2] and json.loads(out.read_text()) == written
    # the state the scorer reports for these models, by hand: 1 layer, width 32; the ∞-former's segment 8,
    # short-term memory 8, N = 8; transformer_lm over the length L = 63
    assert mqar.score(str(checkpoints["infinite_former"]), str(data / "bin"))["state"]["bytes"] == \
        4 * 1 * (2 * 32 * (8 + 8) + 8 * 32)
    assert mqar.score(str(checkpoints["transformer_lm"]), str(data / "bin"))["state"]["bytes"] == 4 * 2 * 32 * L


def test_memory_wiped_without_long_term_memory_is_one_line(data, checkpoints, tmp_path):
    out = tmp_path / "wiped.json"
    status, _, err = longmem_in_process("mqar", "score", "--checkpoint", checkpoints["memory_off"], "--data",
                                        data / "bin", "--memory-wiped", "--json", out)
    assert status == 2 and len(err.strip().splitlines()) == 1, err
    assert "--memory-wiped needs a model with a long-term memory" in err and not out.exists()
    wiped = mqar.score(str(checkpoints["infinite_former"]), str(data / "bin"), memory_wiped=True)
    assert wiped["memory_wiped"] and wiped["examples"] == SPLIT_SIZES["test"]


# ----------------------------------------------------------------------------- state size


def test_state_size_is_the_hand_count():
    full = Namespace(decoder_layers=2, decoder_embed_dim=64)
    assert mqar.state_bytes("transformer_lm", full, 127)["bytes"] == 2 * (2 * 64 * 127) * 4 == 130048
    streaming = dict(decoder_layers=2, decoder_embed_dim=64, num_basis_functions=32, compressed_memory_slots=None)
    off = Namespace(**streaming, no_long_term_memory=True, memory_type="continuous")
    assert mqar.state_bytes("infinite_former_lm", off, 127, (16, 16))["bytes"] == 2 * (2 * 64 * 32) * 4 == 32768
    ltm = Namespace(**streaming, no_long_term_memory=False, memory_type="continuous")
    got = mqar.state_bytes("infinite_former_lm", ltm, 127, (16, 16))
    assert got["bytes"] == 2 * (2 * 64 * 32 + 32 * 64) * 4 == 49152 and "N·e = 32·64 (B)" in got["count"]
    compressive = Namespace(**{**streaming, "compressed_memory_slots": 10}, no_long_term_memory=False,
                            memory_type="compressive")
    got = mqar.state_bytes("infinite_former_lm", compressive, 127, (16, 16))
    assert got["bytes"] == 2 * (2 * 64 * 32 + 10 * 64) * 4 and "compressed slots" in got["count"]


# ----------------------------------------------------------------------------- table, plot


def _write_result(run_dir, arm, seed, accuracy, buckets, wiped=False, state=32768):
    cells = [{"label": label, "low": 0, "high": None, "queries": 10, "correct": round(a * 10), "accuracy": a,
              "mean_log_prob": -1.0} for label, a in buckets.items()]
    path = run_dir / arm / f"seed{seed}" / ("mqar-wiped.json" if wiped else "mqar.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"vocab": 256, "pairs": 8, "length": 127, "window": 32, "data": "/d/bin",
                                "memory_wiped": wiped, "accuracy": accuracy, "buckets": cells,
                                "reference": {"2/V": 2 / 256, "1/k": 1 / 8, "1.0": 1.0}, "parameters": 100,
                                "state": {"bytes": state, "count": "by hand"}}))


def test_table_prints_the_reference_lines_and_the_state(tmp_path):
    for seed, a in ((1, 0.2), (2, 0.4), (3, 0.6)):
        _write_result(tmp_path, "infinite_former", seed, a, {"<= 1 W": a, "> 1 W": 0.1}, state=49152)
        _write_result(tmp_path, "infinite_former", seed, 0.05, {"<= 1 W": 0.1, "> 1 W": 0.0}, wiped=True,
                      state=49152)
    _write_result(tmp_path, "transformer_lm", 1, 0.9, {"<= 1 W": 1.0, "> 1 W": 0.8}, state=130048)
    status, out, err = longmem_in_process("mqar", "table", tmp_path)
    assert status == 0, err
    half = 4.302652729911275 * 0.2 / math.sqrt(3)  # t(2, 0.975) · s / √3
    assert (f"| infinite_former | 1,2,3 | 4.92e+04 | 0.400 [{0.4 - half:.3f}, {0.4 + half:.3f}] | "
            f"0.400 [{0.4 - half:.3f}, {0.4 + half:.3f}] | 0.100 [0.100, 0.100] |") in out
    assert "| transformer_lm | 1 | 1.30e+05 | 0.900 | 1.000 | 0.800 |" in out
    assert "| infinite_former, memory wiped | 1,2,3 | 4.92e+04 | 0.050 [0.050, 0.050] |" in out
    # the three reference lines, in every accuracy column and in words
    assert "| *reference 2/V* | | | 0.008 | 0.008 | 0.008 |" in out
    assert "| *reference 1/k* | | | 0.125 | 0.125 | 0.125 |" in out
    assert "| *reference 1.0* | | | 1.000 | 1.000 | 1.000 |" in out
    assert "2/V = 0.0078 (2/256: no information" in out and "1/k = 0.1250 (1/8: the example's values known" in out
    assert (tmp_path / "results.md").read_text() == out
    summary = json.loads((tmp_path / "results.json").read_text())
    assert [r["label"] for r in summary["rows"]] == ["transformer_lm", "infinite_former",
                                                     "infinite_former, memory wiped"]  # the registry's order
    assert [(r["name"], r["value"]) for r in summary["reference"]] == [("2/V", 2 / 256), ("1/k", 1 / 8), ("1.0", 1.0)]
    # the plot: both panels draw the three reference lines; the arms' means against distance and state size
    fig = mqar_plot.figure(mqar_table.summarize(str(tmp_path)))
    for ax in fig.axes:
        lines = {line.get_label(): line for line in ax.get_lines()}
        for name, value in (("2/V", 2 / 256), ("1/k", 1 / 8), ("1.0", 1.0)):
            label = next(k for k in lines if k.startswith(f"{name} = "))
            assert list(lines[label].get_ydata()) == pytest.approx([value, value])
    by_distance, by_state = ({line.get_label(): line for line in ax.get_lines()} for ax in fig.axes)
    assert list(by_distance["infinite_former"].get_ydata()) == pytest.approx([0.4, 0.1])
    assert list(by_state["transformer_lm"].get_xdata()) == [130048]
    status, _, err = longmem_in_process("mqar", "plot", tmp_path)
    assert status == 0 and (tmp_path / "accuracy.png").read_bytes()[:4] == b"\x89PNG", err


def test_table_and_plot_refuse_a_folder_without_results(tmp_path):
    for verb in ("table", "plot"):
        status, _, err = longmem_in_process("mqar", verb, tmp_path)
        assert status == 2 and len(err.strip().splitlines()) == 1 and "fairseq_plugins/lab/mqar/mqar.sh" in err, err
    assert os.listdir(tmp_path) == []


# ----------------------------------------------------------------------------- arms, recipe


def test_mqar_job_arms():
    assert arms.names("mqar", True) == ["transformer_lm", "memory_off", "infinite_former", "infinite_former_mixture",
                                        "compressive", "memory_off_matched"]
    assert "infinite_former_content" in arms.names("mqar")
    for name in arms.names("mqar"):
        args = arms.train_options("mqar", name, "s", cpu=True, env={})
        tail = args[args.index("--validate-interval"):]
        assert tail[:8] == ["--validate-interval", "1000000", "--save-interval", "1000000", "--loss-after-symbol",
                            QUERY_MARKER, "--dropout", "0.0"]
        assert args[args.index("--criterion") + 1] == "infinite_former_kl"
        streaming = args[args.index("--task") + 1] == "streaming_lm"
        assert ("--reset-memory-at-document-boundary" in tail) == streaming
        status, out, _ = longmem_in_process("arms", "get", "mqar", name, "has_memory")
        assert status == 0 and out.strip() == str(name in ("infinite_former", "infinite_former_mixture",
                                                            "infinite_former_content", "compressive"))
    full = arms.train_options("mqar", "transformer_lm", "s", cpu=True, env={})
    assert full[full.index("--sample-break-mode") + 1] == "complete_doc"
    assert full[full.index("--tokens-per-sample") + 1] == "127"
    assert full[full.index("--batch-size") + 1] == str(64 * 16 // 128)  # the streaming arms' tokens per update
    for read in ("content", "mixture"):
        options = arms.train_options("mqar", f"infinite_former_{read}", "s", cpu=True, env={})
        assert options[options.index("--memory-read") + 1] == read
    assert arms.train_options("mqar", "compressive", "s", cpu=True, env={})[3] == "compressive_transformer_lm"
    matched = arms.train_options("mqar", "memory_off_matched", "s", cpu=True, env={})
    assert matched[len(matched) - 1 - matched[::-1].index("--decoder-ffn-embed-dim") + 1] == \
        arms.matched_ffn(arms.budget("mqar", {}))
    # the window of the streaming arms lies inside the sequence: gaps beyond it exist at the defaults
    b = arms.budget("mqar", {})
    assert 2 * int(b["SEGMENT"]) < _layout(vocab=256, pairs=8, length=int(b["LENGTH"]), window=32).longest


@pytest.mark.parametrize("argv, env, needles", [
    (["--seeds", "1,2,1"], {}, ["seed 1 given twice", "give each seed once"]),
    ([], {"PAIRS": "200"}, ["PAIRS=200 is more than the 127 keys of the vocabulary's key half"]),
    ([], {"LENGTH": "40"}, ["LENGTH=40 has no room for 8 pairs and their 8 queries"]),
    ([], {"SEGMENT": "64"}, ["window W = 2 x SEGMENT = 128 tokens is not shorter than the longest key–query gap",
                             "(120 tokens)"]),
    ([], {"BUCKETS": "0.5 4"}, ["--buckets 4 x W = 128 tokens is a gap longer than the sequence allows"]),
    (["--arms", "memory_off nosuch"], {}, ["unknown arm 'nosuch'"]),
    (["--arms", " "], {}, ["--arms needs at least one arm (transformer_lm, memory_off"]),
    (["--seeds", "1,,2"], {}, ["--seeds 1,,2 has an empty item"]),
    ([], {"LR": "fast"}, ["LR must be a positive number (e.g. 0.003), not 'fast'"]),
])
def test_the_recipe_refuses_bad_input_in_one_line_before_anything(tmp_path, argv, env, needles):
    proc = run(["bash", "fairseq_plugins/lab/mqar/mqar.sh", *argv, "--out", tmp_path / "runs", "--data", tmp_path / "data"],
               check=False, extra_env=env)
    one_line_error(proc, *needles, prefix="mqar.sh: error:", status=2, alone=True)
    assert os.listdir(tmp_path) == []


def test_the_recipe_help_states_the_budget():
    helped = run(["bash", "fairseq_plugins/lab/mqar/mqar.sh", "--help"])
    assert "MAX_UPDATE=2500" in helped.stdout and "8 minutes" in helped.stdout
    assert helped.stdout.count("\n") > 20 and os.path.isfile(os.path.join(ROOT, "docs", "results", "mqar.md"))


@pytest.mark.full
def test_the_quick_recipe_runs_end_to_end(tmp_path):
    """fairseq_plugins/lab/mqar/mqar.sh --quick: data through the generic stage, one memory arm trained (3 updates), scored
    with and without its memory, the table (with the reference lines) and the plot; a rerun skips it."""
    args = ["bash", "fairseq_plugins/lab/mqar/mqar.sh", "--quick", "--arms", "infinite_former", "--out", tmp_path / "runs", "--data",
            tmp_path / "data"]
    proc = run(args)
    seed = tmp_path / "runs" / "infinite_former" / "seed1"
    result = json.loads((seed / "mqar.json").read_text())
    assert result["num_updates"] == 3 and result["pairs"] == 4 and result["examples"] == 8
    assert json.loads((seed / "mqar-wiped.json").read_text())["memory_wiped"]
    table = (tmp_path / "runs" / "results.md").read_text()
    assert "| infinite_former | 1 |" in table and "| *reference 1/k* | | | 0.250 |" in table, proc.stdout[-2000:]
    assert (tmp_path / "runs" / "accuracy.png").is_file()
    again = run(args)
    assert "already scored" in again.stdout and "up to date" in again.stdout
