"""fairseq's hub interface of the ∞-former LM (``InfiniteFormerLanguageModel.from_pretrained``,
fairseq_plugins/models/hub.py; docs/generation.md, "From Python"), against independent
references: greedy generation after a prompt of many segments = a greedy loop that runs the
full forward over the whole prefix at every step; beam scores = a full-forward rescoring of
each hypothesis; ``score`` of a long text = the segmented full forward in one call, and =
``fairseq-eval-lm --task streaming_lm``'s loss on the same text; bad input in one line.

The checkpoint is a random tiny model written as fairseq-train writes one (helpers.write_checkpoint):
segments of 8 tokens, short-term memory 8, sticky long-term memory."""

import math
import os
import re
import sys

import pytest
import torch

from fairseq_plugins.errors import ConfigError
from fairseq_plugins.models import hub as hub_module
from fairseq_plugins.models.infinite_former_lm import InfiniteFormerLanguageModel

from helpers import ROOT, fairseq, greedy_full_forward, run, write_checkpoint

SEG = 8
WORDS = [f"w{i}" for i in range(40)]
MODEL = ["--task", "streaming_lm", "--arch", "infinite_former_lm", "--tokens-per-sample", SEG, "--batch-size", 1,
         "--decoder-layers", 2, "--decoder-embed-dim", 32, "--decoder-attention-heads", 4, "--decoder-ffn-embed-dim",
         64, "--num-basis-functions", 16, "--num-samples", 16]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hub")
    (tmp / "data").mkdir()
    (tmp / "data" / "dict.txt").write_text("".join(f"{w} 1\n" for w in WORDS))
    write_checkpoint(tmp / "ck" / "checkpoint_last.pt", tmp / "data", *MODEL)
    return tmp


@pytest.fixture(scope="module")
def lm(folder):
    return InfiniteFormerLanguageModel.from_pretrained(str(folder / "ck"), checkpoint_file="checkpoint_last.pt",
                                                       data_name_or_path=str(folder / "data"))


def _text(n, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return " ".join(WORDS[int(i)] for i in torch.randint(0, len(WORDS), (n,), generator=gen))


def _log_probs(model, tokens):
    """Full-forward log-probs ``(T, V)`` of every next token after ``tokens`` (one call, no memory key)."""
    with torch.no_grad():
        return torch.log_softmax(model(tokens[None])[0][0].float(), -1)


def test_from_pretrained_is_fairseqs_hub_interface(lm):
    from fairseq.hub_utils import GeneratorHubInterface

    assert isinstance(lm, GeneratorHubInterface) and isinstance(lm.models[0], InfiniteFormerLanguageModel)
    assert lm.encode("w1 w2").tolist() == [lm.tgt_dict.index("w1"), lm.tgt_dict.index("w2"), lm.tgt_dict.eos()]


@pytest.mark.parametrize("length", [1, 45, 203])  # one token, 5½ and 25⅜ segments
def test_greedy_after_a_long_prompt_equals_a_full_forward_greedy_loop(lm, length):
    prompt = _text(length, seed=length)
    hypo = lm.generate(lm.encode(prompt), beam=1, max_len_b=20)[0]
    context = lm.context(lm.encode(prompt))
    want, scores = greedy_full_forward(lm.models[0], context, 20)
    assert hypo["tokens"].tolist() == context[1:].tolist() + want  # the prompt, then its continuation
    torch.testing.assert_close(hypo["positional_scores"], torch.tensor(scores), rtol=0, atol=1e-4)
    assert lm.sample(prompt, beam=1, max_len_b=20) == lm.decode_lines(hypo["tokens"])


def test_end_of_sentence_inside_and_at_the_end_of_the_prompt_is_read_as_text(lm):
    """continue_tokens takes the context as it is: a prompt of several lines, each ending with
    </s> (as continue.sh reads a text file), generates after the last line end."""
    eos = lm.tgt_dict.eos()
    lines = [lm.encode(_text(n, seed=n)) for n in (13, 30, 7)]  # each ends with </s>
    context = torch.cat([torch.tensor([eos]), *lines])
    hypo = lm.continue_tokens(context, beam=1, max_len_b=12)[0]
    want, _ = greedy_full_forward(lm.models[0], context, 12)
    assert hypo["tokens"].tolist() == context[1:].tolist() + want


def test_a_prompts_lines_are_read_and_given_back_as_in_training(lm):
    """Each line of a prompt ends with </s> (fairseq-preprocess's reading of a training text),
    in sample and score alike; join_lines reads the text as one line; the continuation comes
    back one line per </s>."""
    d = lm.tgt_dict
    ids = [d.index(w) for w in ("w1", "w2", "w3", "w4")]
    text = "w1 w2\n\n  \nw3 w4\n"
    assert lm.encode_prompt(text).tolist() == [*ids[:2], d.eos(), *ids[2:], d.eos()]
    assert lm.encode_prompt(text, join_lines=True).tolist() == [*ids, d.eos()]
    assert lm.score(text)["tokens"].tolist() == [*ids[:2], d.eos(), *ids[2:]]  # the final </s> is stripped
    assert lm.score(text, replace_newline_with_eos=False)["tokens"].tolist() == ids  # fairseq's switch
    sampled = lm.sample(text, beam=1, max_len_b=6)
    hypo = lm.continue_tokens(lm.context(lm.encode_prompt(text)), beam=1, max_len_b=6)[0]
    assert sampled.startswith("w1 w2\nw3 w4") and sampled == lm.decode_lines(hypo["tokens"])
    assert lm.sample(text, beam=1, max_len_b=6, join_lines=True).startswith("w1 w2 w3 w4")
    eos = d.eos()
    assert lm.decode_lines(torch.tensor([ids[0], eos, ids[1], ids[2], eos])) == "w1\nw2 w3"
    assert lm.decode_lines(torch.tensor([ids[0], eos, eos, ids[1]])) == "w1\n\nw2"


def test_empty_and_unknown_prompts_follow_the_prompt_policy(lm, caplog):
    from fairseq_plugins.models.prompts import EMPTY

    for call in (lambda: lm.sample(""), lambda: lm.score(""), lambda: lm.sample(" \n \n"),
                 lambda: lm.generate(lm.encode(""), beam=1, max_len_b=3),
                 lambda: lm.continue_tokens(torch.zeros(0, dtype=torch.long), beam=1)):
        with pytest.raises(ValueError, match=re.escape(EMPTY)):
            call()
    with pytest.raises(ValueError, match="every token of the prompt is <unk>"):
        lm.sample("日本語😀 ∑∫", max_len_b=3)
    caplog.clear()
    with caplog.at_level("WARNING"):
        lm.sample("w1 zz w2 yy", beam=1, max_len_b=3)
    (warning,) = [r.getMessage() for r in caplog.records if "<unk>" in r.getMessage()]
    assert warning.startswith("2 of the 4 tokens of the prompt are <unk>"), warning


def test_beam_scores_equal_a_full_forward_rescoring(lm):
    context = lm.context(lm.encode(_text(37, seed=5)))
    hypos = lm.continue_tokens(context, beam=3, max_len_b=10)
    assert len(hypos) == 3
    for hypo in hypos:
        generated = hypo["tokens"][context.numel() - 1:]
        lprobs = _log_probs(lm.models[0], torch.cat([context, generated[:-1]]))[context.numel() - 1:]
        want = lprobs.gather(-1, generated[:, None])[:, 0]
        torch.testing.assert_close(hypo["positional_scores"], want, rtol=0, atol=1e-4)


def test_prompts_of_different_lengths_are_each_generated_alone(lm):
    prompts = [lm.encode(_text(n, seed=n)) for n in (3, 29)]
    together = lm.generate(prompts, beam=2, max_len_b=8)
    alone = [lm.generate(p, beam=2, max_len_b=8) for p in prompts]
    for a, b in zip(together, alone):
        assert [h["tokens"].tolist() for h in a] == [h["tokens"].tolist() for h in b]


@pytest.mark.parametrize("per_call", [SEG, 3 * SEG, 1024])
def test_score_carries_the_memory_and_equals_the_segmented_full_forward(lm, monkeypatch, per_call):
    monkeypatch.setattr(hub_module, "SCORE_TOKENS_PER_CALL", per_call)
    text = _text(20 * SEG + 3, seed=7)
    scored = lm.score(text)
    context = lm.context(lm.encode(text))
    want = _log_probs(lm.models[0], context[:-1]).gather(-1, context[1:, None])[:, 0]
    assert scored["tokens"].tolist() == context[1:].tolist()
    torch.testing.assert_close(scored["positional_scores"], want, rtol=0, atol=1e-5)
    torch.testing.assert_close(scored["score"], want.mean(), rtol=0, atol=1e-6)
    assert lm.score(text)["positional_scores"].equal(scored["positional_scores"])  # nothing left from the last call


def test_the_references_depend_on_the_long_term_memory(lm, folder):
    """What lets the tests above fail on a lost memory: with W_O^LTM silenced, the full forward
    scores every segment after the first differently."""
    silenced = InfiniteFormerLanguageModel.from_pretrained(str(folder / "ck"), checkpoint_file="checkpoint_last.pt",
                                                           data_name_or_path=str(folder / "data"))
    with torch.no_grad():
        for layer in silenced.models[0].decoder.layers:
            layer.long_term_memory.out_proj.weight.zero_()
    context = lm.context(lm.encode(_text(6 * SEG, seed=8)))
    on, off = (_log_probs(m.models[0], context) for m in (lm, silenced))
    torch.testing.assert_close(on[:SEG], off[:SEG], rtol=0, atol=1e-6)  # the first segment: memory empty
    assert (on[2 * SEG:] - off[2 * SEG:]).abs().max() > 1e-3


def test_bad_input_is_one_line(lm, folder, tmp_path):
    ck, data = str(folder / "ck"), str(folder / "data")
    cases = [
        (dict(model_name_or_path=str(tmp_path / "nowhere")), "is not a folder"),
        (dict(model_name_or_path="https://example.com/model"), "nothing is downloaded"),
        (dict(model_name_or_path=ck), "checkpoint_file="),  # fairseq's default model.pt is not there
        (dict(model_name_or_path=ck, checkpoint_file="checkpoint_last.pt", data_name_or_path=str(tmp_path)),
         "dict.txt not found"),
        (dict(model_name_or_path=ck, checkpoint_file="checkpoint_last.pt", data_name_or_path=data,
              bpe="sentencepiece"), "sentencepiece_model="),
        (dict(model_name_or_path=ck, checkpoint_file="checkpoint_last.pt", data_name_or_path=data,
              bpe="gpt2", gpt2_encoder_json="https://x/encoder.json", gpt2_vocab_bpe="https://x/vocab.bpe"),
         "not a local file"),
    ]
    for kwargs, message in cases:
        with pytest.raises(ConfigError, match=re.escape(message)):
            InfiniteFormerLanguageModel.from_pretrained(**kwargs)
    with pytest.raises(ConfigError, match="100,000"):
        lm.sample("w1 w2", max_len_b=10 ** 8)
    with pytest.raises(ConfigError, match="inference_step_args"):
        lm.generate(lm.encode("w1"), inference_step_args={"prefix_tokens": torch.tensor([[4]])})


def test_a_checkpoint_of_another_model_is_refused(folder, tmp_path):
    write_checkpoint(tmp_path / "checkpoint_last.pt", folder / "data", "--task", "language_modeling", "--arch",
                     "fastformer_lm_tiny", "--tokens-per-sample", 16)
    with pytest.raises(ConfigError, match="holds a fastformer_lm model; .* loads infinite_former_lm checkpoints"):
        InfiniteFormerLanguageModel.from_pretrained(str(tmp_path), checkpoint_file="checkpoint_last.pt",
                                                    data_name_or_path=str(folder / "data"))
    (tmp_path / "broken.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(ConfigError, match="cannot load .*broken.pt"):
        InfiniteFormerLanguageModel.from_pretrained(str(tmp_path), checkpoint_file="broken.pt",
                                                    data_name_or_path=str(folder / "data"))


@pytest.mark.full
def test_score_equals_fairseq_eval_lm_on_the_same_text(lm, folder, tmp_path):
    """fairseq-eval-lm --task streaming_lm --batch-size 1 scores a split as one stream (one </s>
    in front, the memory carried from batch to batch): the hub scores that stream the same."""
    lines = [_text(n, seed=n) for n in (30, 55, 12, 41)]
    (tmp_path / "test.txt").write_text("\n".join(lines) + "\n")
    run(["fairseq-preprocess", "--only-source", "--testpref", tmp_path / "test.txt", "--destdir", tmp_path / "bin",
         "--srcdict", folder / "data" / "dict.txt", "--workers", "1"])
    out = fairseq("fairseq-eval-lm", tmp_path / "bin", "--task", "streaming_lm", "--path",
                  folder / "ck" / "checkpoint_last.pt", "--tokens-per-sample", SEG, "--batch-size", 1,
                  "--gen-subset", "test")
    log = out.stdout + out.stderr
    loss = float(re.search(r"Loss \(base 2\): ([0-9.]+)", log).group(1))
    count = int(re.search(r"Evaluated ([0-9,]+) tokens", log).group(1).replace(",", ""))
    eos = lm.tgt_dict.eos()
    stream = torch.cat([torch.tensor([eos])] + [lm.encode(line) for line in lines])  # every line ends with </s>
    scored = lm.score_tokens(stream)
    assert scored["positional_scores"].numel() == count
    assert abs(-float(scored["score"]) / math.log(2) - loss) < 1e-3  # eval-lm prints 4 decimals
    assert os.path.isfile(folder / "ck" / "checkpoint_last.pt")


@pytest.mark.full
def test_the_generation_pages_python_example_runs_after_the_quick_start(quick_start):
    """docs/generation.md's Python block, as written, in the checkout of a miniature quick start
    (conftest's ``quick_start``)."""
    sandbox, env = quick_start
    page = open(os.path.join(ROOT, "docs", "generation.md"), encoding="utf-8").read()
    blocks = re.findall(r"```python\n(.*?)```", page, re.S)
    assert len(blocks) == 1, blocks
    proc = run([sys.executable, "-c", blocks[0]], cwd=sandbox, extra_env={"PYTHONPATH": env["PYTHONPATH"]})
    lines = proc.stdout.strip().splitlines()
    assert re.fullmatch(r"perplexity [0-9.]+ over [0-9,]+ tokens", lines[-1]), proc.stdout
    assert len(lines) >= 2 and lines[0].strip(), proc.stdout  # the continuation
