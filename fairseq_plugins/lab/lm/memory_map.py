"""Where the long-term memory looks (``fairseq-longmem analyze memory-map``; docs/analysis.md).

A text is encoded as data-prep encodes a split (each line sentencepiece-encoded with the data's
model, mapped with its ``dict.txt``, one end-of-sentence token after every line, as
fairseq-preprocess writes them) and read by an ``infinite_former_lm`` in one call with the memory
carried from segment to segment, as a stream of ``streaming_lm`` starts: the document's tokens
are the model's inputs, token 0 being the end-of-sentence token in front of the text. The
decoder returns the Gaussians N(μ, σ²) of every long-term read (``extra["ltm_stats"]``, one
``ReadStats`` per segment and layer, ``(1, H, T)`` each) and, with the memories' report switched
on, what the memory each read saw holds (``extra["memory_holdings"]``: the tokens and their
places on [0, 1], the memory's own record; :mod:`~fairseq_plugins.lab.lm.timeline`); each held
token's share of a read is the Gaussian's mass on its cell of [0, 1]
(:func:`~fairseq_plugins.lab.lm.timeline.token_mass`). Queries of the first segment read an
empty memory and have no map.
"""

import os
from dataclasses import dataclass, field
from typing import Dict, List, Optional

import torch

from fairseq_plugins.lab.lm.timeline import Timeline, token_mass
from fairseq_plugins.errors import ConfigError
from fairseq_plugins.modules.memory.contract import set_holdings_report


@dataclass
class MemoryMap:
    """The reads of one text.

    Attributes:
        checkpoint: the checkpoint's path.
        tokens: ``(n,)`` int64 the document's tokens (model inputs); pieces: their text.
        segment_length: L; tau, num_samples, sticky, sigma2_min: the memory's settings.
        num_layers, num_heads: of the model.
        mu, sigma2: per layer ``(H, n)`` float32 (NaN for the first segment's queries).
        timelines: per layer, per segment s ≥ 1, the :class:`Timeline` that segment reads.
    """

    checkpoint: str
    tokens: torch.Tensor
    pieces: List[str]
    segment_length: int
    tau: float
    num_samples: int
    sticky: bool
    sigma2_min: float
    num_layers: int
    num_heads: int
    mu: List[torch.Tensor] = field(default_factory=list)
    sigma2: List[torch.Tensor] = field(default_factory=list)
    timelines: List[Dict[int, Timeline]] = field(default_factory=list)

    def segment_of(self, token: int) -> int:
        return token // self.segment_length

    def mass(self, layer: int, token: int) -> torch.Tensor:
        """``(H, n)`` float64: each head's mass over the document's tokens for the query at ``token``
        (zero on tokens the memory does not hold)."""
        timeline = self.timelines[layer][self.segment_of(token)]
        held = token_mass(self.mu[layer][:, token], self.sigma2[layer][:, token], timeline)
        out = torch.zeros(self.num_heads, len(self.pieces), dtype=torch.float64)
        out[:, timeline.tokens] = held
        return out

    def heat_map(self, layer: int) -> torch.Tensor:
        """``(n, n)`` float32: row q = the head-averaged mass of query q over the document's tokens
        (rows of the first segment zero)."""
        n = len(self.pieces)
        out = torch.zeros(n, n)
        for segment, timeline in self.timelines[layer].items():
            rows = slice(segment * self.segment_length, min(n, (segment + 1) * self.segment_length))
            mass = token_mass(self.mu[layer][:, rows].t(), self.sigma2[layer][:, rows].t(), timeline)  # (T, H, k)
            out[rows, timeline.tokens] = mass.mean(1).float()
        return out

    def to_json(self) -> Dict:
        """memory_map.json (docs/analysis.md)."""
        def clean(t: torch.Tensor):
            return [[None if x != x else round(float(x), 6) for x in row] for row in t.tolist()]
        return {
            "checkpoint": self.checkpoint, "tokens": self.tokens.tolist(), "pieces": self.pieces,
            "segment_length": self.segment_length,
            "memory": {"tau": self.tau, "num_samples": self.num_samples, "sticky": self.sticky,
                       "sigma2_min": self.sigma2_min},
            "layers": [{
                "layer": layer,
                "mu": clean(self.mu[layer]), "sigma2": clean(self.sigma2[layer]),
                "mapping": [{"segment": s, "queries": [s * self.segment_length,
                                                       min(len(self.pieces), (s + 1) * self.segment_length)],
                             "tokens": t.tokens.tolist(), "positions": [round(float(p), 6) for p in t.positions]}
                            for s, t in sorted(self.timelines[layer].items())],
            } for layer in range(self.num_layers)],
        }


def encode_text(path: str, data: str, spm_model: Optional[str], dictionary, max_tokens: int) -> torch.Tensor:
    """``(n,)`` the document's tokens: the end-of-sentence token, then the text's lines encoded
    as data-prep encodes a split (module docstring), cut to ``max_tokens`` tokens in all."""
    import sentencepiece

    model = spm_model or os.path.join(os.path.dirname(os.path.abspath(data)), "spm.model")
    if not os.path.isfile(model):
        raise ConfigError(f"sentencepiece model {model} not found; pass --spm-model (data-prep's OUT/spm.model)")
    from fairseq_plugins.lab.data.text import read_text

    lines = read_text(path).splitlines()  # as data-prep reads a document (fairseq_plugins.lab.data.text)
    sp = sentencepiece.SentencePieceProcessor(model_file=model)
    ids = [torch.tensor([dictionary.eos()])]
    for line in lines:
        pieces = " ".join(sp.encode(line.strip(), out_type=str)) if line.strip() else ""
        ids.append(dictionary.encode_line(pieces, add_if_not_exist=False, append_eos=True).long())
    return torch.cat(ids)[:max_tokens]


def load_memory_model(checkpoint: str, data: str, cpu: bool):
    """``(model, task)`` of an ``infinite_former_lm`` checkpoint with long-term memory, in eval mode;
    ConfigError for any other model."""
    from fairseq_plugins.lab.common.checkpoints import load
    from fairseq_plugins.lab.lm.scoring import checkpoint_task
    from fairseq_plugins.models.infinite_former_lm import InfiniteFormerLanguageModel
    from fairseq_plugins.modules.memory.continuous import LongTermMemory

    checkpoint_task(checkpoint)
    model, _, task = load(checkpoint, data, cpu=True)
    if not isinstance(model, InfiniteFormerLanguageModel):
        raise ConfigError(f"checkpoint {checkpoint} is a {type(model).__name__}, not an infinite_former_lm; the memory "
                          "map reads the ∞-former language model's long-term memory")
    if not all(isinstance(layer.long_term_memory, LongTermMemory) for layer in model.decoder.layers):
        raise ConfigError(f"checkpoint {checkpoint} has no continuous long-term memory (trained with "
                          "--no-long-term-memory, or --memory-type compressive, whose reads are no Gaussians): there "
                          "is nothing to map; pass an infinite_former checkpoint with its continuous memory on")
    model.eval()
    if not cpu:
        model.cuda()
    return model, task


def build_map(model, tokens: torch.Tensor, pieces: List[str], checkpoint: str) -> MemoryMap:
    """Read ``tokens`` ``(n,)`` with ``model`` and map every long-term read (module docstring);
    the memories' report is switched on for the read and off after it."""
    decoder = model.decoder
    layers, length, n = decoder.layers, decoder.segment_length, tokens.numel()
    device = next(model.parameters()).device
    set_holdings_report(model, True)
    try:
        with torch.no_grad():
            _, extra = decoder.extract_features(tokens[None].to(device))
    finally:
        set_holdings_report(model, False)
    stats, holdings = extra["ltm_stats"], extra["memory_holdings"]
    num_segments = -(-n // length)
    memory = layers[0].long_term_memory
    result = MemoryMap(checkpoint, tokens, pieces, length, memory.tau, memory.num_samples, memory.sticky,
                       memory.sigma2_min, len(layers), memory.num_heads)
    for i in range(len(layers)):
        reads = [stats[s * len(layers) + i] for s in range(num_segments)]
        result.mu.append(torch.cat([r.mu[0].float().cpu() for r in reads], dim=-1))
        result.sigma2.append(torch.cat([r.sigma2[0].float().cpu() for r in reads], dim=-1))
        result.mu[i][:, :min(n, length)] = float("nan")
        result.sigma2[i][:, :min(n, length)] = float("nan")
        maps = {}
        for s in range(1, num_segments):
            timeline = Timeline.of(holdings[s * len(layers) + i])  # what the read of segment s saw
            if len(timeline):
                maps[s] = timeline
            else:  # nothing has entered yet: the read is of an empty memory
                result.mu[i][:, s * length:(s + 1) * length] = float("nan")
                result.sigma2[i][:, s * length:(s + 1) * length] = float("nan")
        result.timelines.append(maps)
    return result


def run(checkpoint: str, data: str, text: str, spm_model: Optional[str] = None, max_tokens: int = 2048,
        query_token: Optional[int] = None, top_k: int = 10, cpu: bool = True) -> MemoryMap:
    """The memory map of ``text`` (what the command computes).

    Raises:
        ConfigError: a checkpoint without long-term memory or of another model, a text that does
            not fill one segment, ``query_token`` outside the text or in the first segment, bad
            ``max_tokens``/``top_k``.
    """
    from fairseq.data import Dictionary

    if max_tokens <= 0 or top_k <= 0:
        raise ConfigError(f"--max-tokens and --top-k must be positive, got {max_tokens} and {top_k}")
    if not os.path.isfile(text):
        raise ConfigError(f"text file {text} not found")
    if not os.path.isfile(os.path.join(data, "dict.txt")):
        raise ConfigError(f"{os.path.join(data, 'dict.txt')} is missing; --data is the fairseq-preprocess folder "
                          "(data-prep's OUT/bin)")
    dictionary = Dictionary.load(os.path.join(data, "dict.txt"))
    tokens = encode_text(text, data, spm_model, dictionary, max_tokens)
    model, _ = load_memory_model(checkpoint, data, cpu or not torch.cuda.is_available())
    length = model.decoder.segment_length
    if tokens.numel() <= length:
        count = f"{tokens.numel()} token{'s' if tokens.numel() != 1 else ''}"
        raise ConfigError(f"{text} gives {count}, not more than one segment ({length} tokens): the "
                          f"memory holds nothing before token {length}; give a longer text")
    if query_token is not None:
        if not 0 <= query_token < tokens.numel():
            raise ConfigError(f"--query-token {query_token} is past the text ({tokens.numel()} tokens read, "
                              f"0..{tokens.numel() - 1}); pick a token inside it")
        if query_token < length:
            raise ConfigError(f"--query-token {query_token} is in the first segment (tokens 0..{length - 1}), which "
                              f"reads an empty memory; pick a token from {length} on")
    pieces = [dictionary[int(t)] for t in tokens]
    result = build_map(model, tokens, pieces, checkpoint)
    if query_token is not None and result.segment_of(query_token) not in result.timelines[0]:
        raise ConfigError(f"--query-token {query_token} reads an empty memory (nothing has entered it yet); "
                          "pick a later token")
    return result


def describe_query(result: MemoryMap, token: int, top_k: int, context: int = 4) -> str:
    """The ``top_k`` tokens the query at ``token`` weighs most in each layer, as text."""
    def text(a: int, b: int) -> str:
        return "".join(result.pieces[a:b]).replace("\u2581", " ")

    n = len(result.pieces)
    lines = [f"query token {token} ({result.pieces[token]!r}, after: ...{text(max(0, token - 8), token + 1)!r}):"]
    for layer in range(result.num_layers):
        mass = result.mass(layer, token).mean(0)
        top = torch.topk(mass, min(top_k, int((mass > 0).sum()) or 1))
        lines.append(f"  layer {layer}: the {top.indices.numel()} tokens it weighs most (share of the read, "
                     "head average):")
        for value, index in zip(top.values.tolist(), top.indices.tolist()):
            around = f"{text(max(0, index - context), index)}[{text(index, index + 1)}]" \
                     f"{text(index + 1, min(n, index + 1 + context))}"
            lines.append(f"    {index:>6}  {value:.4f}  {around!r}")
    return "\n".join(lines)
