"""A synthetic long-range copy task for memory models (test helper).

Each stream is a sequence of episodes of 4 segments of L tokens: a segment
made of one key symbol repeated, two segments of random filler, then a
segment starting with a query symbol Q whose next token is the key. When Q
is read, the key lies three segments back: beyond a short-term memory of one
segment, reachable only through the long-term memory.
"""

import torch
import torch.nn.functional as F
from fairseq.data import Dictionary
from torch import nn

from fairseq_plugins.models.infinite_former_lm import InfiniteFormerDecoder, InfiniteFormerLMConfig

NUM_KEYS, NUM_FILLERS, FILLER_SEGMENTS = 8, 16, 2


def make_streams(num_streams, num_episodes, seg_len, generator):
    """Return ``(tokens, answer_mask, vocab_size)``, both ``(num_streams, T)``."""
    first_key, first_filler = 4, 4 + NUM_KEYS  # after fairseq's 4 special symbols
    query = first_filler + NUM_FILLERS
    ep_len = (2 + FILLER_SEGMENTS) * seg_len
    streams, masks = [], []
    for _ in range(num_streams):
        toks, mask = [], []
        for _ in range(num_episodes):
            key = first_key + int(torch.randint(NUM_KEYS, (1,), generator=generator))
            filler = (first_filler + torch.randint(NUM_FILLERS, (FILLER_SEGMENTS * seg_len + seg_len - 2,),
                                                   generator=generator)).tolist()
            toks += [key] * seg_len + filler[:FILLER_SEGMENTS * seg_len] + [query, key] + filler[FILLER_SEGMENTS * seg_len:]
            mask += [0] * (ep_len - seg_len) + [0, 1] + [0] * (seg_len - 2)
        # each stream starts at a different segment of its episode
        phase = int(torch.randint(ep_len // seg_len, (1,), generator=generator)) * seg_len
        streams.append(torch.tensor(toks[phase:]))
        masks.append(torch.tensor(mask[phase:]))
    n = min(len(t) for t in streams)
    return torch.stack([t[:n] for t in streams]), torch.stack([m[:n] for m in masks]), query + 1


def train_and_score(long_term_memory: bool, steps: int = 500, seg_len: int = 16, bsz: int = 32, seed: int = 0):
    """Train a 1-layer model on the task, streaming; return the answer accuracy
    (argmax == key) over the last 30 batches that contain answers."""
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(1234)
    tokens, answer, vocab = make_streams(bsz, steps // 4 + 2, seg_len, generator)
    dictionary = Dictionary()
    while len(dictionary) < vocab:
        dictionary.add_symbol(f"s{len(dictionary)}")
    cfg = InfiniteFormerLMConfig(
        decoder_embed_dim=64, decoder_ffn_embed_dim=128, decoder_layers=1, decoder_attention_heads=2,
        segment_length=seg_len, mem_len=seg_len, no_long_term_memory=not long_term_memory,
        num_basis_functions=32, basis_widths="0.02,0.05", num_samples=32, tau=0.75, dropout=0.0)
    decoder = InfiniteFormerDecoder(cfg, dictionary, nn.Embedding(len(dictionary), 64, dictionary.pad()))
    optimizer = torch.optim.Adam(decoder.parameters(), lr=3e-3)
    accuracies = []
    for step in range(steps):
        cols = slice(step * seg_len, (step + 1) * seg_len)
        nxt = slice(step * seg_len + 1, (step + 1) * seg_len + 1)
        src, tgt, mask = tokens[:, cols], tokens[:, nxt], answer[:, nxt]
        logits, _ = decoder(src, memory_key="train", reset_memory=torch.full((bsz,), step == 0))
        nll = F.cross_entropy(logits.reshape(-1, logits.size(-1)), tgt.reshape(-1), reduction="none")
        weight = 1.0 + 4.0 * mask.reshape(-1).float()  # answers weigh more: filler is pure noise
        (nll * weight).mean().backward()
        optimizer.step()
        optimizer.zero_grad()
        if mask.sum() > 0:
            hit = (logits.argmax(-1) == tgt) & mask.bool()
            accuracies.append(hit.sum().item() / mask.sum().item())
    return sum(accuracies[-30:]) / len(accuracies[-30:])
