"""Silent traps of evaluation and generation, through the real CLIs:
what fairseq-eval-lm / fairseq-generate report must cover every example of the split and
describe what ran, or the run stops with one line ``fairseq_plugins: error: ...``."""

import os
import re
import shutil

import pytest

from helpers import BIN, fairseq, one_line_error, run  # noqa: F401  (one_line_error: for the importers too)

SMALL = ["--decoder-embed-dim", "32", "--decoder-attention-heads", "2", "--decoder-ffn-embed-dim", "64",
         "--decoder-layers", "2"]
EVALUATED = re.compile(r"Evaluated ([0-9,]+) tokens")
LOSS = re.compile(r"Loss \(base 2\): ([0-9.]+)")


def ok(proc):
    """The output (stdout, then stderr) of a run that must have succeeded."""
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    return proc.stdout + proc.stderr


def train(data, save, *args):
    """fairseq-train of the model ``args`` for 2 updates into ``save`` (``helpers.fairseq``);
    returns its checkpoint_last.pt."""
    fairseq("fairseq-train", data, *args, "--optimizer", "adam", "--lr", "1e-3", "--max-update", "2",
            "--save-dir", save, "--no-epoch-checkpoints", "--required-batch-size-multiple", "1", "--num-workers", "0")
    return save / "checkpoint_last.pt"


def preprocess(*args):
    """fairseq-preprocess ARGS with one worker (``helpers.run``)."""
    run([os.path.join(BIN, "fairseq-preprocess"), *args, "--workers", "1"])


@pytest.fixture(scope="module")
def work(tmp_path_factory, books_bin):
    tmp = tmp_path_factory.mktemp("traps")
    shutil.copytree(books_bin.parent, str(tmp / "data"))  # data-prep's output, prepared once
    return tmp


@pytest.fixture(scope="module")
def data(work):
    return work / "data" / "bin"


def split_tokens(data, split="test"):
    """Tokens of the split (each line's tokens + its end of sentence), as eval-lm counts them."""
    from fairseq.data import Dictionary, data_utils
    lines = data_utils.load_indexed_dataset(str(data / split), Dictionary.load(str(data / "dict.txt")))
    return int(lines.sizes.sum())


@pytest.fixture(scope="module")
def fastformer(work, data):
    """fastformer_lm trained on blocks of 32 tokens: {"sinusoidal": path, "learned": path}."""
    lm = ["--task", "language_modeling", "--arch", "fastformer_lm", *SMALL, "--tokens-per-sample", "32",
          "--sample-break-mode", "none", "--batch-size", "4"]
    return {"sinusoidal": train(data, work / "ff_sin", *lm),
            "learned": train(data, work / "ff_learned", *lm, "--decoder-learned-pos")}


# ---- an ∞-former evaluated with another --tokens-per-sample ----------------------------


@pytest.mark.full
def test_infinite_former_eval_says_which_segments_run(work, data):
    ckpt = train(data, work / "if16", "--task", "streaming_lm", "--arch", "infinite_former_lm", *SMALL,
                 "--criterion", "infinite_former_kl", "--tokens-per-sample", "16", "--batch-size", "2",
                 "--num-basis-functions", "16", "--num-samples", "16")
    ev = ["--task", "streaming_lm", "--path", ckpt, "--batch-size", "2", "--tokens-per-sample", "32"]
    asked = ok(fairseq("fairseq-eval-lm", data, *ev))
    warning = [line for line in asked.splitlines() if "--model-overrides" in line]
    assert len(warning) == 1, asked[-3000:]
    assert "segments of 16 tokens with a short-term memory of 16" in warning[0]
    assert "run as 2 segments of 16" in warning[0]
    assert "segments of 32" not in asked.replace(warning[0], "")  # no line claims what did not run
    overridden = ok(fairseq("fairseq-eval-lm", data, *ev, "--model-overrides", "{'segment_length': 32, 'mem_len': 32}"))
    assert "--model-overrides" not in overridden  # it runs what was asked: nothing to say
    assert LOSS.search(overridden).group(1) != LOSS.search(asked).group(1)
    # under language_modeling nothing is carried between blocks: one warning says so
    assert "from an empty memory" not in asked
    plain = ok(fairseq("fairseq-eval-lm", data, *ev[2:6], "--task", "language_modeling", "--tokens-per-sample", "16",
                       "--sample-break-mode", "none"))
    warning = [line for line in plain.splitlines() if "from an empty memory" in line]
    assert len(warning) == 1 and "--task streaming_lm" in warning[0], plain[-3000:]


# ---- fastformer_lm beyond its trained positions -----------------------------------------


@pytest.mark.full
@pytest.mark.parametrize("mode", [["--tokens-per-sample", "64"], ["--tokens-per-sample", "32",
                                                                  "--sample-break-mode", "eos"]])
def test_sinusoidal_fastformer_scores_every_token_beyond_its_trained_length(data, fastformer, mode):
    out = ok(fairseq("fairseq-eval-lm", data, "--path", fastformer["sinusoidal"], "--batch-size", "4", *mode))
    assert int(EVALUATED.search(out).group(1).replace(",", "")) == split_tokens(data), out[-2000:]
    assert "will be skipped" not in out


@pytest.mark.full
@pytest.mark.parametrize("mode", [["--tokens-per-sample", "64"], ["--tokens-per-sample", "32",
                                                                  "--sample-break-mode", "eos"]])
def test_learned_positions_refuse_to_score_a_part_of_the_split(data, fastformer, mode):
    proc = fairseq("fairseq-eval-lm", data, "--path", fastformer["learned"], "--batch-size", "4", *mode, check=False)
    one_line_error(proc, "max_positions=32", "--max-target-positions", "--tokens-per-sample 32")
    assert "Perplexity" not in proc.stdout + proc.stderr


# ---- --context-window not below --tokens-per-sample -------------------------------------


@pytest.mark.full
@pytest.mark.parametrize("window", ["32", "40"])
def test_context_window_as_long_as_the_block_is_one_line(data, fastformer, window):
    proc = fairseq("fairseq-eval-lm", data, "--path", fastformer["sinusoidal"], "--batch-size", "4",
                   "--tokens-per-sample", "32", "--context-window", window, check=False)
    one_line_error(proc, f"--context-window {window}", "--tokens-per-sample 32")


# ---- fairseq-generate drops the last batch --------------------------------------------


def _hypotheses(out):
    return sorted(int(m) for m in re.findall(r"^H-(\d+)\t", out, flags=re.M))


@pytest.fixture(scope="module")
def prompts(work, data):
    """Six short prompts (the first tokens of test lines), as a test split of the LM's dictionary."""
    lines = (work / "data" / "test.spm").read_text(encoding="utf-8").splitlines()
    raw = work / "prompts.txt"
    raw.write_text("".join(" ".join(line.split()[:6]) + "\n" for line in [x for x in lines if x.strip()][:6]))
    preprocess("--only-source", "--testpref", raw, "--destdir", work / "prompts", "--srcdict", data / "dict.txt")
    return work / "prompts"


@pytest.mark.full
def test_fastformer_lm_generates_every_prompt(prompts, fastformer):
    out = ok(fairseq("fairseq-generate", prompts, "--task", "language_modeling", "--path", fastformer["sinusoidal"],
                     "--batch-size", "6", "--beam", "1", "--max-len-b", "10", "--sample-break-mode", "eos"))
    assert _hypotheses(out) == list(range(6)), out[-2000:]


@pytest.fixture(scope="module")
def transformer_lm(work, data):
    """fairseq's own transformer_lm, trained on blocks of 32 tokens."""
    return train(data, work / "tlm", "--task", "language_modeling", "--arch", "transformer_lm", *SMALL,
                 "--tokens-per-sample", "32", "--sample-break-mode", "none", "--batch-size", "4")


@pytest.mark.full
def test_fairseqs_own_model_generates_every_prompt(prompts, transformer_lm):
    # fairseq would drop the only batch (6 is not a multiple of 8) and generate nothing
    out = ok(fairseq("fairseq-generate", prompts, "--task", "language_modeling", "--path", transformer_lm,
                     "--batch-size", "6", "--beam", "1", "--max-len-b", "10", "--sample-break-mode", "eos"))
    assert _hypotheses(out) == list(range(6)), out[-2000:]


# ---- beam search over a forced prefix that starts with end-of-sentence -------------------

GENERATE = ["--task", "language_modeling", "--max-len-b", "20", "--batch-size", "4", "--required-batch-size-multiple",
            "1"]


def _blocks(data, tokens=32):
    return -(-split_tokens(data) // tokens)  # --sample-break-mode none: the split in blocks of 32


@pytest.mark.full
@pytest.mark.parametrize("model", ["transformer_lm", "fastformer_lm"])
@pytest.mark.parametrize("prefix", [["--prefix-size", "3"], []])
def test_beam_search_over_a_prefix_starting_with_eos_is_one_line(data, transformer_lm, fastformer, model, prefix):
    """A block of --sample-break-mode none can start right after an end of line: its forced prefix (the
    source, or the first --prefix-size target tokens) starts with eos, and fairseq's beam search then
    ends in ``AssertionError: 20 < 20`` after the hypotheses of the batches before it."""
    ckpt = transformer_lm if model == "transformer_lm" else fastformer["sinusoidal"]
    proc = fairseq("fairseq-generate", data, "--path", ckpt, *GENERATE, "--tokens-per-sample", "32", *prefix,
                   "--beam", "4", check=False)
    line = one_line_error(proc, "--beam 4", "end-of-sentence", "--beam 1", "--sample-break-mode eos")
    assert (proc.stdout + proc.stderr).rstrip().endswith(line)
    assert "AssertionError" not in proc.stdout + proc.stderr


@pytest.mark.full
@pytest.mark.parametrize("decoding", [["--beam", "1"], ["--sampling", "--beam", "1"],
                                      ["--sampling", "--beam", "4", "--nbest", "4"]])
def test_documented_decodings_generate_every_block(data, transformer_lm, decoding):
    out = ok(fairseq("fairseq-generate", data, "--path", transformer_lm, *GENERATE, "--tokens-per-sample", "32",
                     "--prefix-size", "3", *decoding))
    nbest = int(decoding[-1]) if "--nbest" in decoding else 1
    assert _hypotheses(out) == sorted(list(range(_blocks(data))) * nbest), out[-2000:]


@pytest.mark.full
def test_beam_search_over_prompt_lines_generates_every_prompt(prompts, transformer_lm):
    out = ok(fairseq("fairseq-generate", prompts, "--path", transformer_lm, *GENERATE, "--sample-break-mode", "eos",
                     "--prefix-size", "3", "--beam", "4"))
    assert _hypotheses(out) == list(range(6)), out[-2000:]


@pytest.mark.parametrize("name", ["infinite_former_lm", "infinite_former_gpt2", "fastformer_lm", "fastformer",
                                  "infinite_former_summarizer"])
def test_every_plugin_model_generates_every_example(name):
    """fairseq-generate hands its config to the model before batching: every plugin model
    sets --required-batch-size-multiple to 1 there (the LM case runs through the CLI above)."""
    from fairseq.models import ARCH_MODEL_REGISTRY, BaseFairseqModel
    from omegaconf import OmegaConf

    from fairseq_plugins.models.inference import EveryExampleMixin

    assert issubclass(ARCH_MODEL_REGISTRY[name], EveryExampleMixin)

    class Probe(EveryExampleMixin, BaseFairseqModel):
        pass

    cfg = OmegaConf.create({"dataset": {"required_batch_size_multiple": 8}, "generation": {"beam": 5}})
    Probe().prepare_for_inference_(cfg)
    assert cfg.dataset.required_batch_size_multiple == 1
