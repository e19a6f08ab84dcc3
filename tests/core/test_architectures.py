"""Named architectures resolve through fairseq's own argument parsing, and the
long-term memory adds the parameters the design implies (paper §6: ~4M per
layer at width 768); compressive_transformer_lm builds the compressive memory."""

import os

import pytest
from fairseq import options, tasks
from fairseq.data import Dictionary
from fairseq.dataclass.utils import convert_namespace_to_omegaconf

from fairseq_plugins.errors import ConfigError
from fairseq_plugins.models.infinite_former_lm import InfiniteFormerLanguageModel
from fairseq_plugins.modules.memory.compressive import CompressiveMemory

from helpers import ROOT


def build(tmp_path, arch, *extra):
    d = Dictionary()
    for i in range(96):
        d.add_symbol(f"w{i}")
    d.save(str(tmp_path / "dict.txt"))
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, [
        str(tmp_path), "--user-dir", os.path.join(ROOT, "fairseq_plugins"), "--task", "streaming_lm",
        "--arch", arch, "--criterion", "infinite_former_kl", "--batch-size", "2", *extra])
    cfg = convert_namespace_to_omegaconf(args)
    task = tasks.setup_task(cfg.task)
    return task.build_model(cfg.model), cfg.model


def ltm_params(width, num_basis):
    # W_K, W_V, W_O^LTM (no bias) + Conv1d(width, width, 3) with bias + w_μ, w_σ
    return 3 * width * width + (3 * width * width + width) + 2 * num_basis


@pytest.mark.parametrize("arch,layers,width,heads,ffn,mem,n", [
    ("infinite_former_lm", 2, 128, 4, 512, 64, 512),
    ("infinite_former_lm_wiki103", 16, 410, 10, 2100, 150, 150),
    ("infinite_former_lm_gpt2_small", 12, 768, 12, 3072, 512, 512),
])
def test_named_architectures(tmp_path, arch, layers, width, heads, ffn, mem, n):
    model, cfg = build(tmp_path, arch, "--tokens-per-sample", "64")
    assert isinstance(model, InfiniteFormerLanguageModel)
    assert (cfg.decoder_layers, cfg.decoder_embed_dim, cfg.decoder_attention_heads,
            cfg.decoder_ffn_embed_dim, cfg.mem_len, cfg.num_basis_functions) == (layers, width, heads, ffn, mem, n)
    assert len(model.decoder.layers) == layers
    layer = model.decoder.layers[0]
    assert sum(p.numel() for p in layer.long_term_memory.parameters()) == ltm_params(width, n)


def test_memory_off_twin_differs_only_by_the_long_term_memory(tmp_path):
    on, cfg = build(tmp_path, "infinite_former_lm", "--tokens-per-sample", "32")
    off, _ = build(tmp_path, "infinite_former_lm", "--tokens-per-sample", "32", "--no-long-term-memory")
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert count(on) - count(off) == cfg.decoder_layers * ltm_params(cfg.decoder_embed_dim, cfg.num_basis_functions)
    assert all(layer.long_term_memory is None for layer in off.decoder.layers)


def test_short_term_memory_defaults_to_the_segment_length(tmp_path):
    model, cfg = build(tmp_path, "infinite_former_lm", "--tokens-per-sample", "48")
    assert cfg.segment_length == 48 and cfg.mem_len == 48
    assert model.decoder.layers[0].self_attn.mem_len == 48


def test_the_compressive_transformer_through_fairseq_parsing(tmp_path):
    model, cfg = build(tmp_path, "compressive_transformer_lm", "--tokens-per-sample", "64",
                       "--num-basis-functions", "32")
    memory = model.decoder.layers[0].long_term_memory
    assert isinstance(memory, CompressiveMemory) and cfg.ltm_input == "evicted" and cfg.mem_len == 64
    assert (memory.slots, memory.rate, memory.compression) == (32, 4, "conv")  # as many slots as N
    assert sum(p.numel() for p in memory.parameters()) == 4 * 128 * 128 + 128  # Conv1d C -> C, kernel 4
    model, _ = build(tmp_path, "compressive_transformer_lm", "--tokens-per-sample", "64",
                     "--compressed-memory-slots", "8", "--compression-rate", "2", "--compression", "mean")
    memory = model.decoder.layers[0].long_term_memory
    assert (memory.slots, memory.rate, memory.compression, memory.conv) == (8, 2, "mean", None)
    with pytest.raises(ConfigError, match="--compression-rate 3 does not divide the segment length 64"):
        build(tmp_path, "compressive_transformer_lm", "--tokens-per-sample", "64", "--compression-rate", "3")


@pytest.mark.full
def test_every_option_is_documented():
    import dataclasses
    import subprocess
    import sys

    from fairseq_plugins.__main__ import components

    out = subprocess.run([sys.executable, "-m", "fairseq_plugins"], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
    for _, config in components():
        for f in dataclasses.fields(config):
            interpolated = isinstance(f.default, str) and f.default.startswith("${") and not f.metadata.get("help")
            if f.name.startswith("_") or f.name == "sentence_avg" or interpolated:
                continue  # fairseq's own options (interpolated from fairseq's groups: no option of ours)
            assert f.metadata.get("help"), f"{config.__name__}.{f.name} has no help"
            flag = f.name if f.name == "data" else "--" + f.name.replace("_", "-")  # data is positional
            assert flag in out
