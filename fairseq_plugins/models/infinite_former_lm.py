"""``infinite_former_lm``: a causal ∞-former language model for fairseq.

Martins, Marinho & Martins, "∞-former: Infinite Memory Transformer", ACL 2022.
Each layer attends causally to the current segment plus a short-term memory of
the previous ``mem_len`` attention inputs (detached, rotary positions), and
adds a read of its continuous long-term memory
(:mod:`fairseq_plugins.modules.long_term_memory`). ``--no-long-term-memory``
gives the Transformer-XL-style twin with the same code.

Memory across calls: when the streaming task
(:mod:`fairseq_plugins.tasks.streaming_language_modeling`) sends
``memory_key`` (and per-slot ``reset_memory`` flags) in ``net_input``, the
decoder keeps one memory per key between calls — training and validation
streams never mix. Without a key (stock ``language_modeling`` task, scoring,
generation) every call starts from an empty memory. Inputs longer than
``segment_length`` are processed segment by segment inside one call, so no
input is too long for the model.
"""

import logging
import math
from dataclasses import dataclass, field
from typing import Dict, List, Optional

import torch
from fairseq import utils
from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from fairseq.models import FairseqDecoder, FairseqLanguageModel, register_model, register_model_architecture
from fairseq.modules import LayerNorm
from fairseq.modules.fairseq_dropout import FairseqDropout
from omegaconf import II
from torch import Tensor, nn

from fairseq_plugins.errors import ConfigError
from fairseq_plugins.models.dictionary_check import DictionaryCheckMixin
from fairseq_plugins.models.fastformer_lm import set_arch_defaults
from fairseq_plugins.modules.infinite_former_layer import InfiniteFormerDecoderLayer, LayerMemory
from fairseq_plugins.modules.long_term_memory import LongTermMemory

logger = logging.getLogger(__name__)


@dataclass
class InfiniteFormerLMConfig(FairseqDataclass):
    activation_fn: ChoiceEnum(utils.get_available_activation_fns()) = field(
        default="gelu", metadata={"help": "activation function in the feed-forward blocks"})
    dropout: float = field(default=0.1, metadata={"help": "dropout probability"})
    attention_dropout: float = field(default=0.0, metadata={"help": "dropout on attention weights"})
    activation_dropout: float = field(default=0.0, metadata={"help": "dropout after the FFN activation"})
    decoder_embed_dim: int = field(default=128, metadata={"help": "model width e"})
    decoder_ffn_embed_dim: int = field(default=512, metadata={"help": "feed-forward width"})
    decoder_layers: int = field(default=2, metadata={"help": "number of decoder layers"})
    decoder_attention_heads: int = field(default=4, metadata={"help": "attention heads h (must divide the width)"})
    share_decoder_input_output_embed: bool = field(
        default=False, metadata={"help": "tie the input embedding and the output projection"})
    no_scale_embedding: bool = field(default=False, metadata={"help": "do not scale embeddings by sqrt(width)"})
    segment_length: int = field(
        default=II("task.tokens_per_sample"),
        metadata={"help": "tokens per segment L processed at once (default: the task's --tokens-per-sample)"})
    mem_len: int = field(
        default=II("task.tokens_per_sample"),
        metadata={"help": "short-term memory: previous positions each layer attends to (0: none; "
                          "default: the task's --tokens-per-sample)"})
    no_long_term_memory: bool = field(
        default=False, metadata={"help": "switch the continuous long-term memory off (Transformer-XL-style twin)"})
    no_sticky_memories: bool = field(
        default=False, metadata={"help": "sample the old memory uniformly instead of where attention went"})
    num_basis_functions: int = field(
        default=512, metadata={"help": "N Gaussian basis functions of the long-term memory (paper: 512)"})
    basis_widths: str = field(
        default="0.005,0.01", metadata={"help": "comma-separated basis widths; each centre gets every width "
                                                "(paper, language modelling: 0.005,0.01)"})
    ridge_penalty: float = field(default=0.5, metadata={"help": "ridge regression penalty λ (paper LM: 0.5)"})
    tau: float = field(default=0.5, metadata={"help": "τ in (0,1): share of [0,1] kept for the old memory "
                                                      "at each update (paper LM: 0.5)"})
    num_samples: int = field(default=512, metadata={"help": "M samples of the old signal per update (paper: 512)"})
    sticky_bins: int = field(default=128, metadata={"help": "D histogram bins of sticky memories (paper: 128)"})
    sigma2_min: float = field(default=1e-4, metadata={"help": "lower clamp of the attention variance σ²"})
    no_boundary_padding: bool = field(
        default=False, metadata={"help": "ridge fit without the zero padding on both sides of [0,1]"})


class InfiniteFormerDecoder(FairseqDecoder):
    """Stack of :class:`InfiniteFormerDecoderLayer` with per-key memories."""

    def __init__(self, cfg: InfiniteFormerLMConfig, dictionary, embed_tokens: nn.Embedding):
        super().__init__(dictionary)
        validate_config(cfg)
        self.cfg = cfg
        self.segment_length = cfg.segment_length
        self.embed_dim = cfg.decoder_embed_dim
        self.embed_tokens = embed_tokens
        self.embed_scale = 1.0 if cfg.no_scale_embedding else math.sqrt(self.embed_dim)
        self.dropout_module = FairseqDropout(cfg.dropout, module_name=self.__class__.__name__)
        widths = _parse_widths(cfg.basis_widths)
        self.layers = nn.ModuleList()
        for _ in range(cfg.decoder_layers):
            ltm = None
            if not cfg.no_long_term_memory:
                ltm = LongTermMemory(
                    self.embed_dim, cfg.decoder_attention_heads, num_basis=cfg.num_basis_functions,
                    basis_widths=widths, ridge_penalty=cfg.ridge_penalty, tau=cfg.tau,
                    num_samples=cfg.num_samples, sticky=not cfg.no_sticky_memories,
                    sticky_bins=cfg.sticky_bins, sigma2_min=cfg.sigma2_min,
                    boundary_padding=not cfg.no_boundary_padding)
            self.layers.append(InfiniteFormerDecoderLayer(
                self.embed_dim, cfg.decoder_attention_heads, cfg.decoder_ffn_embed_dim, cfg.mem_len,
                dropout=cfg.dropout, attention_dropout=cfg.attention_dropout,
                activation_dropout=cfg.activation_dropout, activation_fn=cfg.activation_fn,
                long_term_memory=ltm))
        self.layer_norm = LayerNorm(self.embed_dim)
        if cfg.share_decoder_input_output_embed:
            self.output_projection = nn.Linear(self.embed_dim, len(dictionary), bias=False)
            self.output_projection.weight = self.embed_tokens.weight
        else:
            self.output_projection = nn.Linear(self.embed_dim, len(dictionary), bias=False)
            nn.init.normal_(self.output_projection.weight, mean=0, std=self.embed_dim**-0.5)
        # memories between calls, one per stream key; never in the state_dict
        self._memories: Dict[str, List[LayerMemory]] = {}

    # ---- memory management -----------------------------------------------

    def reset_memory(self, memory_key: Optional[str] = None) -> None:
        """Forget the memory of one stream key (``None``: of all keys)."""
        if memory_key is None:
            self._memories.clear()
        else:
            self._memories.pop(memory_key, None)

    def get_memory(self, memory_key: str) -> Optional[List[LayerMemory]]:
        """The per-layer memory kept for ``memory_key`` (``None`` if none)."""
        return self._memories.get(memory_key)

    def memory_state_dict(self, memory_key: str) -> Dict[str, Tensor]:
        """The memory of one stream key as ``{"<layer>.<name>": tensor}`` (empty if
        none), detached, for checkpoints (loads with ``weights_only=True``)."""
        memory = self._memories.get(memory_key)
        if memory is None:
            return {}
        return {f"{i}.{name}": t.detach() for i, m in enumerate(memory) for name, t in m.to_dict().items()}

    def load_memory_state_dict(self, memory_key: str, state: Dict[str, Tensor]) -> None:
        """Restore what :meth:`memory_state_dict` returned (an empty dict resets)."""
        if not state:
            self.reset_memory(memory_key)
            return
        device = self.embed_tokens.weight.device
        per_layer: List[Dict[str, Tensor]] = [{} for _ in self.layers]
        for key, tensor in state.items():
            layer, name = key.split(".", 1)
            per_layer[int(layer)][name] = tensor
        self._memories[memory_key] = [LayerMemory.from_dict(d, device) for d in per_layer]

    def _initial_memory(self, memory_key, reset_memory, bsz) -> List[LayerMemory]:
        memory = self._memories.get(memory_key) if memory_key is not None else None
        if memory is not None and _memory_batch_size(memory) not in (None, bsz):
            memory = None  # the batch's streams changed: start afresh
        if memory is None:
            return [LayerMemory() for _ in self.layers]
        if reset_memory is not None and bool(reset_memory.any()):
            for layer_memory in memory:
                layer_memory.reset_(reset_memory.to(torch.bool))
        return memory

    # ---- forward ------------------------------------------------------------

    def forward(self, prev_output_tokens: Tensor, encoder_out=None, incremental_state=None,
                features_only: bool = False, return_all_hiddens: bool = False,
                memory_key: Optional[str] = None, reset_memory: Optional[Tensor] = None,
                src_lengths=None, **unused):
        """
        Args:
            prev_output_tokens: ``(bsz, T)`` token ids; any T (split into segments).
            memory_key: keep the memory between calls under this key
                (the streaming task passes its split name); ``None``: start empty
                and keep nothing.
            reset_memory: ``(bsz,)`` bool, slots whose stream starts here.
        Returns:
            ``(logits (bsz, T, V), extra)``; ``extra["ltm_stats"]`` lists, per
            layer and segment, ``(mu, sigma2, valid)`` of the LTM reads (for the
            KL term of the criterion).
        """
        bsz, total_len = prev_output_tokens.shape
        memory = self._initial_memory(memory_key, reset_memory, bsz)
        x = self.embed_scale * self.embed_tokens(prev_output_tokens)  # (bsz, T, C)
        x = self.dropout_module(x).transpose(0, 1)  # (T, bsz, C)
        outputs, ltm_stats, inner_states = [], [], []
        for start in range(0, total_len, self.segment_length):
            h = x[start:start + self.segment_length]  # (L, bsz, C)
            for i, layer in enumerate(self.layers):
                h, memory[i], stats = layer(h, memory[i])
                if stats is not None:
                    ltm_stats.append(stats)
            outputs.append(h)
        x = self.layer_norm(torch.cat(outputs, dim=0)) if outputs else self.layer_norm(x)
        if return_all_hiddens:
            inner_states.append(x)
        if memory_key is not None:
            self._memories[memory_key] = memory
        x = x.transpose(0, 1)  # (bsz, T, C)
        extra = {"ltm_stats": ltm_stats, "inner_states": inner_states, "attn": [None]}
        if features_only:
            return x, extra
        return self.output_projection(x), extra

    def max_positions(self):
        # positions are relative (rotary) and long inputs are segmented: no limit
        return int(1e9)


@register_model("infinite_former_lm", dataclass=InfiniteFormerLMConfig)
class InfiniteFormerLanguageModel(DictionaryCheckMixin, FairseqLanguageModel):
    """∞-former language model (see the module docstring)."""

    @classmethod
    def build_model(cls, cfg: InfiniteFormerLMConfig, task):
        embed_tokens = nn.Embedding(len(task.source_dictionary), cfg.decoder_embed_dim,
                                    task.source_dictionary.pad())
        nn.init.normal_(embed_tokens.weight, mean=0, std=cfg.decoder_embed_dim**-0.5)
        nn.init.constant_(embed_tokens.weight[task.source_dictionary.pad()], 0)
        decoder = InfiniteFormerDecoder(cfg, task.target_dictionary, embed_tokens)
        model = cls(decoder)
        model.remember_dictionaries(task.target_dictionary)
        return model

    def reset_memory(self, memory_key: Optional[str] = None) -> None:
        self.decoder.reset_memory(memory_key)

    def memory_state_dict(self, memory_key: str) -> Dict[str, Tensor]:
        return self.decoder.memory_state_dict(memory_key)

    def load_memory_state_dict(self, memory_key: str, state: Dict[str, Tensor]) -> None:
        self.decoder.load_memory_state_dict(memory_key, state)


def _parse_widths(spec: str) -> List[float]:
    try:
        return [float(w) for w in str(spec).split(",") if w.strip()]
    except ValueError:
        raise ConfigError(f"--basis-widths must be comma-separated numbers, got {spec!r}") from None


def _memory_batch_size(memory: List[LayerMemory]) -> Optional[int]:
    for m in memory:
        for t in (m.stm, m.chunk):
            if t is not None:
                return t.size(1)
    return None


def validate_config(cfg: InfiniteFormerLMConfig) -> None:
    """One-line errors for inconsistent options (raised before any allocation)."""
    if cfg.decoder_embed_dim % cfg.decoder_attention_heads != 0:
        raise ConfigError(
            f"--decoder-attention-heads ({cfg.decoder_attention_heads}) must divide "
            f"--decoder-embed-dim ({cfg.decoder_embed_dim})")
    if cfg.segment_length <= 0:
        raise ConfigError(f"--tokens-per-sample (the segment length) must be positive, got {cfg.segment_length}")
    if cfg.mem_len < 0:
        raise ConfigError(f"--mem-len must be >= 0, got {cfg.mem_len}")
    if cfg.decoder_layers <= 0:
        raise ConfigError(f"--decoder-layers must be positive, got {cfg.decoder_layers}")
    # the long-term memory checks its own options (N, M, τ, λ, widths) when built


# ---- named architectures ----------------------------------------------------


@register_model_architecture("infinite_former_lm", "infinite_former_lm_wiki103")
def infinite_former_lm_wiki103(args):
    """Paper §4.2 from-scratch WikiText-103 model (use --tokens-per-sample 150)."""
    set_arch_defaults(args, decoder_layers=16, decoder_attention_heads=10, decoder_embed_dim=410,
                      decoder_ffn_embed_dim=2100, mem_len=150, num_basis_functions=150, num_samples=150,
                      dropout=0.1)


@register_model_architecture("infinite_former_lm", "infinite_former_lm_gpt2_small")
def infinite_former_lm_gpt2_small(args):
    """GPT-2-small-sized model of the paper's fine-tuning runs (use --tokens-per-sample 512)."""
    set_arch_defaults(args, decoder_layers=12, decoder_attention_heads=12, decoder_embed_dim=768,
                      decoder_ffn_embed_dim=3072, mem_len=512, num_basis_functions=512, num_samples=512,
                      dropout=0.1, activation_fn="gelu")
