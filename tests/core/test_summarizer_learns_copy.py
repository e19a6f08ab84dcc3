"""infinite_former_summarizer learns to copy a marked value that only its continuous memory
can reach (the marker lies past the lead window), and its memory-wiped control falls back to
chance: the document memory's read carries content and gradient end to end (encoder, gate,
ridge fit, continuous attention), at the scale of a test, with the paper's read and with the
mixture read (docs/infinite-former.md, "Content reads"; at 1,024-token documents only the mixture
read learns it: docs/results/copy.md).

The task: a document of 96 filler tokens holds one marker token followed by a value (one of 8
symbols) somewhere in positions 24–89; the summary is that value. The lead window (16 states)
never holds it, so a decoder that does not read the memory is at 1/8. docs/results/facts.md
("Not even the facts it reads with ordinary attention") uses this to tell a broken memory from
a slow one."""

from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

import fairseq_plugins  # noqa: F401  (registers everything)
from fairseq_plugins.models.infinite_former_summarizer import (InfiniteFormerSummarizerConfig,
                                                               InfiniteFormerSummarizerModel)
from helpers import dictionary

pytestmark = pytest.mark.full

LENGTH, LEAD, FIRST, LAST, VALUES, BATCH = 96, 16, 24, 90, 8, 16


def _model(d, wiped=False, read="location"):
    cfg = InfiniteFormerSummarizerConfig(
        encoder_embed_dim=64, encoder_ffn_embed_dim=128, encoder_layers=2, encoder_attention_heads=4,
        decoder_embed_dim=64, decoder_ffn_embed_dim=128, decoder_layers=2, decoder_attention_heads=4,
        encoder_chunk_length=16, lead_window=LEAD, num_basis_functions=32, dropout=0.0, memory_wiped=wiped,
        memory_read=read,
        max_source_positions=100_000, max_target_positions=64)
    return InfiniteFormerSummarizerModel.build_model(cfg, SimpleNamespace(source_dictionary=d, target_dictionary=d))


def _batch(d, size, generator):
    """``(src (size, LENGTH), prev_output_tokens (size, 2), target (size, 2))``: filler, one marker
    at a position in [FIRST, LAST), the value after it; the target is the value and ``</s>``."""
    marker = d.nspecial
    src = torch.randint(marker + 1 + VALUES, len(d), (size, LENGTH), generator=generator)
    where = torch.randint(FIRST, LAST, (size,), generator=generator)
    value = torch.randint(marker + 1, marker + 1 + VALUES, (size,), generator=generator)
    rows = torch.arange(size)
    src[rows, where], src[rows, where + 1] = marker, value
    eos = torch.full((size,), d.eos())
    return src, torch.stack([eos, value], 1), torch.stack([value, eos], 1)


def _first_token_accuracy(model, d, batch):
    src, prev, target = batch
    with torch.no_grad():
        out = model(src, torch.full((src.size(0),), LENGTH), prev)
    return (out[0][:, 0].argmax(-1) == target[:, 0]).float().mean().item()


@pytest.mark.parametrize("read", ["location", "mixture"])
def test_copies_a_value_only_the_memory_holds_and_the_wiped_control_cannot(read):
    d = dictionary(24)
    torch.manual_seed(0)
    model = _model(d, read=read).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    generator = torch.Generator().manual_seed(1)
    for _ in range(800):
        src, prev, target = _batch(d, BATCH, generator)
        lprobs = model.get_normalized_probs(model(src, torch.full((BATCH,), LENGTH), prev), log_probs=True)
        loss = F.nll_loss(lprobs.reshape(-1, lprobs.size(-1)), target.reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    held_out = _batch(d, 256, torch.Generator().manual_seed(99))
    wiped = _model(d, wiped=True, read=read)
    wiped.load_state_dict(model.state_dict())
    assert _first_token_accuracy(model.eval(), d, held_out) >= 0.9
    assert _first_token_accuracy(wiped.eval(), d, held_out) <= 0.3  # chance 1/8
