"""fastformer_lm and fastformer (encoder–decoder): incremental decoding against
the full forward pass, beam search (fairseq's SequenceGenerator) against
rescoring its hypotheses with a full forward pass, parameter sharing against
the parameter-count formulas, one-line errors, and the command-line tools
(fairseq-preprocess → fairseq-train → fairseq-eval-lm / fairseq-generate)."""

import math
import re
from types import SimpleNamespace

import pytest
import torch
from fairseq.sequence_generator import SequenceGenerator

from fairseq_plugins.errors import ConfigError
from fairseq_plugins.models.fastformer import FastformerConfig, FastformerModel
from fairseq_plugins.models.fastformer_lm import FastformerLanguageModel, FastformerLMConfig
from fairseq_plugins.modules.attention.additive import AdditiveAttention
from helpers import dictionary, fairseq, one_line_error, record_reorders, run

C, F, H = 16, 32, 2


def _task(src, tgt=None):
    return SimpleNamespace(source_dictionary=src, target_dictionary=tgt or src)


def _lm(d, seed=0, **overrides):
    torch.manual_seed(seed)
    options = dict(decoder_embed_dim=C, decoder_ffn_embed_dim=F, decoder_layers=2, decoder_attention_heads=H,
                   dropout=0.0, tokens_per_sample=64, max_target_positions=64, attention_chunk_size=4)
    options.update(overrides)
    return FastformerLanguageModel.build_model(FastformerLMConfig(**options), _task(d)).eval()


def _seq2seq(src, tgt, seed=0, **overrides):
    torch.manual_seed(seed)
    options = dict(encoder_embed_dim=C, encoder_ffn_embed_dim=F, encoder_layers=2, encoder_attention_heads=H,
                   decoder_embed_dim=C, decoder_ffn_embed_dim=F, decoder_layers=2, decoder_attention_heads=H,
                   dropout=0.0, max_source_positions=64, max_target_positions=64, attention_chunk_size=4)
    options.update(overrides)
    return FastformerModel.build_model(FastformerConfig(**options), _task(src, tgt)).eval()


def _tokens(d, bsz, length, seed=0):
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(d.nspecial, len(d), (bsz, length), generator=g)
    tokens[:, 0] = d.eos()
    return tokens


def _state_numel(state):
    return sum(v.numel() for s in state.values() for v in s.values() if v is not None)


# ---- incremental decoding -----------------------------------------------------


@pytest.mark.parametrize("share", ["none", "attention", "all"])
def test_lm_incremental_equals_full_forward(share):
    d = dictionary()
    model = _lm(d, share_layers=share)
    tokens = _tokens(d, 3, 12)
    with torch.no_grad():
        full, _ = model(tokens)
        state = {}
        for t in range(tokens.size(1)):
            step, _ = model.decoder(tokens[:, :t + 1], incremental_state=state)
            torch.testing.assert_close(step[:, -1], full[:, t], atol=1e-5, rtol=1e-5)


def test_lm_incremental_state_does_not_grow():
    d = dictionary()
    model = _lm(d)
    tokens = _tokens(d, 2, 50, seed=1)
    sizes = {}
    with torch.no_grad():
        state = {}
        for t in range(50):
            model.decoder(tokens[:, :t + 1], incremental_state=state)
            if t + 1 in (5, 50):
                sizes[t + 1] = _state_numel(state)
    # 2 layers × 2 sequences × (4·H + 2·C) numbers
    assert sizes[5] == sizes[50] == 2 * 2 * (4 * H + 2 * C)


@pytest.mark.parametrize("decoder_type", ["fastformer", "transformer"])
def test_seq2seq_incremental_equals_full_forward(decoder_type):
    src_d, tgt_d = dictionary(15, "s"), dictionary(18, "t")
    model = _seq2seq(src_d, tgt_d, decoder_type=decoder_type)
    src = _tokens(src_d, 2, 7, seed=2)[:, 1:]
    src[1, :2] = src_d.pad()  # left padding, as the translation task does
    src_lengths = src.ne(src_d.pad()).sum(1)
    prev = _tokens(tgt_d, 2, 9, seed=3)
    with torch.no_grad():
        full, extra = model(src, src_lengths, prev)
        enc = model.encoder(src, src_lengths)
        state = {}
        for t in range(prev.size(1)):
            step, _ = model.decoder(prev[:, :t + 1], encoder_out=enc, incremental_state=state)
            torch.testing.assert_close(step[:, -1], full[:, t], atol=1e-5, rtol=1e-5)
        # the padded source row gives the same outputs as the row without padding
        alone, _ = model(src[1:, 2:], src_lengths[1:], prev[1:])
        torch.testing.assert_close(alone[0], full[1], atol=1e-5, rtol=1e-5)
    if decoder_type == "fastformer":
        assert extra["attn"][0].shape == (2, 9, 6)


def test_reorder_encoder_out_equals_encoding_reordered_input():
    src_d, tgt_d = dictionary(15, "s"), dictionary(18, "t")
    model = _seq2seq(src_d, tgt_d)
    src = _tokens(src_d, 3, 6, seed=4)
    src[0, :2] = src_d.pad()
    lengths = src.ne(src_d.pad()).sum(1)
    new_order = torch.tensor([2, 2, 0, 1])
    with torch.no_grad():
        moved = model.encoder.reorder_encoder_out(model.encoder(src, lengths), new_order)
        direct = model.encoder(src[new_order], lengths[new_order])
    for key in ("encoder_out", "encoder_padding_mask", "encoder_embedding", "src_lengths"):
        torch.testing.assert_close(moved[key][0], direct[key][0], atol=1e-6, rtol=1e-6)


# ---- beam search ------------------------------------------------------------


def _check_hypotheses(hypos, rescore, eos):
    """Every hypothesis's positional scores = log-probs of a full forward pass."""
    count = 0
    for i, beams in enumerate(hypos):
        assert len(beams) == 3
        for hyp in beams:
            tokens = hyp["tokens"]
            prev = torch.cat([tokens.new_tensor([eos]), tokens[:-1]]).unsqueeze(0)
            lprobs = rescore(i, prev)[0]  # (L, V)
            expected = lprobs.gather(1, tokens.unsqueeze(1)).squeeze(1)
            torch.testing.assert_close(hyp["positional_scores"], expected, atol=1e-4, rtol=1e-4)
            assert hyp["score"].item() == pytest.approx(expected.sum().item() / len(tokens), abs=1e-4)
            count += 1
    return count


def _nontrivial(orders):
    return any(not torch.equal(o, torch.arange(len(o))) for o in orders)


def test_lm_beam_search_scores_equal_full_forward_rescoring(monkeypatch):
    d = dictionary(12)
    model = _lm(d, seed=5, share_layers="all")
    orders = record_reorders(monkeypatch, AdditiveAttention)
    generator = SequenceGenerator([model], d, beam_size=3, max_len_b=10, min_len=4)
    sample = {"net_input": {"src_tokens": _tokens(d, 2, 3), "src_lengths": torch.tensor([3, 3])}}
    with torch.no_grad():
        hypos = generator.generate([model], sample)

        def rescore(i, prev):
            return model.get_normalized_probs(model(prev), log_probs=True)

        assert _check_hypotheses(hypos, rescore, d.eos()) == 6
    assert _nontrivial(orders)  # beams really were reordered


@pytest.mark.parametrize("decoder_type", ["fastformer", "transformer"])
def test_seq2seq_beam_search_scores_equal_full_forward_rescoring(monkeypatch, decoder_type):
    src_d, tgt_d = dictionary(15, "s"), dictionary(12, "t")
    model = _seq2seq(src_d, tgt_d, seed=6, decoder_type=decoder_type)
    orders = record_reorders(monkeypatch, AdditiveAttention)
    src = _tokens(src_d, 2, 7, seed=7)[:, 1:]
    src[:, -1] = src_d.eos()
    src[0, :3] = src_d.pad()
    lengths = src.ne(src_d.pad()).sum(1)
    generator = SequenceGenerator([model], tgt_d, beam_size=3, max_len_b=10, min_len=3)
    with torch.no_grad():
        hypos = generator.generate([model], {"net_input": {"src_tokens": src, "src_lengths": lengths}})

        def rescore(i, prev):
            return model.get_normalized_probs(model(src[i:i + 1], lengths[i:i + 1], prev), log_probs=True)

        assert _check_hypotheses(hypos, rescore, tgt_d.eos()) == 6
    if decoder_type == "fastformer":
        assert _nontrivial(orders)


# ---- parameter sharing ----------------------------------------------------------


def _attention_params(qv_sharing):
    # W_q, W_k, (W_v), W_r, W_o with biases + score vectors w_q, w_k (H·d = C each)
    n = 4 if qv_sharing else 5
    return n * (C * C + C) + 2 * C


def _block_params(qv_sharing, with_attention=True):
    rest = 2 * 2 * C + (C * F + F) + (F * C + C)  # two LayerNorms + FFN
    return rest + (_attention_params(qv_sharing) if with_attention else 0)


@pytest.mark.parametrize("share,qv_sharing", [("none", False), ("none", True), ("attention", False),
                                              ("all", False), ("all", True)])
def test_lm_parameter_counts(share, qv_sharing):
    d = dictionary()
    layers = 3
    model = _lm(d, share_layers=share, query_value_sharing=qv_sharing, decoder_layers=layers)
    blocks = {
        "none": layers * _block_params(qv_sharing),
        "attention": layers * _block_params(qv_sharing, with_attention=False) + _attention_params(qv_sharing),
        "all": _block_params(qv_sharing),
    }[share]
    expected = 2 * len(d) * C + blocks + 2 * C  # embedding, output projection, blocks, final LayerNorm
    assert sum(p.numel() for p in model.parameters()) == expected
    if share == "all":
        assert len({id(layer) for layer in model.decoder.layers}) == 1
        single = _lm(d, query_value_sharing=qv_sharing, decoder_layers=1)
        assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in single.parameters())


def test_lm_tied_embeddings_and_learned_positions_counts():
    d = dictionary()
    model = _lm(d, share_decoder_input_output_embed=True, decoder_learned_pos=True)
    positions = (64 + d.pad() + 1) * C
    assert sum(p.numel() for p in model.parameters()) == len(d) * C + positions + 2 * _block_params(False) + 2 * C


def test_seq2seq_encoder_sharing_counts():
    src_d, tgt_d = dictionary(15, "s"), dictionary(18, "t")
    full = _seq2seq(src_d, tgt_d, encoder_layers=3)
    shared = _seq2seq(src_d, tgt_d, encoder_layers=3, encoder_share_layers="all", encoder_query_value_sharing=True)
    count = lambda m: sum(p.numel() for p in m.encoder.parameters())  # noqa: E731
    assert count(full) == len(src_d) * C + 3 * _block_params(False) + 2 * C
    assert count(shared) == len(src_d) * C + _block_params(True) + 2 * C


# ---- one-line errors --------------------------------------------------------------


def _one_line(excinfo, *needles):
    message = str(excinfo.value)
    assert message and "\n" not in message
    for needle in needles:
        assert needle in message, message


def test_model_errors_are_one_line():
    d, t = dictionary(), dictionary(18, "t")
    with pytest.raises(ConfigError) as e:
        _lm(d, decoder_attention_heads=3)
    _one_line(e, "--decoder-attention-heads", "divide")
    with pytest.raises(ConfigError) as e:
        _seq2seq(d, t, encoder_attention_heads=5)
    _one_line(e, "--encoder-attention-heads")
    for bad in ({"decoder_share_layers": "all"}, {"decoder_query_value_sharing": True}):
        with pytest.raises(ConfigError) as e:
            _seq2seq(d, t, decoder_type="transformer", **bad)
        _one_line(e, "--decoder-type fastformer")
    with pytest.raises(ConfigError) as e:
        _seq2seq(d, t, share_all_embeddings=True)
    _one_line(e, "joined dictionary")
    lm = _lm(d)
    with pytest.raises(ConfigError) as e:
        lm(torch.zeros(2, 0, dtype=torch.long))
    _one_line(e, "empty sequence")
    model = _seq2seq(d, t)
    src = _tokens(d, 2, 4)
    with pytest.raises(ConfigError) as e:
        model(src[:, :0], torch.tensor([0, 0]), _tokens(t, 2, 3))
    _one_line(e, "empty sequence")
    src[1] = d.pad()
    with pytest.raises(ConfigError) as e:
        model(src, torch.tensor([4, 0]), _tokens(t, 2, 3))
    _one_line(e, "all positions padded")


# ---- command-line tools ---------------------------------------------------------


def _sentences(n, seed):
    """Tiny synthetic corpus with structure: 'the aN bN cN ...' counting patterns."""
    g = torch.Generator().manual_seed(seed)
    lines = []
    for _ in range(n):
        start, length = int(torch.randint(0, 8, (1,), generator=g)), int(torch.randint(3, 9, (1,), generator=g))
        lines.append(" ".join(f"w{(start + i) % 12}" for i in range(length)))
    return lines


def _write(path, lines):
    path.write_text("\n".join(lines) + "\n")


@pytest.mark.full
def test_cli_train_eval_lm_and_checkpoint(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    for split, n in (("train", 300), ("valid", 30), ("test", 30)):
        _write(raw / f"{split}.txt", _sentences(n, seed=len(split)))
    data = tmp_path / "bin"
    run(["fairseq-preprocess", "--only-source", "--trainpref", str(raw / "train.txt"), "--validpref",
         str(raw / "valid.txt"), "--testpref", str(raw / "test.txt"), "--destdir", str(data), "--workers", "1"])
    save = tmp_path / "ckpt"
    tiny = {"LAYERS": "2", "WIDTH": "32", "HEADS": "2", "FFN": "64", "SEGMENT": "16", "STREAMS": "8",
            "MAX_UPDATE": "20", "WARMUP": "5", "LR": "0.003"}
    log = run(["bash", "scripts/train.sh", "fastformer_lm", data, save], extra_env=tiny)
    losses = [float(m) for m in re.findall(r"valid on 'valid' subset \| loss ([0-9.]+)", log.stdout + log.stderr)]
    assert losses and all(math.isfinite(x) for x in losses)
    state = torch.load(save / "checkpoint_last.pt", weights_only=True)
    assert state["cfg"]["model"]["_name"] == "fastformer_lm"
    proc = run(["bash", "scripts/evaluate.sh", "fastformer_lm", data, save / "checkpoint_last.pt"], extra_env=tiny)
    match = re.search(r"Loss \(base 2\): ([0-9.]+), Perplexity: ([0-9.]+)", proc.stdout + proc.stderr)
    assert match, proc.stderr[-2000:]
    assert math.isfinite(float(match.group(2))) and float(match.group(2)) < len(open(data / "dict.txt").readlines())
    # the streaming task works too (each segment without memory: fastformer_lm keeps none)
    stream = fairseq("fairseq-train", data, "--task", "streaming_lm", "--arch", "fastformer_lm_tiny",
                     "--tokens-per-sample", "16", "--batch-size", "4", "--max-update", "3", "--optimizer", "adam",
                     "--lr", "1e-3", "--save-dir", tmp_path / "stream")
    assert re.search(r"valid on 'valid' subset \| loss [0-9.]+", stream.stdout + stream.stderr)
    # a bad option is one line, no traceback
    bad = fairseq("fairseq-train", data, "--task", "language_modeling", "--arch", "fastformer_lm",
                  "--decoder-embed-dim", "32", "--decoder-attention-heads", "5", "--max-update", "1",
                  "--optimizer", "adam", "--lr", "1e-3", "--batch-size", "2", "--save-dir", tmp_path / "bad",
                  check=False)
    one_line_error(bad)


@pytest.mark.full
def test_cli_translation_train_and_generate_with_beam(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    for split, n in (("train", 200), ("valid", 12)):
        src = _sentences(n, seed=10 + len(split))
        _write(raw / f"{split}.src", src)
        _write(raw / f"{split}.tgt", [" ".join(reversed(line.split())) for line in src])  # reverse the words
    data = tmp_path / "bin"
    run(["fairseq-preprocess", "--source-lang", "src", "--target-lang", "tgt", "--trainpref", str(raw / "train"),
         "--validpref", str(raw / "valid"), "--destdir", str(data), "--workers", "1"])
    save = tmp_path / "ckpt"
    fairseq("fairseq-train", data, "--task", "translation", "--arch", "fastformer_tiny",
            "--encoder-embed-dim", "32", "--decoder-embed-dim", "32", "--encoder-ffn-embed-dim", "64",
            "--decoder-ffn-embed-dim", "64", "--encoder-attention-heads", "2", "--decoder-attention-heads", "2",
            "--optimizer", "adam", "--lr", "0.003", "--max-update", "8", "--batch-size", "16",
            "--required-batch-size-multiple", "1", "--save-dir", save, "--no-epoch-checkpoints",
            "--log-format", "simple")
    state = torch.load(save / "checkpoint_last.pt", weights_only=True)
    assert state["cfg"]["model"]["_name"] == "fastformer_tiny" and state["cfg"]["model"]["decoder_type"] == "fastformer"
    proc = fairseq("fairseq-generate", data, "--path", save / "checkpoint_last.pt", "--gen-subset", "valid",
                   "--beam", "3", "--nbest", "2", "--batch-size", "4", "--max-len-b", "12",
                   "--required-batch-size-multiple", "1")
    scores = [float(m) for m in re.findall(r"^H-\d+\t(\S+)\t", proc.stdout, flags=re.M)]
    assert len(scores) == 2 * 12 and all(math.isfinite(s) for s in scores)
