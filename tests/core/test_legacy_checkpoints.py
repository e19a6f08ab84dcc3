"""Checkpoints written before the shared backbone (commit 400621e, see
tests/fixtures/legacy_checkpoints/README.md) still load in the fairseq tools'
loader and compute exactly what they computed then: the parameters are renamed
by ``upgrade_state_dict_named`` and the training memory saved in the old flat
layout is restored by the memory bank."""

import os

import pytest
import torch
from fairseq import checkpoint_utils, utils

from fairseq_plugins.errors import ConfigError

from helpers import ROOT

FIXTURES = os.path.join(ROOT, "tests", "fixtures", "legacy_checkpoints")
utils.import_user_module(type("A", (), {"user_dir": os.path.join(ROOT, "fairseq_plugins")})())
REFERENCE = torch.load(os.path.join(FIXTURES, "reference_outputs.pt"), weights_only=True)


def _load(name, path=None):
    overrides = {"data": os.path.join(FIXTURES, "lm-bin")}
    if name in ("fastformer", "infinite_former_summarizer"):
        overrides = {"data": os.path.join(FIXTURES, "mt-bin"), "source_lang": "src", "target_lang": "tgt"}
    models, _, _ = checkpoint_utils.load_model_ensemble_and_task([path or os.path.join(FIXTURES, f"{name}.pt")],
                                                                 arg_overrides=overrides, strict=True)
    return models[0].eval()


def _full_logits(name, model):
    with torch.no_grad():
        if name in ("infinite_former_lm", "fastformer_lm"):
            return model(REFERENCE["lm_tokens"])[0]
        src = REFERENCE["src_tokens"]
        return model(src, src.ne(1).sum(1), REFERENCE["prev_output_tokens"])[0]


@pytest.mark.parametrize("name", ["infinite_former_lm", "fastformer_lm", "fastformer", "infinite_former_summarizer"])
def test_old_checkpoint_gives_the_old_outputs(name):
    torch.testing.assert_close(_full_logits(name, _load(name)), REFERENCE["logits"][name]["full"], rtol=0, atol=1e-5)


def test_old_summarizer_keeps_the_paper_read_although_the_default_read_is_another():
    """The summarizer's default read is the mixture read; a checkpoint saved before the option
    existed holds w_mu, w_sigma (the paper's location read) and is read with it."""
    from fairseq_plugins.models.infinite_former_summarizer import InfiniteFormerSummarizerConfig
    from fairseq_plugins.modules.attention.continuous_cross import ContinuousCrossAttention

    assert InfiniteFormerSummarizerConfig().memory_read == "mixture"
    saved = torch.load(os.path.join(FIXTURES, "infinite_former_summarizer.pt"), weights_only=True)
    assert "memory_read" not in saved["cfg"]["model"] and any(k.endswith("mu_proj") for k in saved["model"])
    reads = {m.read_kind for m in _load("infinite_former_summarizer").modules()
             if isinstance(m, ContinuousCrossAttention)}
    assert reads == {"location"}


NAMED = {"infinite_former_lm": "infinite_former_lm_wiki103", "fastformer_lm": "fastformer_lm_tiny",
         "fastformer": "fastformer_tiny", "infinite_former_summarizer": "infinite_former_summarizer_base"}


def _saved_under_named_architecture(name, tmp_path):
    """The fixture of ``name`` as if it had been trained with ``--arch NAMED[name]`` (the options
    the architecture fixes are all in its config, so only the name changes)."""
    state = torch.load(os.path.join(FIXTURES, f"{name}.pt"), weights_only=True)
    state["cfg"]["model"]["_name"] = state["cfg"]["model"]["arch"] = NAMED[name]
    path = tmp_path / f"{NAMED[name]}.pt"
    torch.save(state, path)
    return str(path)


@pytest.mark.parametrize("name", list(NAMED))
def test_old_checkpoint_of_a_named_architecture_gives_the_old_outputs(name, tmp_path):
    """Under a named architecture fairseq does not merge the saved config with the model's
    defaults, so an option added since (e.g. the summarizer's memory_wiped, the LM's memory_type)
    would be a missing key: the architecture fills the declared defaults in."""
    model = _load(name, _saved_under_named_architecture(name, tmp_path))
    torch.testing.assert_close(_full_logits(name, model), REFERENCE["logits"][name]["full"], rtol=0, atol=1e-5)


def test_old_checkpoint_memory_across_calls_and_restored_training_memory():
    model = _load("infinite_former_lm")
    tokens = REFERENCE["lm_tokens"]
    expected = REFERENCE["logits"]["infinite_former_lm"]
    with torch.no_grad():
        first = model(tokens[:, :12], memory_key="k")[0]
        second = model(tokens[:, 12:], memory_key="k")[0]
        torch.testing.assert_close(torch.cat([first, second], 1), expected["split"], rtol=0, atol=1e-5)
        saved = torch.load(os.path.join(FIXTURES, "infinite_former_lm.pt"), weights_only=True)
        old_memory = saved["extra_state"]["StreamingLanguageModelingTask"]["train_memory"]
        assert "0.chunk" in old_memory and "0.stm" in old_memory  # the old flat layout
        model.load_memory_state_dict("train", old_memory)
        got = model(tokens[:, :8], memory_key="train")[0]
    torch.testing.assert_close(got, expected["restored"], rtol=0, atol=1e-5)
    # and what the new code saves reads back to the same outputs
    model.load_memory_state_dict("train", old_memory)
    resaved = model.memory_state_dict("train")
    assert "0.memory.pending" in resaved and "0.attention.states" in resaved
    model.load_memory_state_dict("train", resaved)
    with torch.no_grad():
        again = model(tokens[:, :8], memory_key="train")[0]
    torch.testing.assert_close(again, got, rtol=0, atol=0)  # (and so to the old outputs as `got`, 1e-5)


@pytest.mark.parametrize("named", [False, True])
def test_model_overrides_set_an_option_the_old_config_predates(monkeypatch, tmp_path, named):
    """fairseq drops a --model-overrides key that the saved config lacks (the summarizer's
    memory_wiped, added after this checkpoint): loaded as fairseq loads it, the model is not
    wiped. With the plugin's change (installed in its fairseq tools) the key is added with its
    default and then overridden: every memory read is wiped, as set_memory_wiped on the loaded
    model; a key that names no option anywhere (misspelled) is refused in one line."""
    from fairseq_plugins.compat import overrides
    from fairseq_plugins.modules.attention.continuous_cross import ContinuousCrossAttention
    from fairseq_plugins.modules.memory.contract import set_memory_wiped

    def load(**extra):
        path = (_saved_under_named_architecture("infinite_former_summarizer", tmp_path) if named else
                os.path.join(FIXTURES, "infinite_former_summarizer.pt"))
        base = {"data": os.path.join(FIXTURES, "mt-bin"), "source_lang": "src", "target_lang": "tgt"}
        models, cfg, _ = checkpoint_utils.load_model_ensemble_and_task([path], arg_overrides={**base, **extra})
        return models[0].eval(), cfg

    def reads(model):
        return [m.wiped for m in model.modules() if isinstance(m, ContinuousCrossAttention)]

    def logits(model):
        return _full_logits("infinite_former_summarizer", model)

    assert "memory_wiped" not in torch.load(os.path.join(FIXTURES, "infinite_former_summarizer.pt"),
                                            weights_only=True)["cfg"]["model"]
    stock, _ = load(memory_wiped=True)
    assert reads(stock) == [False]  # one decoder layer; fairseq's own behaviour: the override is dropped
    monkeypatch.setattr(checkpoint_utils, "overwrite_args_by_name", checkpoint_utils.overwrite_args_by_name)
    monkeypatch.setattr(overrides, "_ORIGINAL", [])
    overrides.install()
    wiped, cfg = load(memory_wiped=True)
    assert reads(wiped) == [True] and cfg.model.memory_wiped
    with pytest.raises(ConfigError, match=r"--model-overrides: 'memory_wipe' is no option of the checkpoint's "
                                          r"configuration \(infinite_former_summarizer.*\); fairseq would ignore it"):
        load(memory_wipe=True)  # misspelled: fairseq would drop it
    with pytest.raises(ConfigError, match=r"--model-overrides: memory_read is fixed by the checkpoint"):
        load(memory_read="content")  # a checkpoint keeps the read it was trained with
    set_memory_wiped(stock)
    assert torch.equal(logits(wiped), logits(stock))
    unwiped, _ = load()
    assert reads(unwiped) == [False]
    torch.testing.assert_close(logits(unwiped), REFERENCE["logits"]["infinite_former_summarizer"]["full"], rtol=0,
                               atol=1e-5)
    assert (logits(unwiped) - logits(wiped)).abs().max() > 1e-4
