"""scripts/continue.sh end to end on the real-text fixture (tests/fixtures/books_txt):
data-prep → a tiny scripts/train.sh model → continue.sh, whose greedy continuation
must equal an independent greedy decode with the full (non-incremental) forward."""

import os
import sys

import pytest
import torch

from test_end_to_end import ROOT, prepare, run

PROMPT = os.path.join(ROOT, "tests", "fixtures", "books_txt", "carroll-alice.txt")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("continue")
    data = prepare(tmp / "data")
    run(["bash", "scripts/train.sh", "infinite_former", str(data), str(tmp / "ltm")], env={"MAX_UPDATE": "20"})
    run(["bash", "scripts/train.sh", "memory_off", str(data), str(tmp / "off")], env={"MAX_UPDATE": "4"})
    return tmp, data


def _continue(ck, data, *extra, prompt=PROMPT, check=True):
    return run(["bash", "scripts/continue.sh", "--checkpoint", str(ck), "--data", str(data), "--prompt-file",
                str(prompt), "--cpu", *extra], check=check)


def _greedy_reference(ck, data, prompt_ids, max_len):
    """Greedy decoding with the full forward over the whole prefix at every step (as
    SequenceGenerator with beam 1, min_len 1: no eos first, never pad)."""
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    from fairseq import checkpoint_utils, utils
    utils.import_user_module(type("A", (), {"user_dir": os.path.join(ROOT, "fairseq_plugins")})())
    models, _, task = checkpoint_utils.load_model_ensemble_and_task([str(ck)], arg_overrides={"data": str(data)})
    model, d = models[0].eval(), task.target_dictionary
    tokens, out = list(prompt_ids), []
    with torch.no_grad():
        for step in range(max_len):
            logits = model(torch.tensor([tokens]))[0][0, -1].float()
            logits[d.pad()] = float("-inf")
            if step == 0:
                logits[d.eos()] = float("-inf")
            nxt = int(logits.argmax())
            if nxt == d.eos():
                break
            tokens.append(nxt)
            out.append(nxt)
    return out, d


def test_greedy_continuation_equals_a_full_forward_greedy_decode(trained):
    tmp, data = trained
    ck = tmp / "ltm" / "checkpoint_last.pt"
    proc = _continue(ck, data, "--prompt-tokens", "300", "--max-len", "24", "--beam", "1")
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    import sentencepiece
    from continue_text import encode_prompt
    from fairseq.data import Dictionary
    sp = sentencepiece.SentencePieceProcessor(model_file=str(data.parent / "spm.model"))
    prompt = encode_prompt(PROMPT, sp, Dictionary.load(str(data / "dict.txt")), 300)
    assert len(prompt) == 301
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


def test_sampling_and_beam_search_and_a_checkpoint_without_long_term_memory(trained):
    tmp, data = trained
    sampled = _continue(tmp / "ltm" / "checkpoint_last.pt", data, "--prompt-tokens", "200", "--max-len", "16",
                        "--sampling", "--sampling-topp", "0.9")
    assert "generated" in sampled.stderr and sampled.stdout.strip()
    beam = _continue(tmp / "off" / "checkpoint_last.pt", data, "--prompt-tokens", "200", "--max-len", "8",
                     "--beam", "2")
    assert "prompt 200 tokens" in beam.stderr


@pytest.mark.parametrize("text,message", [("\n  \n", "holds no text"), ("漢字漢字 かな", "as <unk>")])
def test_bad_prompt_is_one_line(trained, tmp_path, text, message):
    tmp, data = trained
    prompt = tmp_path / "prompt.txt"
    prompt.write_text(text, encoding="utf-8")
    proc = _continue(tmp / "ltm" / "checkpoint_last.pt", data, prompt=prompt, check=False)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("continue.sh: error:")]
    assert proc.returncode == 2 and len(errors) == 1 and message in errors[0], proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
