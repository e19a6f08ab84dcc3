"""Mixed precision, several processes and faults, through fairseq-train
on generated toy data (a word-level LM corpus and a toy "translation" that reverses its
source):

* mixed precision on a CPU: infinite_former_lm, fastformer_lm, the fastformer
  encoder-decoder and infinite_former_gpt2 (a tiny random GPT-2 built with ``transformers``,
  converted with ``fairseq-longmem gpt2 convert`` and fine-tuned from it with ``--restore-file``;
  skipped without the ``[hf]`` extra) train with ``--fp16 --fp16-no-flatten-grads``,
  ``--memory-efficient-fp16`` and ``--amp``; their losses stay finite and follow the fp32
  run (references: the fp32 run, and for whole ``.half()`` models the same rounded weights
  computed in fp32); more GPT-2 checks in tests/lab/gpt2/test_gpt2_precision.py;
* 2 processes (torchrun, gloo) with ``--batch-size S`` each give the loss curve of 1 process
  with ``--batch-size 2S`` (the same global streams);
* NaN/inf: fp32 stops with one line, the checkpoints untouched;
* a truncated checkpoint: one line naming the file, in fairseq-train and fairseq-eval-lm,
  the file untouched;
* scripts/gpu-checks.sh skips cleanly without CUDA (its --dry-run and GPT-2 arm:
  tests/lab/gpt2/test_gpt2_precision.py).

Training runs in-process (fairseq_cli.train.main) where only the losses matter, and as
subprocesses where the user-visible output (the one-line errors) is what is tested.
"""

import copy
import hashlib
import json
import math
import os
import random
import socket

import pytest
import torch

from helpers import BIN, USER_DIR, fairseq, run

# ---- toy data ---------------------------------------------------------------------------

WORDS = [f"w{i}" for i in range(40)]


def _lines(rng, n):
    out = []
    for _ in range(n):
        start = rng.randrange(len(WORDS))  # an arithmetic progression of words: learnable
        out.append(" ".join(WORDS[(start + 3 * k) % len(WORDS)] for k in range(rng.randint(5, 15))))
    return out


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    from fairseq_cli import preprocess

    tmp = tmp_path_factory.mktemp("toy")
    rng = random.Random(0)
    raw = tmp / "raw"
    raw.mkdir()
    for split, n in (("train", 400), ("valid", 40)):
        (raw / f"{split}.txt").write_text("\n".join(_lines(rng, n)) + "\n")
        src = _lines(rng, n)
        (raw / f"{split}.src").write_text("\n".join(src) + "\n")
        (raw / f"{split}.tgt").write_text("\n".join(" ".join(reversed(s.split())) for s in src) + "\n")
    parser = preprocess.options.get_preprocessing_parser()
    preprocess.main(parser.parse_args(["--only-source", "--trainpref", str(raw / "train.txt"), "--validpref",
                                       str(raw / "valid.txt"), "--destdir", str(tmp / "lm"), "--workers", "1"]))
    preprocess.main(parser.parse_args(["-s", "src", "-t", "tgt", "--trainpref", str(raw / "train"), "--validpref",
                                       str(raw / "valid"), "--destdir", str(tmp / "mt"), "--joined-dictionary",
                                       "--workers", "1"]))
    return tmp


@pytest.fixture(scope="module")
def gpt2_data(data):
    """A tiny random GPT-2 (``fairseq-longmem gpt2 tiny``) converted into ``gpt2/`` (checkpoint.pt,
    dict.txt, model-args.txt) and the toy LM text encoded with its BPE (fairseq's GPT-2
    encoder, as ``--bpe gpt2``), binarized with the converted dictionary into ``gpt2lm/``."""
    try:  # not installed, or broken by a torchaudio that does not load with this torch
        import tokenizers  # noqa: F401
        from transformers import GPT2LMHeadModel  # noqa: F401
    except ImportError as e:
        pytest.skip(f"transformers' GPT-2 cannot be imported ({str(e).splitlines()[0][:120]}): pip install -e '.[hf]'")
    from fairseq.data.encoders.gpt2_bpe_utils import get_encoder
    from fairseq_cli import preprocess

    from fairseq_plugins.lab.gpt2.convert import convert
    from fairseq_plugins.lab.gpt2.tiny import make_tiny_gpt2

    hf, conv = data / "gpt2hf", data / "gpt2"
    make_tiny_gpt2(str(hf))
    convert(str(hf), str(conv), tokens_per_sample=16)
    bpe = get_encoder(str(hf / "vocab.json"), str(hf / "merges.txt"))
    for split in ("train", "valid"):
        lines = (data / "raw" / f"{split}.txt").read_text().splitlines()
        (data / "raw" / f"{split}.gpt2").write_text("\n".join(" ".join(map(str, bpe.encode(line))) for line in lines)
                                                    + "\n")
    parser = preprocess.options.get_preprocessing_parser()
    preprocess.main(parser.parse_args(["--only-source", "--srcdict", str(conv / "dict.txt"), "--trainpref",
                                       str(data / "raw" / "train.gpt2"), "--validpref", str(data / "raw" / "valid.gpt2"),
                                       "--destdir", str(data / "gpt2lm"), "--workers", "1"]))
    return data


SMALL = ["--decoder-embed-dim", "32", "--decoder-attention-heads", "2", "--decoder-ffn-embed-dim", "64"]
MODELS = {
    "infinite_former_lm": ["lm", "--task", "streaming_lm", "--arch", "infinite_former_lm",
                           "--criterion", "infinite_former_kl", "--tokens-per-sample", "16", "--batch-size", "4",
                           "--num-basis-functions", "16", "--num-samples", "16", *SMALL],
    "fastformer_lm": ["lm", "--task", "language_modeling", "--arch", "fastformer_lm_tiny", "--tokens-per-sample", "32",
                      "--sample-break-mode", "none", "--batch-size", "4", *SMALL],
    "fastformer_tiny": ["mt", "--task", "translation", "--arch", "fastformer_tiny", "--batch-size", "8",
                        "--encoder-embed-dim", "32", "--encoder-attention-heads", "2", "--encoder-ffn-embed-dim", "64",
                        *SMALL],
    # fine-tuned from the converted GPT-2 (gpt2_data); @FILE: the converter's model options
    "infinite_former_gpt2": ["gpt2lm", "@{data}/gpt2/model-args.txt", "--task", "streaming_lm",
                             "--criterion", "infinite_former_kl", "--tokens-per-sample", "16", "--batch-size", "4",
                             "--num-basis-functions", "16", "--num-samples", "16",
                             "--restore-file", "{data}/gpt2/checkpoint.pt", "--reset-optimizer",
                             "--reset-lr-scheduler", "--reset-meters", "--reset-dataloader"],
}
FIXTURES = {"infinite_former_gpt2": "gpt2_data"}  # the data a model needs beyond `data`
COMMON = ["--user-dir", USER_DIR, "--optimizer", "adam", "--lr", "3e-3", "--cpu", "--log-format", "json",
          "--log-interval", "1", "--disable-validation", "--dropout", "0", "--seed", "1",
          "--required-batch-size-multiple", "1", "--num-workers", "0"]
CPU_PRECISIONS = {  # what a CPU can run (see the README's mixed-precision table)
    "fp16": ["--fp16", "--fp16-no-flatten-grads", "--fp16-init-scale", "16"],
    "memory-efficient-fp16": ["--memory-efficient-fp16", "--fp16-init-scale", "16"],
    "amp": ["--amp"],
}


def model_args(data_dir, model):
    """``MODELS[model]``'s options with ``{data}`` = ``data_dir`` and ``@FILE`` replaced by
    the options written in FILE (argparse's fromfile convention)."""
    out = []
    for arg in MODELS[model][1:]:
        arg = arg.format(data=data_dir)
        out.extend(open(arg[1:]).read().split() if arg.startswith("@") else [arg])
    return out


def train_in_process(data_dir, model, *extra):
    """fairseq-train in this process; returns {update: loss} (loss in bits, as logged)."""
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.distributed import utils as distributed_utils
    from fairseq.logging import progress_bar
    from fairseq_cli import train

    argv = [str(data_dir / MODELS[model][0]), *model_args(data_dir, model), *COMMON, *extra]
    args = options.parse_args_and_arch(options.get_training_parser(), argv)

    # the per-update stats as the progress bar receives them, whatever this process' logging
    # configuration (an in-process tool run earlier in a test worker may filter or disable loggers)
    rows, patched = [], {}
    for bar in (progress_bar.JsonProgressBar, progress_bar.SimpleProgressBar):
        def log(self, stats, tag=None, step=None, _original=bar.log):
            if tag == "train_inner":
                rows.append({"num_updates": stats["num_updates"], "loss": stats["loss"]})
            return _original(self, stats, tag=tag, step=step)
        patched[bar] = bar.log
        bar.log = log
    try:
        distributed_utils.call_main(convert_namespace_to_omegaconf(args), train.main)
    finally:
        for bar, original in patched.items():
            bar.log = original
    return {int(r["num_updates"]): float(r["loss"]) for r in rows}


# ---- A. mixed precision on a CPU ---------------------------------------------------------


@pytest.mark.full
@pytest.mark.parametrize("model", list(MODELS))
def test_cpu_precisions_train_finite_and_follow_fp32(data, model, request):
    if model in FIXTURES:
        request.getfixturevalue(FIXTURES[model])
    steps = ["--max-update", "6", "--no-save"]
    reference = train_in_process(data, model, *steps)
    assert sorted(reference) == list(range(1, 7))
    assert reference[6] < reference[1] - 0.5  # it learns (bits per token)
    for name, flags in CPU_PRECISIONS.items():
        losses = train_in_process(data, model, *steps, *flags)
        assert sorted(losses) == list(range(1, 7)), name
        assert all(math.isfinite(v) for v in losses.values()), (name, losses)
        # first update: the same weights, only the arithmetic differs
        assert losses[1] == pytest.approx(reference[1], abs=0.01), (name, losses, reference)
        # then the same trajectory within fp16 rounding
        assert max(abs(losses[u] - reference[u]) for u in losses) < 0.05, (name, losses, reference)


def _build(data_dir, model):
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    argv = [str(data_dir / MODELS[model][0]), *model_args(data_dir, model), *COMMON]
    cfg = convert_namespace_to_omegaconf(options.parse_args_and_arch(options.get_training_parser(), argv))
    task = tasks.setup_task(cfg.task)
    torch.manual_seed(0)
    return task.build_model(cfg.model).eval(), task


def _half_and_reference(model):
    """The model in fp16, and the same fp16-rounded weights computed in fp32."""
    half = copy.deepcopy(model).half()
    return half, copy.deepcopy(half).float()


@pytest.mark.parametrize("model", ["infinite_former_lm", "infinite_former_gpt2"])
def test_half_memory_models_keep_memory_in_float32_and_match_fp32(data, model, request):
    if model in FIXTURES:
        request.getfixturevalue(FIXTURES[model])
    net, task = _build(data, model)
    if model == "infinite_former_gpt2":  # a memory read that counts (the converted W_O^LTM is zero)
        with torch.no_grad():
            for layer in net.decoder.layers:
                torch.nn.init.normal_(layer.long_term_memory.out_proj.weight, std=0.1)
    half, ref = _half_and_reference(net)
    gen = torch.Generator().manual_seed(0)
    tokens = torch.randint(task.dictionary.nspecial, len(task.dictionary), (3, 16 * 4), generator=gen)
    with torch.no_grad():
        for seg in range(4):  # memory carried: segments 2-4 read the long-term memory
            x = tokens[:, 16 * seg:16 * (seg + 1)]
            got, _ = half(x, memory_key="t")
            want, _ = ref(x, memory_key="t")
            scored = torch.isfinite(want)  # GPT-2: −∞ for the symbols that are no GPT-2 token, in both
            assert got.dtype == torch.float16 and torch.equal(torch.isfinite(got), scored)
            assert (got.float() - want)[scored].abs().max() < 0.05 * want[scored].abs().max(), seg
    state = half.memory_state_dict("t")
    ltm = {k: v for k, v in state.items() if "coefficients" in k or k.endswith((".mu", ".sigma"))}
    assert ltm and all(v.dtype == torch.float32 for v in ltm.values()), {k: v.dtype for k, v in state.items()}
    ref_state = ref.memory_state_dict("t")
    for k in ltm:  # B, μ, σ of the half model = the fp32 computation on its (fp16) inputs
        assert torch.allclose(ltm[k], ref_state[k], rtol=0.05, atol=0.02 * ref_state[k].abs().max()), k


@pytest.mark.parametrize("model", ["fastformer_lm", "fastformer_tiny"])
def test_half_fastformer_softmax_sums_do_not_overflow(data, model):
    net, task = _build(data, model)
    scaled = 0
    with torch.no_grad():  # large attention logits: e^a overflows fp16 (> 65504) from a ≈ 11 on
        for name, p in net.named_parameters():
            if name.endswith(("w_q", "w_k")):
                p.mul_(200.0)
                scaled += 1
    assert scaled >= 4  # w_q and w_k of each additive-attention layer
    half, ref = _half_and_reference(net)
    gen = torch.Generator().manual_seed(1)
    length = 150  # more than one causal chunk of 64
    tokens = torch.randint(task.source_dictionary.nspecial, len(task.source_dictionary), (2, length), generator=gen)
    with torch.no_grad():
        if model == "fastformer_lm":
            got, want = half(tokens)[0], ref(tokens)[0]
        else:
            lengths = torch.full((2,), length)
            got = half(tokens, lengths, tokens)[0]
            want = ref(tokens, lengths, tokens)[0]
    assert got.dtype == torch.float16 and torch.isfinite(got).all()
    assert (got.float() - want).abs().max() < 0.05 * want.abs().max()


# ---- B. GPU checks script ----------------------------------------------------------------


@pytest.mark.full
@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA present: run scripts/gpu-checks.sh itself (the check)")
def test_gpu_checks_skip_cleanly_without_cuda():
    proc = run(["bash", "scripts/gpu-checks.sh"], check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "no CUDA device: skipped", proc.stdout
    assert proc.stderr.strip() == ""


# ---- C. 1 process vs 2 processes ---------------------------------------------------------


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _json_losses(text):
    rows = [json.loads(line[line.index("{"):]) for line in text.splitlines()
            if "| train_inner |" in line and "{" in line]
    return {int(r["num_updates"]): (float(r["loss"]), float(r["nll_loss"]), int(r["bsz"])) for r in rows}


@pytest.mark.full
def test_two_processes_reproduce_the_one_process_loss_curve(data, tmp_path):
    streams = 2  # per rank; the 1-process run reads 2 × 2 = the same 4 global streams
    opts = ["--user-dir", USER_DIR, "--task", "streaming_lm", "--arch", "infinite_former_lm",
            "--criterion", "infinite_former_kl", "--tokens-per-sample", "16", "--num-basis-functions", "16",
            "--num-samples", "16", *SMALL, "--dropout", "0", "--seed", "3", "--optimizer", "adam", "--lr", "3e-3",
            "--max-update", "10", "--cpu", "--log-format", "json", "--log-interval", "1", "--disable-validation",
            "--no-save", "--num-workers", "0",
            # sticky memories draw positions from torch's generator, which fairseq seeds with
            # seed + update on every rank alike: rank r ≠ 0 would not draw what the 1-process run
            # draws for its streams, so the equality is tested with uniform sampling
            "--no-sticky-memories"]
    one = run([os.path.join(BIN, "fairseq-train"), data / "lm", *opts, "--batch-size", 2 * streams,
               "--save-dir", tmp_path / "one"])
    two = run([os.path.join(BIN, "torchrun"), "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
               "--master_port", _free_port(), "--no-python", "bash", "scripts/distributed-train.sh", data / "lm",
               *opts, "--batch-size", streams, "--save-dir", tmp_path / "two", "--distributed-backend", "gloo",
               "--ddp-backend", "legacy_ddp"])
    log_two = two.stdout + two.stderr
    assert "training on 2 devices" in log_two
    a, b = _json_losses(one.stdout + one.stderr), _json_losses(log_two)
    assert sorted(a) == sorted(b) == list(range(1, 11))
    assert all(a[u][2] == b[u][2] == 2 * streams for u in a)  # the same global batch
    for u in a:
        assert b[u][0] == pytest.approx(a[u][0], rel=1e-3), (u, a, b)
        assert b[u][1] == pytest.approx(a[u][1], rel=1e-3), (u, a, b)
    assert a[10][1] < a[1][1]  # a curve, not a constant


# ---- D/E. faults: NaN/inf, truncated checkpoints ---------------------------------------------


def _md5s(folder):
    return {p.name: hashlib.md5(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


def _resume(data_dir, save_dir, *extra):
    """fairseq-train of the toy infinite_former_lm into ``save_dir`` (``helpers.fairseq``, unchecked)."""
    model = MODELS["infinite_former_lm"]
    return fairseq("fairseq-train", data_dir / "lm", *model[1:],
                   *[a for a in COMMON if a not in ("--user-dir", USER_DIR, "--cpu")], "--max-update", "8",
                   "--save-dir", save_dir, *extra, check=False)


def _one_error_line(proc):
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.startswith("fairseq_plugins: error:")]
    assert len(lines) == 1, (proc.stdout + proc.stderr)[-3000:]
    return lines[0]


@pytest.fixture(scope="module")
def checkpoint(data, tmp_path_factory):
    save = tmp_path_factory.mktemp("ckpt")
    train_in_process(data, "infinite_former_lm", "--max-update", "4", "--save-dir", str(save))
    assert (save / "checkpoint_last.pt").is_file()
    return save


@pytest.mark.full
def test_nan_in_the_model_stops_fp32_training_with_one_line(data, checkpoint, tmp_path):
    save = tmp_path / "ckpt"
    save.mkdir()
    state = torch.load(checkpoint / "checkpoint_last.pt", weights_only=True)
    state["model"]["decoder.layer_norm.weight"][0] = float("nan")  # every token's output is NaN
    torch.save(state, save / "checkpoint_last.pt")
    before = _md5s(save)
    line = _one_error_line(_resume(data, save))
    assert "non-finite gradients (NaN/inf) at update 5" in line and str(save) in line, line
    assert ("--fp16" in line) == torch.cuda.is_available(), line  # fp16 skips such updates only on a GPU
    after = _md5s(save)
    assert {k: v for k, v in after.items() if k != "crash.pt"} == before  # nothing saved over
    assert "crash.pt" in after  # fairseq's dump of the failing state, named in the message


def test_nan_with_fp16_on_cpu_gets_a_message_too(data, checkpoint, tmp_path):
    """fp16 skips an overflowing update and lowers the loss scale; fairseq's skip path calls
    ``.cuda()``, so a CPU-only torch fails there (or, once fixed, the loss scale reaches its
    minimum on a persistent NaN): either way the hook's message, nothing overwritten.
    In-process (the hook's message from the exception fairseq raises; the subprocess path
    of the hook is covered by the fp32 test above)."""
    from fairseq_plugins.compat import diagnoses

    save = tmp_path / "ckpt"
    save.mkdir()
    state = torch.load(checkpoint / "checkpoint_last.pt", weights_only=True)
    state["model"]["decoder.layer_norm.weight"][0] = float("inf")
    torch.save(state, save / "checkpoint_last.pt")
    before = _md5s(save)
    with pytest.raises(BaseException) as info:
        train_in_process(data, "infinite_former_lm", "--max-update", "8", "--save-dir", str(save),
                         "--memory-efficient-fp16", "--fp16-init-scale", "16", "--reset-optimizer")
    message = diagnoses.fault_message(info.value)
    assert message is not None, info.value
    assert "fp16 gradient overflow at update" in message or "fp16 loss scale reached" in message, message
    assert {k: v for k, v in _md5s(save).items() if k != "crash.pt"} == before


def _truncate(src, dst):
    blob = src.read_bytes()
    dst.write_bytes(blob[:len(blob) // 2])


@pytest.mark.full
def test_truncated_checkpoint_is_one_line_in_train_and_eval_lm(data, checkpoint, tmp_path):
    save = tmp_path / "ckpt"
    save.mkdir()
    _truncate(checkpoint / "checkpoint_last.pt", save / "checkpoint_last.pt")
    (save / "checkpoint_best.pt").write_bytes((checkpoint / "checkpoint_last.pt").read_bytes())
    before = _md5s(save)
    line = _one_error_line(_resume(data, save))
    assert f"cannot read checkpoint {save / 'checkpoint_last.pt'}" in line, line
    assert "truncated or corrupt" in line and "--restore-file" in line and "checkpoint_best.pt" in line, line
    assert _md5s(save) == before
    proc = fairseq("fairseq-eval-lm", data / "lm", "--task", "streaming_lm", "--path", save / "checkpoint_last.pt",
                   "--batch-size", "2", "--tokens-per-sample", "16", "--gen-subset", "valid", check=False)
    line = _one_error_line(proc)
    assert f"cannot read checkpoint {save / 'checkpoint_last.pt'}" in line and "--path" in line, line
    assert _md5s(save) == before
    # the intact copy next to it is what the message points to: it resumes (update 5 on)
    losses = train_in_process(data, "infinite_former_lm", "--max-update", "6", "--save-dir", str(save),
                              "--restore-file", str(save / "checkpoint_best.pt"), "--no-save")
    assert sorted(losses) == [5, 6]
    assert _md5s(save) == before


def _state_dict_file(path):
    """A torch file that loads but is no fairseq checkpoint: a plain state dict, as a Hugging Face
    ``pytorch_model.bin`` (or ``torch.save(model.state_dict())``) is."""
    torch.save({"transformer.wte.weight": torch.zeros(8, 4), "transformer.h.0.attn.c_attn.weight": torch.zeros(4, 12)},
               path)
    return path


@pytest.mark.full
def test_a_torch_file_that_is_no_fairseq_checkpoint_is_one_line_in_train_and_eval_lm(data, checkpoint, tmp_path):
    """A plain state dict as the checkpoint fairseq-train resumes from (--save-dir's
    checkpoint_last.pt, or --restore-file) and as fairseq-eval-lm's --path: one line naming the
    file and the fix instead of fairseq's KeyError: 'best_loss' traceback; nothing written."""
    save = tmp_path / "ckpt"
    save.mkdir()
    _state_dict_file(save / "checkpoint_last.pt")
    before = _md5s(save)
    line = _one_error_line(_resume(data, save))
    assert line == (f"fairseq_plugins: error: {save / 'checkpoint_last.pt'} is a torch file but not a fairseq "
                    "checkpoint: it is a plain state dict of 2 tensors (as a Hugging Face pytorch_model.bin or "
                    "model.state_dict() is), without fairseq's model, cfg (or args), optimizer_history, extra_state; "
                    "it was left as it is; fairseq-train resumes only from a checkpoint it wrote: move "
                    "checkpoint_last.pt away to train from scratch, or pass --restore-file a checkpoint_*.pt of "
                    "fairseq-train (a Hugging Face GPT-2 folder becomes one with `fairseq-longmem gpt2 convert "
                    "--hf-dir DIR --out OUT`)"), line
    assert _md5s(save) == before
    fresh = tmp_path / "fresh"
    hf = _state_dict_file(tmp_path / "pytorch_model.bin")
    line = _one_error_line(_resume(data, fresh, "--restore-file", hf))
    assert f"{hf} is a torch file but not a fairseq checkpoint" in line and "--restore-file" in line, line
    assert not fresh.exists()  # the refused run's new, empty --save-dir is removed
    proc = fairseq("fairseq-eval-lm", data / "lm", "--task", "streaming_lm", "--path", hf, "--batch-size", "2",
                   "--tokens-per-sample", "16", "--gen-subset", "valid", check=False)
    line = _one_error_line(proc)
    assert f"{hf} is a torch file but not a fairseq checkpoint" in line and "with --path" in line, line


def test_what_fairseqs_loader_needs_of_a_checkpoint(checkpoint, tmp_path):
    """compat/checkpoint_files.py's checkpoint_problem: a checkpoint fairseq-train wrote passes; a
    plain state dict, a dict lacking fairseq's keys, a list each get their words."""
    from fairseq_plugins.compat import checkpoint_files
    from fairseq_plugins.errors import ConfigError

    state = checkpoint_files.check_readable(str(checkpoint / "checkpoint_last.pt"), "eval_lm")
    assert checkpoint_files.checkpoint_problem(state) is None
    assert "plain state dict of 2 tensors" in checkpoint_files.checkpoint_problem(
        torch.load(_state_dict_file(tmp_path / "sd.pt"), weights_only=True))
    assert checkpoint_files.checkpoint_problem({"model": {}, "cfg": {}}) == (
        "it lacks fairseq's optimizer_history, extra_state (its keys: 'model', 'cfg')")
    assert checkpoint_files.checkpoint_problem([1, 2]) == "it holds a list, not a dict"
    with pytest.raises(ConfigError, match=r"sd.pt is a torch file but not a fairseq checkpoint: .* with --checkpoint "):
        checkpoint_files.check_readable(str(tmp_path / "sd.pt"), "analyze", "--checkpoint")
    # a directory of checkpoints: only fairseq checkpoints are offered in the message of a broken one
    (tmp_path / "cut.pt").write_bytes(b"PK\x03\x04cut")
    (tmp_path / "good.pt").write_bytes((checkpoint / "checkpoint_last.pt").read_bytes())
    with pytest.raises(ConfigError, match=r"that load: good.pt;"):
        checkpoint_files.check_readable(str(tmp_path / "cut.pt"), "eval_lm")


def test_a_crash_while_saving_leaves_the_previous_checkpoint(tmp_path, monkeypatch):
    """fairseq writes ``<name>.tmp`` and renames it over the old file
    (checkpoint_utils.torch_persistent_save): a crash mid-write leaves the old file whole."""
    from fairseq import checkpoint_utils

    path = tmp_path / "checkpoint_last.pt"
    checkpoint_utils.torch_persistent_save({"step": torch.arange(3)}, str(path))
    before = path.read_bytes()

    def crash(obj, f):
        f.write(b"half a checkpoint")
        raise KeyboardInterrupt  # killed mid-write

    monkeypatch.setattr(checkpoint_utils, "_torch_persistent_save", crash)
    with pytest.raises(KeyboardInterrupt):
        checkpoint_utils.torch_persistent_save({"step": torch.arange(5)}, str(path))
    assert path.read_bytes() == before
    assert torch.equal(torch.load(path, weights_only=True)["step"], torch.arange(3))


def test_unreadable_checkpoint_messages_in_process(checkpoint, tmp_path):
    """Random bytes, an empty file, and a whole checkpoint that weights_only=True refuses (a
    Python object beyond the allow-list of compat/checkpoints.py inside): each gets its own message,
    and an intact checkpoint passes (compat/checkpoint_files.py, run before fairseq starts)."""
    import pathlib

    from fairseq_plugins.compat import checkpoint_files
    from fairseq_plugins.errors import ConfigError

    (tmp_path / "junk.pt").write_bytes(bytes(random.Random(0).randrange(256) for _ in range(4096)))
    (tmp_path / "empty.pt").write_bytes(b"")
    state = torch.load(checkpoint / "checkpoint_last.pt", weights_only=True)
    state["args"] = pathlib.PurePosixPath("infinite_former_lm")
    torch.save(state, tmp_path / "namespace.pt")
    (tmp_path / "intact.pt").write_bytes((checkpoint / "checkpoint_last.pt").read_bytes())
    messages = {}
    for name in ("junk.pt", "empty.pt", "namespace.pt", "missing.pt"):
        with pytest.raises(ConfigError) as info:
            checkpoint_files.check_readable(str(tmp_path / name), "eval_lm")
        messages[name] = str(info.value)
    # random bytes are no torch file at all; an empty file may be one cut before its first byte
    assert "it is not a torch file (neither torch's zip format nor a pickle)" in messages["junk.pt"]
    assert "that load: intact.pt;" in messages["junk.pt"]
    assert "namespace.pt" not in messages["junk.pt"]  # only files that load are suggested
    assert "truncated or corrupt" in messages["empty.pt"]
    assert "weights_only=True" in messages["namespace.pt"] and "corrupt" not in messages["namespace.pt"]
    assert "not found" in messages["missing.pt"]
    checkpoint_files.check_readable(str(checkpoint / "checkpoint_last.pt"), "eval_lm")


def test_the_checkpoints_each_tool_will_read(tmp_path):
    """Which files are checked before fairseq starts: every --path of a reading tool; for
    fairseq-train the file it resumes from, as fairseq's checkpoint_utils.load_checkpoint picks it."""
    from fairseq_plugins.compat.checkpoint_files import files_to_read
    from fairseq_plugins.compat.process import command_line

    def read(tool, *argv):
        return files_to_read(tool, command_line(list(argv)))

    save, pretrained = tmp_path / "save", tmp_path / "pretrained.pt"
    assert read("generate", "--path", f"a.pt{os.pathsep}b.pt") == ["a.pt", "b.pt"]  # an ensemble (eval-lm: one)
    assert read("eval_lm", "--path", "a.pt") == ["a.pt"]
    assert read("generate") == [] and read("preprocess", "--path", "a.pt") == []
    assert read("train", "--save-dir", str(save)) == []  # nothing to resume: fairseq starts from scratch
    assert read("train", "--save-dir", str(save), "--finetune-from-model", str(pretrained)) == []
    pretrained.write_bytes(b"x")
    assert read("train", "--save-dir", str(save), "--finetune-from-model", str(pretrained)) == [str(pretrained)]
    save.mkdir()
    (save / "checkpoint_last.pt").write_bytes(b"x")
    last = str(save / "checkpoint_last.pt")
    assert read("train", "--save-dir", str(save), "--finetune-from-model", str(pretrained)) == [last]
    assert read("train", "--save-dir", str(save)) == [last]
    assert read("train", "--save-dir", str(save), "--restore-file", str(pretrained)) == [str(pretrained)]
