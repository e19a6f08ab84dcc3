"""The evidence issue's controls: the memory-wiped ∞-former and the parameter-matched twin."""

import pytest
import torch
from fairseq.data import Dictionary
from torch import nn

from fairseq_plugins.errors import ConfigError
from fairseq_plugins.models.infinite_former_lm import InfiniteFormerDecoder, InfiniteFormerLMConfig
from fairseq_plugins.modules.memory.continuous import LongTermMemory
from fairseq_plugins.modules.memory.contract import set_memory_wiped


def _decoder(seed=0, wiped=False, ltm=True, ltm_input="segment", seg=8, mem=8):
    torch.manual_seed(seed)
    d = Dictionary()
    for i in range(40):
        d.add_symbol(f"w{i}")
    cfg = InfiniteFormerLMConfig(decoder_embed_dim=32, decoder_ffn_embed_dim=64, decoder_layers=2,
                                 decoder_attention_heads=4, segment_length=seg, mem_len=mem, num_basis_functions=8,
                                 num_samples=8, no_long_term_memory=not ltm, memory_wiped=wiped, ltm_input=ltm_input)
    return InfiniteFormerDecoder(cfg, d, nn.Embedding(len(d), 32, d.pad())).eval()


def _tokens(bsz=3, length=40, seed=1):
    return torch.randint(4, 44, (bsz, length), generator=torch.Generator().manual_seed(seed))


def _logits_with_empty_memory_at_every_segment(decoder, tokens):
    """Reference: one segment per call, each layer's long-term memory state replaced by an empty
    one before the segment (the short-term memory carried as usual)."""
    bsz, seg = tokens.size(0), decoder.segment_length
    states, outs = None, []
    for start in range(0, tokens.size(1), seg):
        if states is not None:
            for layer, state in zip(decoder.layers, states):
                state.memory = layer.long_term_memory.empty_state(bsz, tokens.device)
            decoder.memory_bank.put("ref", states)
        out, _ = decoder(tokens[:, start:start + seg], memory_key="ref")
        outs.append(out)
        states = decoder.memory_bank.peek("ref")
    return torch.cat(outs, dim=1)


@pytest.mark.parametrize("ltm_input", ["segment", "evicted"])
def test_wiped_logits_equal_an_empty_long_term_state_at_every_segment(ltm_input):
    tokens = _tokens()
    reference = _logits_with_empty_memory_at_every_segment(_decoder(ltm_input=ltm_input), tokens)
    wiped, _ = _decoder(wiped=True, ltm_input=ltm_input)(tokens)
    assert torch.allclose(wiped, reference, atol=1e-6, rtol=0)
    # the memory is used unwiped: the first segment is the same (an empty memory either way), later ones are not
    full, _ = _decoder(ltm_input=ltm_input)(tokens)
    assert torch.allclose(full[:, :8], wiped[:, :8], atol=1e-6, rtol=0)
    assert (full[:, 8:] - wiped[:, 8:]).abs().max() > 1e-3


def test_wiped_equals_a_zeroed_memory_output_projection_and_the_switch_on_a_built_model():
    """The wiped read contributes exactly nothing: the same logits as the unwiped model whose
    long-term memory's output projection W_O^LTM is zero; set_memory_wiped on a built model is
    the same as building it with --memory-wiped."""
    tokens = _tokens(length=33)
    built, _ = _decoder(wiped=True)(tokens)
    switched = _decoder()
    assert set_memory_wiped(switched) == 2
    assert torch.equal(switched(tokens)[0], built)
    zeroed = _decoder()
    for m in zeroed.modules():
        if isinstance(m, LongTermMemory):
            for name, p in m.named_parameters():
                if name.startswith("out_proj"):
                    p.data.zero_()
    assert torch.allclose(zeroed(tokens)[0], built, atol=1e-5, rtol=0)


def test_wiped_incremental_decoding_equals_its_full_forward():
    decoder = _decoder(wiped=True)
    tokens = _tokens(bsz=2, length=21)
    full, _ = decoder(tokens)
    state, steps = {}, []
    for t in range(tokens.size(1)):
        out, _ = decoder(tokens[:, :t + 1], incremental_state=state)
        steps.append(out[:, -1:])
    assert torch.allclose(torch.cat(steps, dim=1), full, atol=1e-5, rtol=0)


def test_memory_wiped_on_a_model_without_long_term_memory_is_one_line():
    with pytest.raises(ConfigError, match="--memory-wiped needs a model with a long-term memory.*drop --memory-wiped"):
        set_memory_wiped(_decoder(ltm=False))


def _parameters(width, ffn, heads, num_basis, ltm):
    d = Dictionary()
    cfg = InfiniteFormerLMConfig(decoder_embed_dim=width, decoder_ffn_embed_dim=ffn, decoder_layers=2,
                                 decoder_attention_heads=heads, segment_length=8, mem_len=8,
                                 num_basis_functions=num_basis, num_samples=num_basis, no_long_term_memory=not ltm)
    decoder = InfiniteFormerDecoder(cfg, d, nn.Embedding(len(d), width, d.pad()))
    embeddings = sum(p.numel() for n, p in decoder.named_parameters() if "embed" in n)
    return sum(p.numel() for p in decoder.parameters()) - embeddings


@pytest.mark.parametrize("budget", [{}, {"WIDTH": "64", "FFN": "128", "NUM_BASIS": "32"},
                                    {"WIDTH": "256", "FFN": "1024", "HEADS": "8", "NUM_BASIS": "512"}])
def test_matched_twin_has_the_infinite_formers_parameter_count_within_one_percent(budget):
    from fairseq_plugins.lab.common import arms

    b = arms.budget("lm", env=budget)
    width, ffn, heads, n = int(b["WIDTH"]), int(b["FFN"]), int(b["HEADS"]), int(b["NUM_BASIS"])
    options = arms.train_options("lm", "memory_off_matched", "/tmp/x", cpu=True, env=budget)
    assert options[len(options) - 1 - options[::-1].index("--decoder-ffn-embed-dim") + 1] == arms.matched_ffn(b)
    memory_on = _parameters(width, ffn, heads, n, ltm=True)
    memory_off = _parameters(width, ffn, heads, n, ltm=False)
    matched = _parameters(width, int(arms.matched_ffn(b)), heads, n, ltm=False)
    assert memory_on - memory_off == 2 * arms.ltm_parameters(width, n)  # the formula counts the real modules
    assert abs(matched - memory_on) <= 0.01 * memory_on  # without embeddings: stricter than the whole model
    assert int(arms.matched_ffn(b)) > ffn


@pytest.mark.parametrize("arch, extra, memory", [
    ("infinite_former_lm", [], True), ("infinite_former_lm_wiki103", [], True),
    ("compressive_transformer_lm", ["--compression-rate", "2"], True),
    ("infinite_former_lm", ["--no-long-term-memory"], False), ("transformer_lm", [], False)])
def test_the_analyses_know_a_memory_under_every_architecture_name(tmp_path, arch, extra, memory):
    """Which checkpoints get a memory-wiped row (analyze position --memory-wiped): every model with a
    long-term memory, whatever architecture name its config records."""
    from fairseq_plugins.lab.lm.scoring import checkpoint_info
    from helpers import write_checkpoint

    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "dict.txt").write_text("".join(f"w{i} 1\n" for i in range(20)))
    task = "language_modeling" if arch == "transformer_lm" else "streaming_lm"
    sizes = ["--decoder-layers", 1, "--decoder-embed-dim", 16, "--decoder-attention-heads", 2,
             "--decoder-ffn-embed-dim", 32]
    if task == "streaming_lm":
        sizes += ["--num-basis-functions", 8, "--num-samples", 8, "--mem-len", 8]
    write_checkpoint(tmp_path / "ck.pt", tmp_path / "data", "--task", task, "--arch", arch, "--tokens-per-sample", 8,
                     *sizes, *extra)
    assert checkpoint_info(str(tmp_path / "ck.pt")).long_term_memory is memory
