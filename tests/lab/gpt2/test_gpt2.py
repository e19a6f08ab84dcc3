"""infinite_former_gpt2 against transformers' own GPT2LMHeadModel (docs/gpt2.md).

A tiny random GPT-2 (2 layers, width 64, a byte-level BPE of 500 tokens trained with
``tokenizers`` on the fixture books, 64 positions) is built and saved with
``save_pretrained`` (``fairseq-longmem gpt2 tiny``), converted with ``fairseq-longmem gpt2
convert``, and compared with ``GPT2LMHeadModel``; the tokenizer path is compared with
``tokenizers``' encoding; the hub interface (``InfiniteFormerGPT2Model.from_pretrained``) is
compared with a full-forward greedy loop and the full forward's scores past the position table.
scripts/gpt2-recipe.sh refuses bad input before creating anything. Nothing is downloaded.
Skipped without the ``[hf]`` extra.
"""

import math
import os
import re
import shutil
import sys

import pytest
import torch

try:  # not installed, or broken by a torchaudio that does not load with this torch
    import tokenizers  # noqa: F401
    from transformers import GPT2LMHeadModel
except ImportError as e:
    pytest.skip(f"transformers' GPT-2 or tokenizers cannot be imported ({str(e).splitlines()[0][:120]}): "
                "pip install -e '.[hf]'; see docs/gpt2.md, Install", allow_module_level=True)

from fairseq import checkpoint_utils  # noqa: E402

from fairseq_plugins import cli  # noqa: E402
from fairseq_plugins.errors import ConfigError  # noqa: E402

import helpers  # noqa: E402
from helpers import ROOT  # noqa: E402

BLOCK = 16


def load(path, **overrides):
    models, _, task = checkpoint_utils.load_model_ensemble_and_task([str(path)], arg_overrides=overrides or None)
    return models[0].eval(), task


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gpt2")
    assert cli.main(["gpt2", "tiny", "--out", str(tmp / "hf")]) == 0
    # a folder that holds a model is not replaced without --force (one line, nothing written)
    before = (tmp / "hf" / "model.safetensors").read_bytes()
    status, _, err = helpers.longmem_in_process("gpt2", "tiny", "--out", tmp / "hf", "--seed", "1")
    assert status == 2 and err.strip().endswith("already holds a model (config.json, model.safetensors); pass "
                                                "another --out, or --force to replace it"), err
    assert (tmp / "hf" / "model.safetensors").read_bytes() == before
    assert cli.main(["gpt2", "convert", "--hf-dir", str(tmp / "hf"), "--out", str(tmp / "conv"),
                     "--tokens-per-sample", str(BLOCK), "--verify"]) == 0
    hf = GPT2LMHeadModel.from_pretrained(str(tmp / "hf")).eval()
    return tmp, hf


def gpt2_to_fairseq(dictionary, hf):
    """The fairseq index of every GPT-2 id (``<|endoftext|>`` is ``</s>``)."""
    eot = hf.config.eos_token_id
    return torch.tensor([dictionary.eos() if i == eot else dictionary.index(str(i))
                         for i in range(hf.config.vocab_size)])


def test_conversion_is_exact_for_one_block(tiny):
    tmp, hf = tiny
    model, task = load(tmp / "conv" / "checkpoint.pt")
    index = gpt2_to_fairseq(task.target_dictionary, hf)
    assert len(set(index.tolist())) == hf.config.vocab_size
    ids = torch.randint(0, hf.config.vocab_size, (3, BLOCK), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ref = hf(ids).logits
        out, _ = model(index[ids])
    assert (out[..., index] - ref).abs().max() <= 1e-4
    # the other symbols (<s> <pad> <unk>) get no probability: the log-probabilities are GPT-2's
    lprobs = torch.log_softmax(out.float(), -1)[..., index]
    assert (lprobs - torch.log_softmax(ref, -1)).abs().max() <= 1e-4


def test_conversion_is_exact_with_the_memory_over_several_blocks(tiny):
    tmp, hf = tiny
    model, task = load(tmp / "conv" / "checkpoint.pt", num_basis_functions=32, num_samples=32)
    assert model.decoder.layers[0].long_term_memory is not None
    index = gpt2_to_fairseq(task.target_dictionary, hf)
    ids = torch.randint(0, hf.config.vocab_size, (2, 4 * BLOCK), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        out, extra = model(index[ids])
        for start in range(0, 4 * BLOCK, BLOCK):  # each block is GPT-2 applied to that block alone
            ref = hf(ids[:, start:start + BLOCK]).logits
            assert (out[:, start:start + BLOCK][..., index] - ref).abs().max() <= 1e-4
    reads = extra["ltm_stats"]
    assert len(reads) == 2 * 4 and all(r.valid.all() for r in reads[2:])  # memory read from block 2 on


def test_memory_is_written_with_the_residual_input_of_the_previous_block(tiny):
    tmp, hf = tiny
    model, task = load(tmp / "conv" / "checkpoint.pt", num_basis_functions=32, num_samples=32)
    index = gpt2_to_fairseq(task.target_dictionary, hf)
    ids = torch.randint(0, hf.config.vocab_size, (2, BLOCK), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        model(index[ids], memory_key="k")
        hidden = hf(ids, output_hidden_states=True).hidden_states  # inputs of each layer
    for layer, state in enumerate(model.memory_bank.peek("k")):
        assert (state.memory.pending - hidden[layer].transpose(0, 1)).abs().max() <= 1e-5


def run(args, **kw):
    """helpers.run: the command must succeed; its stdout and stderr together."""
    proc = helpers.run(args, **kw)
    return proc.stdout + proc.stderr


def write_corpus(folder):
    """A PG-19-style folder: train/ valid/ test/ of .txt books (excerpts of the fixtures)."""
    books = sorted(os.listdir(os.path.join(ROOT, "tests", "fixtures", "books_txt")))
    layout = {"train": books[:3], "valid": books[3:5], "test": books[5:6]}
    for split, names in layout.items():
        os.makedirs(folder / split)
        for name in names:
            with open(os.path.join(ROOT, "tests", "fixtures", "books_txt", name), encoding="utf-8",
                      errors="replace") as f:
                text = f.read()[:1500 if split != "train" else 6000]
            (folder / split / name).write_text(text.rsplit("\n", 1)[0] + "\n", encoding="utf-8")


@pytest.fixture(scope="module")
def prepared(tiny):
    tmp, _ = tiny
    write_corpus(tmp / "corpus")
    run(["bash", "data-prep/prepare-lm.sh", "--corpus", "txt", "--input", str(tmp / "corpus"),
         "--out", str(tmp / "data"), "--bpe", "gpt2", "--hf-dir", str(tmp / "hf"), "--workers", "1"])
    return tmp / "data"


TRAIN = ["--user-dir", "fairseq_plugins", "--task", "streaming_lm", "--tokens-per-sample", str(BLOCK),
         "--batch-size", "2", "--criterion", "infinite_former_kl", "--optimizer", "adam", "--lr", "3e-3",
         "--num-basis-functions", "32", "--num-samples", "32", "--no-epoch-checkpoints", "--cpu",
         "--log-format", "simple", "--log-interval", "1", "--required-batch-size-multiple", "1",
         "--disable-validation"]


@pytest.fixture(scope="module")
def finetuned(tiny, prepared):
    tmp, _ = tiny
    model_args = (tmp / "conv" / "model-args.txt").read_text().split()
    log = run(["fairseq-train", str(prepared / "bin"), *TRAIN, *model_args, "--max-update", "6",
               "--restore-file", str(tmp / "conv" / "checkpoint.pt"), "--reset-optimizer", "--reset-lr-scheduler",
               "--reset-meters", "--reset-dataloader", "--save-dir", str(tmp / "ft")])
    return tmp / "ft", model_args, log


@pytest.mark.full
def test_tokenizer_path_scores_every_bpe_token(tiny, prepared):
    from tokenizers import ByteLevelBPETokenizer

    tmp, _ = tiny
    bpe = ByteLevelBPETokenizer(str(tmp / "hf" / "vocab.json"), str(tmp / "hf" / "merges.txt"))
    docs = (prepared / "raw" / "valid.txt").read_text(encoding="utf-8").split("\n\n")
    ids = [bpe.encode(d.strip("\n")).ids for d in docs]  # paragraphs joined by GPT-2's newline token
    assert len(docs) == 2
    encoded = (prepared / "valid.bpe").read_text().split("\n\n")
    assert [[int(t) for t in line.split()] for line in encoded] == ids
    out = run(["fairseq-eval-lm", str(prepared / "bin"), "--user-dir", "fairseq_plugins", "--task", "streaming_lm",
               "--path", str(tmp / "conv" / "checkpoint.pt"), "--tokens-per-sample", str(BLOCK),
               "--batch-size", "1", "--gen-subset", "valid", "--cpu",
               "--model-overrides", "{'num_basis_functions': 32, 'num_samples': 32}"])
    # every BPE token + one <|endoftext|> per document + one per empty line between documents
    assert f"Evaluated {sum(map(len, ids)) + 2 * len(docs) - 1:,} tokens" in out


@pytest.mark.full
def test_finetuning_makes_the_memory_matter_and_logs_the_kl(tiny, finetuned):
    tmp, hf = tiny
    save, _, log = finetuned
    assert "| kl " in log and "num_updates 6" in log
    with_memory, task = load(save / "checkpoint_last.pt")
    without, _ = load(save / "checkpoint_last.pt", no_long_term_memory=True)
    index = gpt2_to_fairseq(task.target_dictionary, hf)
    ids = index[torch.randint(0, hf.config.vocab_size, (1, 3 * BLOCK), generator=torch.Generator().manual_seed(3))]
    with torch.no_grad():
        a, b = with_memory(ids)[0][..., index], without(ids)[0][..., index]  # the GPT-2 tokens' logits
    assert torch.allclose(a[:, :BLOCK], b[:, :BLOCK], atol=1e-5)  # block 1: the memory is still empty
    assert (a[:, BLOCK:] - b[:, BLOCK:]).abs().max() > 1e-3  # later blocks: the memory's read counts
    assert with_memory.decoder.layers[0].long_term_memory.out_proj.weight.abs().max() > 0


@pytest.mark.full
def test_checkpoints_load_in_every_fairseq_cli(tiny, prepared, finetuned):
    tmp, hf = tiny
    save, model_args, _ = finetuned
    state = torch.load(tmp / "conv" / "checkpoint.pt", weights_only=True)
    assert state["cfg"]["model"]["_name"] == "infinite_former_gpt2"
    resumed = run(["fairseq-train", str(prepared / "bin"), *TRAIN, *model_args, "--max-update", "8",
                   "--save-dir", str(save)])
    assert "(epoch 1 @ 6 updates)" in resumed and "restored the training streams' memory" in resumed
    assert "num_updates=7" in resumed
    generated = run(["fairseq-generate", str(prepared / "bin"), "--user-dir", "fairseq_plugins",
                     "--task", "language_modeling", "--path", str(save / "checkpoint_last.pt"), "--gen-subset", "test",
                     "--tokens-per-sample", str(BLOCK), "--sample-break-mode", "none", "--batch-size", "1",
                     "--max-len-b", str(BLOCK + 4), "--prefix-size", "4", "--beam", "1", "--cpu", "--max-tokens", "16",
                     "--skip-invalid-size-inputs-valid-test"], input="")
    assert "\nH-" in generated
    interactive = run(["fairseq-interactive", str(tmp / "conv"), "--user-dir", "fairseq_plugins",
                       "--task", "language_modeling", "--path", str(save / "checkpoint_last.pt"), "--bpe", "gpt2",
                       "--gpt2-encoder-json", str(tmp / "hf" / "vocab.json"),
                       "--gpt2-vocab-bpe", str(tmp / "hf" / "merges.txt"), "--beam", "1", "--max-len-b", "12",
                       "--cpu"], input="Emma Woodhouse\n")
    assert "D-0\t" in interactive and "Emma Woodhouse" in interactive


LOSS = "Loss (base 2): "


@pytest.mark.full
def test_eval_with_another_block_length_says_which_blocks_run_or_refuses(prepared, finetuned):
    """The fine-tuned checkpoint runs blocks of BLOCK tokens whatever --tokens-per-sample says:
    one warning names the override, which runs the blocks asked for; past the position table
    (64 positions) it is refused in one line."""
    save, _, _ = finetuned
    ev = ["fairseq-eval-lm", str(prepared / "bin"), "--user-dir", "fairseq_plugins", "--task", "streaming_lm",
          "--path", str(save / "checkpoint_last.pt"), "--batch-size", "1", "--gen-subset", "valid", "--cpu",
          "--tokens-per-sample", str(2 * BLOCK)]
    asked = run(ev)
    warned = [line for line in asked.splitlines() if "--model-overrides" in line]
    assert len(warned) == 1 and f"blocks of {BLOCK} tokens" in warned[0] and "2 segments of 16" in warned[0], asked[-2000:]
    overridden = run([*ev, "--model-overrides", f"{{'segment_length': {2 * BLOCK}}}"])
    assert "--model-overrides" not in overridden
    loss = [line.split(LOSS)[1].split(",")[0] for line in (asked, overridden) for line in line.splitlines()
            if LOSS in line]
    assert len(loss) == 2 and loss[0] != loss[1], loss
    refused = helpers.run([*ev[:-1], "128"], check=False)
    errors = [line for line in refused.stderr.splitlines() if line.startswith("fairseq_plugins: error:")]
    assert refused.returncode != 0 and len(errors) == 1 and "position table (64 positions" in errors[0], \
        refused.stderr[-2000:]
    assert "Traceback" not in refused.stderr and "Loss" not in refused.stdout + refused.stderr


def with_drawn_memory(checkpoint, path):
    """``checkpoint`` saved as ``path`` with W_O^LTM of both layers drawn at N(0, 0.1²), so that
    the memory's read changes the output (fine-tuning for a few updates leaves it near zero)."""
    state = torch.load(checkpoint, weights_only=True)
    generator = torch.Generator().manual_seed(0)
    drawn = [k for k in state["model"] if k.endswith("long_term_memory.out_proj.weight")]
    for key in drawn:
        state["model"][key] = 0.1 * torch.randn(state["model"][key].shape, generator=generator)
    assert len(drawn) == 2
    torch.save(state, path)
    return path


def _greedy_full_forward(model, prompt, max_len):
    """fairseq's greedy search (``--beam 1``) with the full forward at every step, no
    incremental state: ``(tokens after the leading </s>, log-prob of each)``; the prompt
    is forced, then the argmax is taken until </s> or ``max_len`` tokens (then </s>)."""
    d = model.decoder.dictionary
    seq, scores = [d.eos()], []
    while True:
        with torch.no_grad():
            lprobs = torch.log_softmax(model(torch.tensor([seq]))[0][0, -1].float(), -1)
        lprobs[d.pad()] = float("-inf")
        step = len(seq) - 1
        nxt = prompt[step] if step < len(prompt) else (d.eos() if step >= max_len else int(lprobs.argmax()))
        seq.append(nxt)
        scores.append(float(lprobs[nxt]))
        if nxt == d.eos() and step >= len(prompt):
            return seq[1:], scores


@pytest.mark.full
def test_interactive_generation_is_incremental_and_equals_a_full_forward_greedy_loop(tiny, finetuned, tmp_path):
    """fairseq-interactive (docs/gpt2.md, step 5) on a fine-tuned checkpoint whose memory
    matters (W_O^LTM drawn at N(0, 0.1²): six updates leave it near zero), over more than
    three blocks: its greedy continuation and positional scores are those of the full
    forward, token by token; with the memory silenced the full forward scores differ."""
    from tokenizers import ByteLevelBPETokenizer

    tmp, _ = tiny
    save, _, _ = finetuned
    with_drawn_memory(save / "checkpoint_last.pt", tmp_path / "memory.pt")
    text, max_len = "Emma Woodhouse, handsome, clever, and rich", 4 * BLOCK - 2
    out = run(["fairseq-interactive", str(tmp / "conv"), "--user-dir", "fairseq_plugins", "--task", "language_modeling",
               "--path", str(tmp_path / "memory.pt"), "--bpe", "gpt2",
               "--gpt2-encoder-json", str(tmp / "hf" / "vocab.json"), "--gpt2-vocab-bpe", str(tmp / "hf" / "merges.txt"),
               "--beam", "1", "--max-len-b", str(max_len), "--cpu"], input=text + "\n")
    hypo = next(line.split("\t")[2].split() for line in out.splitlines() if line.startswith("H-0\t"))
    positional = next(line.split("\t")[1].split() for line in out.splitlines() if line.startswith("P-0\t"))
    model, task = load(tmp_path / "memory.pt")
    d = task.target_dictionary
    bpe = ByteLevelBPETokenizer(str(tmp / "hf" / "vocab.json"), str(tmp / "hf" / "merges.txt"))
    prompt = [d.index(str(i)) for i in bpe.encode(text).ids]
    want, scores = _greedy_full_forward(model, prompt, max_len)
    assert len(want) > 3 * BLOCK  # blocks 2-4 read the memory
    assert [d.index(symbol) for symbol in hypo] == want[:-1]  # the H line leaves out the final </s>
    assert len(positional) == len(scores)
    gap = max(abs(float(p) - s / math.log(2)) for p, s in zip(positional, scores))
    print(f"greedy: {len(want)} tokens; max |P - full forward| = {gap:.2e} bits")
    assert gap < 2e-4  # printed in bits, 4 digits
    with torch.no_grad():  # the reference depends on the memory: silenced, other scores
        for layer in model.decoder.layers:
            layer.long_term_memory.out_proj.weight.zero_()
    _, silenced = _greedy_full_forward(model, want[:-1], max_len)
    effect = max(abs(a - b) for a, b in zip(scores[BLOCK:], silenced[BLOCK:]))
    print(f"memory silenced: max score change {effect:.3f} nats")
    assert effect > 0.05


# ---- the hub interface: from_pretrained, generate and score past the position table --------


def gpt2_hub(tmp, folder=None, checkpoint="checkpoint.pt", data=".", **overrides):
    from fairseq_plugins.models.infinite_former_gpt2 import InfiniteFormerGPT2Model

    return InfiniteFormerGPT2Model.from_pretrained(
        str(folder or tmp / "conv"), checkpoint_file=checkpoint, data_name_or_path=data,
        gpt2_encoder_json=str(tmp / "hf" / "vocab.json"), gpt2_vocab_bpe=str(tmp / "hf" / "merges.txt"),
        num_basis_functions=32, num_samples=32, **overrides)


@pytest.fixture(scope="module")
def hub(tiny):
    """The converted tiny GPT-2 through from_pretrained, W_O^LTM drawn so that the memory matters."""
    tmp, _ = tiny
    lm = gpt2_hub(tmp)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for layer in lm.models[0].decoder.layers:
            weight = layer.long_term_memory.out_proj.weight
            weight.copy_(0.1 * torch.randn(weight.shape, generator=generator))
    return lm


PROMPT = ("Emma Woodhouse, handsome, clever, and rich, with a comfortable home and happy disposition, seemed to "
          "unite some of the best blessings of existence; and had lived nearly twenty-one years in the world with "
          "very little to distress or vex her.")


def test_hub_generates_after_a_prompt_longer_than_the_position_table_as_a_full_forward_greedy_loop(hub):
    from fairseq.hub_utils import GeneratorHubInterface

    assert isinstance(hub, GeneratorHubInterface)
    context = hub.context(hub.encode(PROMPT))
    assert context.numel() > 64 + BLOCK  # past GPT-2's 64 positions: 5 blocks and more
    hypo = hub.generate(hub.encode(PROMPT), beam=1, max_len_b=2 * BLOCK)[0]
    want, scores = helpers.greedy_full_forward(hub.models[0], context, 2 * BLOCK)
    assert hypo["tokens"].tolist() == context[1:].tolist() + want
    torch.testing.assert_close(hypo["positional_scores"], torch.tensor(scores), rtol=0, atol=1e-4)
    text = hub.sample(PROMPT, beam=1, max_len_b=2 * BLOCK)
    assert text.startswith(PROMPT) and len(text) > len(PROMPT)  # GPT-2's BPE decodes the prompt back


def test_hub_scores_a_text_past_the_position_table_with_the_memory_carried(hub, tiny):
    scored = hub.score(PROMPT + " " + PROMPT)
    context = hub.context(hub.encode(PROMPT + " " + PROMPT))
    with torch.no_grad():
        lprobs = torch.log_softmax(hub.models[0](context[None, :-1])[0][0].float(), -1)
    want = lprobs.gather(-1, context[1:, None])[:, 0]
    torch.testing.assert_close(scored["positional_scores"], want, rtol=0, atol=1e-5)
    tmp, _ = tiny
    silenced = gpt2_hub(tmp)  # W_O^LTM = 0: the converted GPT-2 itself, block by block
    assert (silenced.score(PROMPT + " " + PROMPT)["positional_scores"][BLOCK:] - want[BLOCK:]).abs().max() > 1e-3


def test_hub_reads_gpt2s_bpe_from_local_files_only(tiny, tmp_path):
    from fairseq_plugins.models.infinite_former_gpt2 import InfiniteFormerGPT2Model

    tmp, _ = tiny
    with pytest.raises(ConfigError, match="needs GPT-2's BPE files.*nothing is downloaded"):
        InfiniteFormerGPT2Model.from_pretrained(str(tmp / "conv"), checkpoint_file="checkpoint.pt")
    # the files found beside the checkpoint (a Hugging Face folder's names)
    shutil.copytree(tmp / "conv", tmp_path / "conv")
    for name in ("vocab.json", "merges.txt"):
        shutil.copy(tmp / "hf" / name, tmp_path / "conv")
    lm = InfiniteFormerGPT2Model.from_pretrained(str(tmp_path / "conv"), checkpoint_file="checkpoint.pt")
    assert lm.decode(lm.encode("Emma Woodhouse")) == "Emma Woodhouse"


@pytest.mark.full
def test_hub_scores_a_split_as_fairseq_eval_lm(tiny, prepared, finetuned, tmp_path):
    """fairseq-eval-lm --task streaming_lm --batch-size 1 over the valid split (one stream, one
    </s> in front, the memory carried, a memory that matters) and the hub's score of that stream."""
    from fairseq.data import data_utils

    tmp, _ = tiny
    save, _, _ = finetuned
    with_drawn_memory(save / "checkpoint_last.pt", tmp_path / "memory.pt")
    out = run(["fairseq-eval-lm", prepared / "bin", "--user-dir", "fairseq_plugins", "--task", "streaming_lm",
               "--path", tmp_path / "memory.pt", "--tokens-per-sample", BLOCK, "--batch-size", "1",
               "--gen-subset", "valid", "--cpu"])
    loss = float(out.split(LOSS)[1].split(",")[0])
    count = int(out.split("Evaluated ")[1].split(" tokens")[0].replace(",", ""))
    lm = gpt2_hub(tmp, folder=tmp_path, checkpoint="memory.pt", data=str(prepared / "bin"))
    lines = data_utils.load_indexed_dataset(str(prepared / "bin" / "valid"), lm.tgt_dict)
    stream = torch.cat([torch.tensor([lm.tgt_dict.eos()])] + [lines[i] for i in range(len(lines))])
    scored = lm.score_tokens(stream)
    assert scored["positional_scores"].numel() == count
    assert abs(-float(scored["score"]) / math.log(2) - loss) < 1e-3  # eval-lm prints 4 decimals


# ---- scripts/gpt2-recipe.sh ------------------------------------------------------------------

RECIPE_ENV = {"TOKENS_PER_SAMPLE": "32", "BATCH_SIZE": "4", "LR": "1e-3", "MAX_UPDATE": "4", "NUM_BASIS": "32",
              "NUM_SAMPLES": "32", "GEN_LEN": "40", "PYTHONPATH": ""}  # the recipe needs no PYTHONPATH


@pytest.mark.full
def test_recipe_refuses_bad_input_in_one_line_and_creates_nothing(tiny, tmp_path):
    tmp, _ = tiny
    broken = tmp_path / "hf"
    shutil.copytree(tmp / "hf", broken)
    (broken / "merges.txt").unlink()
    books = os.path.join(ROOT, "tests", "fixtures", "books_txt")
    cases = [(["--hf-dir", tmp_path / "nowhere", "--corpus", "txt", "--input", books], "is not a directory"),
             (["--hf-dir", broken, "--corpus", "txt", "--input", books], "merges.txt is missing"),
             (["--hf-dir", tmp / "hf", "--corpus", "txt", "--input", tmp_path / "nothing"], "does not exist"),
             (["--hf-dir", tmp / "hf", "--corpus", "pg20", "--input", books], "--corpus must be"),
             (["--hf-dir", tmp / "hf", "--data", tmp_path], "holds no dict.txt")]
    # the recipe's check (`fairseq-longmem gpt2 check`) on each, in this process ...
    for args, message in cases:
        proc = helpers.longmem_here("gpt2", "check", "--prog", "gpt2-recipe.sh", "--work", tmp_path / "work",
                                    "--tokens-per-sample", "32", *args, check=False)
        helpers.one_line_error(proc, message, prefix="gpt2-recipe.sh: error:", status=2)
    # ... and the recipe itself on the first: the same line, before it creates anything
    proc = helpers.run(["bash", "scripts/gpt2-recipe.sh", "--work", tmp_path / "work", *cases[0][0]], check=False,
                       extra_env=RECIPE_ENV)
    helpers.one_line_error(proc, cases[0][1], prefix="gpt2-recipe.sh: error:")
    assert proc.returncode == 2 and not (tmp_path / "work").exists(), proc.stdout + proc.stderr
    assert "gpt2-recipe.sh: THREADS=1 (torch CPU threads" in proc.stdout
    proc = helpers.run(["bash", "scripts/gpt2-recipe.sh", "--work", tmp_path / "work", "--hf-dir", tmp / "hf",
                        "--corpus", "txt", "--input", books], check=False, extra_env={"THREADS": "0"})
    assert proc.returncode == 2 and not (tmp_path / "work").exists()
    assert proc.stderr.strip() == "gpt2-recipe.sh: error: THREADS must be a positive integer, not '0'"


@pytest.mark.full
def test_recipe_runs_on_the_tiny_gpt2_and_its_checkpoint_serves_the_hub(tiny, tmp_path):
    """docs/gpt2.md's CPU recipe, shortened (4 updates, the memory arm only), then the page's
    Python example on what it wrote. (A rerun on the same --work, which resumes the arm, doubles
    this test's time and is not run here.)"""
    tmp, _ = tiny
    work = tmp_path / "runs" / "tiny-recipe"
    recipe = ["bash", "scripts/gpt2-recipe.sh", "--hf-dir", tmp / "hf", "--work", work, "--corpus", "txt",
              "--input", os.path.join(ROOT, "tests", "fixtures", "books_txt"), "--prompt",
              "Emma Woodhouse, handsome, clever"]
    proc = helpers.run(recipe, extra_env={**RECIPE_ENV, "ARMS": "memory"})
    assert "gpt2-recipe.sh: THREADS=1 (torch CPU threads" in proc.stdout
    rows = (work / "results.md").read_text().splitlines()
    assert len(rows) == 4 and rows[2].startswith("| GPT-2 as converted |") and "3,274" in rows[3]
    assert "\nEmma Woodhouse, handsome, clever" in proc.stdout
    shutil.copytree(tmp / "hf", tmp_path / "runs" / "tiny-gpt2")
    page = open(os.path.join(ROOT, "docs", "gpt2.md"), encoding="utf-8").read()
    blocks = re.findall(r"```python\n(.*?)```", page, re.S)
    assert len(blocks) == 1, blocks
    example = helpers.run([sys.executable, "-c", blocks[0]], cwd=tmp_path)
    assert example.stdout.startswith("Emma Woodhouse") and "perplexity" in example.stdout, example.stdout


# ---- bad input: one line, nothing written -------------------------------------------------


def convert_fails(hf_dir, out, capsys, *extra):
    capsys.readouterr()
    assert cli.main(["gpt2", "convert", "--hf-dir", str(hf_dir), "--out", str(out), *extra]) != 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("fairseq-longmem gpt2 convert: error: ")
    assert not out.exists()
    return err


def test_bad_hf_folders_are_one_line_errors(tiny, tmp_path, capsys):
    import json

    tmp, _ = tiny
    broken = tmp_path / "hf"
    shutil.copytree(tmp / "hf", broken)
    config = json.loads((broken / "config.json").read_text())
    (broken / "config.json").write_text(json.dumps({**config, "model_type": "llama"}))
    assert "not GPT-2" in convert_fails(broken, tmp_path / "out", capsys)
    (broken / "config.json").write_text(json.dumps(config))
    assert "exceeds GPT-2's position table" in convert_fails(broken, tmp_path / "out", capsys,
                                                             "--tokens-per-sample", "65")
    (broken / "merges.txt").unlink()
    assert "merges.txt is missing" in convert_fails(broken, tmp_path / "out", capsys)
    shutil.copy(tmp / "hf" / "merges.txt", broken)
    weights = (tmp / "hf" / "model.safetensors").read_bytes()
    for cut in (len(weights) // 2, 100):  # a download cut short: one line naming the file, nothing written
        (broken / "model.safetensors").write_bytes(weights[:cut])
        error = convert_fails(broken, tmp_path / "out", capsys)
        assert f"{broken / 'model.safetensors'} cannot be read" in error and "truncated" in error, error
        assert not (tmp_path / "out").exists()
    (broken / "model.safetensors").unlink()
    assert "holds no weights" in convert_fails(broken, tmp_path / "out", capsys)


def test_a_conversion_is_replaced_only_with_force(tiny, capsys):
    tmp, _ = tiny
    before = (tmp / "conv" / "checkpoint.pt").stat().st_mtime_ns
    capsys.readouterr()
    assert cli.main(["gpt2", "convert", "--hf-dir", str(tmp / "hf"), "--out", str(tmp / "conv"),
                     "--tokens-per-sample", str(BLOCK)]) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and "checkpoint.pt" in error and "already exist" in error and "--force" in error, error
    assert (tmp / "conv" / "checkpoint.pt").stat().st_mtime_ns == before
    assert cli.main(["gpt2", "convert", "--hf-dir", str(tmp / "hf"), "--out", str(tmp / "conv"),
                     "--tokens-per-sample", str(BLOCK), "--force"]) == 0
    assert (tmp / "conv" / "checkpoint.pt").stat().st_mtime_ns != before


def test_a_block_longer_than_the_position_table_is_refused(tiny):
    tmp, _ = tiny
    with pytest.raises(ConfigError, match="exceeds GPT-2's position table"):
        load(tmp / "conv" / "checkpoint.pt", segment_length=65)


def test_a_data_dictionary_that_is_not_the_models_is_refused(tiny, tmp_path):
    tmp, _ = tiny
    symbols = (tmp / "conv" / "dict.txt").read_text().splitlines()
    (tmp_path / "dict.txt").write_text("\n".join([symbols[1], symbols[0], *symbols[2:]]) + "\n")
    with pytest.raises(ConfigError, match="different dictionary"):
        load(tmp / "conv" / "checkpoint.pt", data=str(tmp_path))
    (tmp_path / "dict.txt").write_text("the 5\nof 3\n")
    with pytest.raises(ConfigError, match="no GPT-2 token id"):
        load(tmp / "conv" / "checkpoint.pt", data=str(tmp_path))
