"""fairseq-longmem continue (scripts/continue.sh) end to end on the real-text fixture
(tests/fixtures/books_txt): data-prep → a tiny scripts/train.sh model → continue.sh, whose
greedy continuation must equal an independent greedy decode with the full (non-incremental)
forward; bad prompts and impossible options are one line; THREADS is printed. With the same
checkpoint, the fairseq CLIs: fairseq-generate --task streaming_lm refuses a --prefix-size
longer than its prompts in one line, stock --task language_modeling keeps its own behaviour,
and fairseq-interactive generates a batch of prompts of different lengths as it generates each
alone."""

import os
import re

import pytest

from helpers import ROOT, fairseq, greedy_full_forward, longmem_here, one_line_error, run

PROMPT = os.path.join(ROOT, "tests", "fixtures", "books_txt", "carroll-alice.txt")
# a tiny budget of scripts/train.sh (its variables)
TINY = {"LAYERS": "2", "WIDTH": "32", "HEADS": "2", "FFN": "64", "SEGMENT": "32", "STREAMS": "4",
        "NUM_BASIS": "16", "WARMUP": "10", "LR": "0.003"}


@pytest.fixture(scope="module")
def trained(tmp_path_factory, books_bin):
    tmp = tmp_path_factory.mktemp("continue")
    run(["bash", "scripts/train.sh", "infinite_former", books_bin, tmp / "ltm"], extra_env={**TINY, "MAX_UPDATE": "20"})
    run(["bash", "scripts/train.sh", "memory_off", books_bin, tmp / "off"], extra_env={**TINY, "MAX_UPDATE": "4"})
    return tmp, books_bin


def _continue(ck, data, *extra, prompt=PROMPT, check=True, **env):
    return run(["bash", "scripts/continue.sh", "--checkpoint", ck, "--data", data, "--prompt-file", prompt, "--cpu",
                *extra], check=check, extra_env=env)


def _greedy_reference(ck, data, prompt_ids, max_len):
    """Greedy decoding with the full forward over the whole prefix at every step
    (helpers.greedy_full_forward): the tokens before the final </s>."""
    from fairseq import checkpoint_utils

    models, _, task = checkpoint_utils.load_model_ensemble_and_task([str(ck)], arg_overrides={"data": str(data)})
    out, _ = greedy_full_forward(models[0].eval(), prompt_ids, max_len)
    return out[:-1], task.target_dictionary


@pytest.mark.full
def test_greedy_continuation_equals_a_full_forward_greedy_decode(trained):
    tmp, data = trained
    ck = tmp / "ltm" / "checkpoint_last.pt"
    proc = _continue(ck, data, "--prompt-tokens", "300", "--max-len", "24", "--beam", "1")
    import sentencepiece
    from fairseq.data import Dictionary

    from fairseq_plugins.lab.generation.continuation import encode_prompt
    sp = sentencepiece.SentencePieceProcessor(model_file=str(data.parent / "spm.model"))
    prompt, warning = encode_prompt(PROMPT, sp, Dictionary.load(str(data / "dict.txt")), 300)
    assert len(prompt) == 301 and warning is None
    ids, d = _greedy_reference(ck, data, prompt, 24)
    paragraphs, current = [], []
    for i in ids:
        if i == d.eos():
            paragraphs.append(sp.decode(current))
            current = []
        else:
            current.append(d[i])
    paragraphs.append(sp.decode(current))
    assert proc.stdout.rstrip("\n") == "\n\n".join(paragraphs)
    assert f"prompt 300 tokens, generated {len(ids)} tokens" in proc.stderr
    assert "continue.sh: THREADS=1 (torch CPU threads" in proc.stderr  # the README's THREADS rule


def test_impossible_max_len_and_bad_threads_are_one_line_before_anything_loads(tmp_path):
    """fairseq's SequenceGenerator allocates (beam, max_len + 2) buffers and copies them at every
    step: --max-len 100000000 would hold memory and print nothing for hours. Refused first (the
    checkpoint is not even read), with the THREADS line of the recipe before it."""
    proc = _continue(tmp_path / "missing.pt", tmp_path, "--max-len", "100000000", check=False, THREADS="3")
    error = one_line_error(proc, "--max-len 100000000", "100,000", prefix="continue.sh: error:")
    assert proc.returncode == 2 and proc.stdout == "" and "not found" not in error
    assert "continue.sh: THREADS=3 (torch CPU threads" in proc.stderr
    proc = _continue(tmp_path / "missing.pt", tmp_path, check=False, THREADS="many")
    assert proc.returncode == 2 and proc.stderr.strip() == \
        "continue.sh: error: THREADS must be a positive integer, not 'many'"


def _saved(path, model):
    """A checkpoint file of fairseq's layout holding no weights, of ``model`` (its config's name)."""
    import torch

    torch.save({"model": {}, "cfg": {"model": {"_name": model}}, "optimizer_history": [], "extra_state": {}}, path)
    return path


def test_gpt2_bpe_is_refused_without_asking_for_a_sentencepiece_model(books_bin, tmp_path):
    """Data of prepare-lm.sh --bpe gpt2, or a GPT-2 checkpoint (gpt2 convert), has no spm.model, and
    no --spm-model can read it: the line says what continues such a checkpoint instead of asking
    for --spm-model."""
    import json

    (tmp_path / "gpt2" / "bin").mkdir(parents=True)
    (tmp_path / "gpt2" / "bin" / "dict.txt").write_text("50256 1\n", encoding="utf-8")
    (tmp_path / "gpt2" / "prepare.json").write_text(json.dumps({"options": {"bpe": "gpt2", "corpus": "txt"}}),
                                                    encoding="utf-8")
    lm, gpt2 = _saved(tmp_path / "lm.pt", "infinite_former_lm"), _saved(tmp_path / "gpt2.pt", "infinite_former_gpt2")
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("Once upon a time\n", encoding="utf-8")
    for checkpoint, data, needle in ((lm, tmp_path / "gpt2" / "bin", "was prepared with --bpe gpt2"),
                                     (gpt2, books_bin, "is an infinite_former_gpt2 checkpoint, whose text is "
                                                       "GPT-2's BPE")):
        proc = longmem_here("continue", "--checkpoint", checkpoint, "--data", data, "--prompt-file", prompt,
                            check=False)
        line = one_line_error(proc, needle, "bpe='gpt2'", "docs/gpt2.md", prefix="fairseq-longmem continue: error:",
                              status=2, alone=True)
        assert "pass --spm-model" not in line and proc.stdout == ""


def test_a_torch_file_that_is_no_checkpoint_is_one_line(books_bin, tmp_path):
    """A plain state dict (a Hugging Face pytorch_model.bin) as --checkpoint: one line naming the file
    and the fix, not fairseq's traceback; nothing on stdout."""
    import torch

    hf = tmp_path / "pytorch_model.bin"
    torch.save({"transformer.wte.weight": torch.zeros(8, 4)}, hf)
    proc = longmem_here("continue", "--checkpoint", hf, "--data", books_bin, "--prompt-file", PROMPT, "--cpu",
                        check=False)
    one_line_error(proc, f"{hf} is a torch file but not a fairseq checkpoint: it is a plain state dict",
                   "with --checkpoint", prefix="fairseq-longmem continue: error:", status=2)
    assert proc.stdout == ""


@pytest.mark.full
def test_sampling_and_beam_search_and_a_checkpoint_without_long_term_memory(trained):
    tmp, data = trained
    sampled = _continue(tmp / "ltm" / "checkpoint_last.pt", data, "--prompt-tokens", "200", "--max-len", "16",
                        "--sampling", "--sampling-topp", "0.9")
    assert "generated" in sampled.stderr and sampled.stdout.strip()
    beam = _continue(tmp / "off" / "checkpoint_last.pt", data, "--prompt-tokens", "200", "--max-len", "8",
                     "--beam", "2")
    assert "prompt 200 tokens" in beam.stderr


@pytest.mark.full
@pytest.mark.parametrize("text,message", [("\n  \n", "prompt.txt is empty"),
                                          ("漢字漢字 かな", "every token of the prompt file")])
def test_bad_prompt_is_one_line(trained, tmp_path, text, message):
    tmp, data = trained
    prompt = tmp_path / "prompt.txt"
    prompt.write_text(text, encoding="utf-8")
    proc = _continue(tmp / "ltm" / "checkpoint_last.pt", data, prompt=prompt, check=False)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("continue.sh: error:")]
    assert proc.returncode == 2 and len(errors) == 1 and message in errors[0], proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr


@pytest.mark.full
def test_characters_the_model_cannot_encode_are_one_warning_line_and_latin1_is_read(trained, tmp_path):
    tmp, data = trained
    ck = tmp / "ltm" / "checkpoint_last.pt"
    text = "Alice was beginning to get very tired \u2603 of sitting by her sister on the bank, caf\u00e9 \u6f22\u5b57.\n"
    mixed = tmp_path / "mixed.txt"
    mixed.write_text(text, encoding="utf-8")
    proc = _continue(ck, data, "--max-len", "8", prompt=mixed)
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("continue.sh: warning:")]
    assert len(warnings) == 1, proc.stderr[-2000:]
    assert re.search(r"\d+ of the \d+ tokens of the prompt are <unk> \(\u2603 \u00e9 \u6f22\u5b57\): the model's "
                     r"dictionary cannot encode", warnings[0]), warnings[0]
    # a Latin-1 file is read as data-prep reads it (UTF-8, else Latin-1): same prompt, same continuation
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes("Alice sat by the caf\u00e9 and was tired.\n".encode("latin-1"))
    utf8 = tmp_path / "utf8.txt"
    utf8.write_text("Alice sat by the caf\u00e9 and was tired.\n", encoding="utf-8")
    a, b = (_continue(ck, data, "--max-len", "8", prompt=p) for p in (latin1, utf8))
    assert a.stdout == b.stdout and "Traceback" not in a.stderr
    assert a.stderr.count("continue.sh: warning:") == b.stderr.count("continue.sh: warning:")


@pytest.mark.full
def test_generate_prefix_longer_than_the_prompts_is_one_line_and_stock_language_modeling_is_unchanged(trained):
    tmp, data = trained
    ck = tmp / "ltm" / "checkpoint_last.pt"  # trained with 32-token segments
    proc = fairseq("fairseq-generate", data, "--path", ck, "--task", "streaming_lm", "--gen-subset", "test",
                   "--tokens-per-sample", "32", "--batch-size", "2", "--prefix-size", "100", "--max-len-b", "140",
                   "--beam", "1", check=False, input="")
    errors = [line for line in proc.stderr.splitlines() if line.startswith("fairseq_plugins: error:")]
    assert proc.returncode != 0 and len(errors) == 1, proc.stderr[-2000:]
    assert "--prefix-size 100 is longer than every prompt" in errors[0] and "--tokens-per-sample 32" in errors[0]
    assert "H-" not in proc.stdout and "Traceback" not in proc.stderr
    # fairseq's own task: the prompt is the whole line (shorter than --prefix-size), forced to its end
    stock = fairseq("fairseq-generate", data, "--path", ck, "--task", "language_modeling", "--gen-subset", "test",
                    "--sample-break-mode", "eos", "--tokens-per-sample", "32", "--batch-size", "2",
                    "--prefix-size", "1000", "--max-len-a", "1", "--max-len-b", "8", "--beam", "1",
                    check=False, input="")
    assert stock.returncode == 0, stock.stderr[-2000:]
    def words(text):  # fairseq prints an unknown word of the target escaped, of a hypothesis plain
        return ["<unk>" if "<unk>" in word else word for word in text.split("\t")[-1].split()]

    lines = {kind: {int(i): words(text) for i, text in re.findall(rf"^{kind}-(\d+)\t(.*)$", stock.stdout, re.M)}
             for kind in "TH"}
    assert len(lines["T"]) == sum(1 for _ in open(data.parent / "raw" / "test.txt")) and lines["H"].keys() == \
        lines["T"].keys()
    assert all(lines["H"][i][:len(lines["T"][i])] == lines["T"][i] for i in lines["T"])


@pytest.mark.full
def test_interactive_batch_of_prompts_of_different_lengths_equals_each_alone(trained, tmp_path):
    """fairseq's generator feeds a batch of prompts one token per step (the shorter ones
    padded, generated freely where they end): no prefill of padding, same hypotheses."""
    tmp, data = trained
    ck = tmp / "ltm" / "checkpoint_last.pt"
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("Alice was\nThe Rabbit took a watch out of its waistcoat pocket and looked at it\n")
    out = {}
    for bsz in ("1", "2"):
        proc = fairseq("fairseq-interactive", data, "--path", ck, "--task", "language_modeling", "--bpe",
                       "sentencepiece", "--sentencepiece-model", data.parent / "spm.model", "--beam", "2",
                       "--max-len-b", "90",
                       "--batch-size", bsz, "--buffer-size", "2", check=False, input=prompts.read_text())
        assert proc.returncode == 0, proc.stderr[-2000:]
        out[bsz] = {i: (text.split("\t")[-1], [float(x) for x in scores.split()])
                    for (i, text), scores in zip(re.findall(r"^H-(\d+)\t(.*)$", proc.stdout, re.M),
                                                 re.findall(r"^P-\d+\t(.*)$", proc.stdout, re.M))}
    assert out["1"].keys() == out["2"].keys() == {"0", "1"}
    for i in out["1"]:
        assert out["1"][i][0] == out["2"][i][0] and len(out["1"][i][0].split()) > 40
        assert max(abs(a - b) for a, b in zip(out["1"][i][1], out["2"][i][1])) < 1e-3


@pytest.mark.full
def test_streaming_lm_beam_search_over_prompts_holding_end_of_sentence_is_one_line(trained):
    """fairseq-generate --task streaming_lm prompts every stream with its segment's first
    --prefix-size tokens; segments hold the end-of-sentence tokens of the lines (and start with one
    after a line end), which fairseq's beam search cannot follow (``AssertionError`` in
    ``SequenceGenerator._prefix_tokens`` or at the maximum length): one line naming --beam 1;
    --beam 1 generates every stream of every segment."""
    tmp, data = trained
    ck = tmp / "ltm" / "checkpoint_last.pt"
    common = ["--task", "streaming_lm", "--gen-subset", "test", "--tokens-per-sample", "32", "--batch-size", "2",
              "--prefix-size", "16", "--max-len-b", "24"]
    proc = fairseq("fairseq-generate", data, "--path", ck, *common, "--beam", "4", check=False, input="")
    errors = [line for line in proc.stderr.splitlines() if line.startswith("fairseq_plugins: error:")]
    assert proc.returncode != 0 and len(errors) == 1, proc.stderr[-3000:]
    assert "--beam 4" in errors[0] and "end-of-sentence" in errors[0] and "--beam 1" in errors[0]
    assert proc.stderr.rstrip().endswith(errors[0]) and "Traceback" not in proc.stderr
    greedy = fairseq("fairseq-generate", data, "--path", ck, *common, "--beam", "1", check=False, input="")
    assert greedy.returncode == 0 and "Traceback" not in greedy.stderr, greedy.stderr[-2000:]
    assert len(re.findall(r"^H-\d+\t", greedy.stdout, re.M)) > 0
