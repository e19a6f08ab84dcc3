"""``fairseq-longmem bench gpt2`` (docs/benchmark.md, "GPT-2 against transformers"): its quick
mode checks, before timing anything, that the converted model reads GPT-2's ids as
transformers does and that its logits (memory off and on) agree with ``GPT2LMHeadModel``'s
within 1e-4; a wrong weight or a wrong token map stops the run in one line with nothing
timed or written; bad input is one line each.

The workers run in this process (``worker.run`` replaced by a direct call, which keeps the
monkeypatched model loader and token map in force); tiny sizes, one thread.
"""

import json
import os

import pytest
import torch

transformers = pytest.importorskip("transformers", reason="transformers' GPT-2: pip install -e '.[hf]' (docs/gpt2.md)")

from fairseq_plugins import cli  # noqa: E402
from fairseq_plugins.lab.bench import gpt2
from fairseq_plugins.lab.bench import gpt2_models  # noqa: E402

QUICK = ["--quick", "--threads", "1", "--parts", "train", "--models", "hf,off", "--repeats", "1", "--warmup", "0"]


@pytest.fixture
def calls(monkeypatch):
    """Run every worker in this process; the list of the functions called, in order."""
    called = []

    def inline(function, args, timeout=None, **kwargs):
        called.append(function.__name__)
        try:
            return function(args, **kwargs)
        except Exception as e:  # as the worker reports it: the exception's last line
            return {"error": f"{type(e).__name__}: {e}"[:120]}

    monkeypatch.setattr(gpt2.worker, "run", inline)
    progress = transformers.utils.logging.is_progress_bar_enabled()
    transformers.utils.logging.disable_progress_bar()  # the workers' stderr is not the command's
    yield called
    if progress:
        transformers.utils.logging.enable_progress_bar()


def _bench(capsys, *args):
    status = cli.main(["bench", "gpt2", *args])
    return status, capsys.readouterr()


def test_quick_mode_checks_the_logits_then_times(capsys, tmp_path, calls):
    status, out = _bench(capsys, *QUICK, "--out", str(tmp_path))
    assert status == 0, out.err
    payload = json.loads((tmp_path / "gpt2.json").read_text())
    assert 0 <= payload["checked"] <= gpt2_models.TOLERANCE == 1e-4
    assert calls == ["write_models", "train_times"]  # the check first, in its own worker
    assert {row["arm"] for row in payload["train"]} == {"hf", "off"}
    assert all(row["tokens_per_s"] > 0 and row["loss"] > 0 for row in payload["train"])
    assert "Converted model checked before timing: logits within" in (tmp_path / "gpt2.md").read_text()


def _refused_before_timing(capsys, tmp_path, calls, *needles):
    status, out = _bench(capsys, *QUICK, "--out", str(tmp_path / "out"))
    assert status == 2 and out.err.count("\n") == 1 and "Traceback" not in out.err, out.err
    for needle in ("could not be built and checked", *needles):
        assert needle in out.err, out.err
    assert calls == ["write_models"] and not (tmp_path / "out").exists()


def test_a_wrong_weight_stops_the_run_before_timing(capsys, tmp_path, calls, monkeypatch):
    load = gpt2_models.load

    def perturbed(arm, *args):
        model = load(arm, *args)
        if arm == "off":  # one weight of the converted model, as a converter bug would leave it
            with torch.no_grad():
                model.decoder.layers[0].ffn.fc2.bias[0] += 1e-2
        return model

    monkeypatch.setattr(gpt2_models, "load", perturbed)
    _refused_before_timing(capsys, tmp_path, calls, "logits differ from transformers'")


def test_tokens_read_differently_stop_the_run_before_timing(capsys, tmp_path, calls, monkeypatch):
    index = gpt2_models.gpt2_index

    def swapped(model, vocab_size):  # GPT-2's ids 0 and 1 read as each other's symbols
        out = index(model, vocab_size).clone()
        out[[0, 1]] = out[[1, 0]]
        return out

    monkeypatch.setattr(gpt2_models, "gpt2_index", swapped)
    _refused_before_timing(capsys, tmp_path, calls, "logits differ from transformers'")


@pytest.mark.parametrize("args, needle", [
    (("--segment", "2048"), "--segment 2048 exceeds GPT-2's position table (--positions 1024)"),
    (("--quick", "--gen-tokens", "64"), "--gen-tokens 64 leaves no prompt in GPT-2's window of 64 positions"),
    (("--models", "hf,gpt3"), "unknown model gpt3; models: hf, off, on"),
])
def test_bad_input_is_one_line_and_writes_nothing(capsys, tmp_path, calls, args, needle):
    status, out = _bench(capsys, *args, "--out", str(tmp_path / "out"))
    assert status == 2 and out.err.count("\n") == 1 and needle in out.err, out.err
    assert out.err.startswith("fairseq-longmem bench") and "Traceback" not in out.err
    assert calls == [] and not (tmp_path / "out").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is present: --device cuda is valid here")
def test_cuda_without_cuda_is_one_line(capsys, tmp_path, calls):
    status, out = _bench(capsys, "--device", "cuda", "--out", str(tmp_path / "out"))
    assert status == 2 and out.err.count("\n") == 1 and "torch sees no CUDA device here" in out.err, out.err
    assert calls == [] and not os.path.exists(tmp_path / "out")
