"""Bad generation input of ``streaming_lm`` (fairseq_plugins/tasks/generation_checks.py):
``fairseq-generate --task streaming_lm --prefix-size K`` prompts every batch row with the first
K tokens of its segment, so a K longer than a segment, or than the shorter last segment of a
stream, is refused in one line naming both numbers, before anything is generated; a K that
fits generates exactly as fairseq's own inference step. Stock ``language_modeling`` keeps its
behaviour (its end-to-end check: tests/lab/generation/test_continue_e2e.py)."""

import pytest
import torch
from fairseq.data import Dictionary
from fairseq.dataclass.configs import GenerationConfig
from fairseq.tasks.fairseq_task import FairseqTask

from fairseq_plugins.errors import ConfigError
from fairseq_plugins.models.infinite_former_lm import (InfiniteFormerDecoder, InfiniteFormerLanguageModel,
                                                       InfiniteFormerLMConfig)
from fairseq_plugins.tasks.generation_checks import check_prefix_tokens, shortest_segment
from fairseq_plugins.tasks.streaming_language_modeling import (StreamingLanguageModelingConfig,
                                                               StreamingLanguageModelingTask, StreamingLMDataset)

SEG = 8


def _task(n_tokens, streams, documents=None):
    """A streaming_lm task with split 'test' of ``n_tokens`` tokens in ``streams`` streams."""
    d = Dictionary()
    for i in range(40):
        d.add_symbol(f"w{i}")
    task = StreamingLanguageModelingTask(StreamingLanguageModelingConfig(tokens_per_sample=SEG), d)
    tokens = torch.randint(4, len(d), (n_tokens,), generator=torch.Generator().manual_seed(0))
    task.datasets["test"] = StreamingLMDataset(tokens, streams, SEG, d.pad(), d.eos(), "test",
                                               document_starts=documents)
    return task


def _model(task):
    torch.manual_seed(0)
    d = task.dictionary
    cfg = InfiniteFormerLMConfig(decoder_embed_dim=16, decoder_ffn_embed_dim=32, decoder_layers=1,
                                 decoder_attention_heads=2, segment_length=SEG, mem_len=SEG, num_basis_functions=8,
                                 basis_widths="0.1", num_samples=8, dropout=0.0)
    return InfiniteFormerLanguageModel(InfiniteFormerDecoder(cfg, d, torch.nn.Embedding(len(d), 16, d.pad()))).eval()


def _refusal(task, **generation):
    with pytest.raises(ConfigError) as err:
        task.build_generator([_model(task)], GenerationConfig(beam=1, **generation))
    message = str(err.value)
    assert "\n" not in message
    return message


def test_a_prefix_longer_than_the_segments_is_refused_naming_both_numbers():
    task = _task(201, 2)  # 2 streams of 101 tokens: 12 segments of 8 and a last one
    message = _refusal(task, prefix_size=SEG + 1, max_len_b=40)
    assert message.startswith("--prefix-size 9 is longer than every prompt")
    assert "--tokens-per-sample 8 tokens" in message and "pass --prefix-size 8 or less" in message


def test_a_prefix_longer_than_a_streams_last_segment_is_refused_naming_where():
    task = _task(201, 2)  # 2 streams of 101, the second padded by one: last segments of 5 and 4
    assert shortest_segment(task.datasets["test"].tgt, SEG, task.dictionary.pad()) == (4, 12, 1)
    message = _refusal(task, prefix_size=5, max_len_b=40)
    assert "segment 13 of 13 of stream 2 of the 'test' split holds 4 tokens" in message
    assert "pass --prefix-size 4 or less" in message
    task.build_generator([_model(task)], GenerationConfig(beam=1, prefix_size=4, max_len_b=40))  # fits


def test_a_segment_of_padding_only_and_a_length_limit_inside_the_prompt_are_refused():
    # one document of 20 tokens, padded to 3 segments of 8, in 4 streams of one segment:
    # stream 3 holds 4 tokens, stream 4 only padding
    task = _task(20, 4, documents=[0])
    message = _refusal(task, prefix_size=2, max_len_b=40)
    assert "segment 1 of 1 of stream 4 of the 'test' split is only padding" in message
    assert "generate without --prefix-size" in message
    message = _refusal(_task(201, 2), prefix_size=4, max_len_b=4)
    assert message.startswith("--max-len-a 0 --max-len-b 4 leaves nothing to generate after --prefix-size 4")
    assert "pass --max-len-b 5 or more" in message


def test_a_fitting_prefix_generates_as_fairseqs_own_inference_step():
    task = _task(201, 2)
    model = _model(task)
    generator = task.build_generator([model], GenerationConfig(beam=1, prefix_size=4, max_len_b=10))
    sample = task.datasets["test"].collater([task.datasets["test"][3]])
    prefix = sample["target"][:, :4]
    got = task.inference_step(generator, [model], sample, prefix_tokens=prefix)
    want = FairseqTask.inference_step(task, generator, [model], sample, prefix_tokens=prefix)
    for g, w, p in zip(got, want, prefix):
        assert torch.equal(g[0]["tokens"], w[0]["tokens"]) and torch.equal(g[0]["tokens"][:4], p)
        assert g[0]["tokens"].numel() > 4  # something was generated after the prompt


def test_a_padded_prefix_handed_to_the_inference_step_is_refused():
    task = _task(201, 2)
    model = _model(task)
    generator = task.build_generator([model], GenerationConfig(beam=1, max_len_b=10))
    sample = task.datasets["test"].collater([task.datasets["test"][12]])  # last segments: 5 and 4 tokens
    with pytest.raises(ConfigError, match="--prefix-size 5 is longer than a prompt: row 1 of this batch holds 4 "
                                          "tokens before its padding; pass --prefix-size 4 or less"):
        task.inference_step(generator, [model], sample, prefix_tokens=sample["target"][:, :5])
    check_prefix_tokens(sample["target"][:, :4], task.dictionary.pad())  # fits
