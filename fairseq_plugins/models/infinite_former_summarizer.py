"""``infinite_former_summarizer``: a long-document encoder–decoder whose decoder
reads the whole source through the ∞-former's continuous memory (Martins et
al., ACL 2022, §3: ridge fit onto N Gaussian basis functions, eq. 7, and
continuous attention, eqs. 8–10), so that the decoder's cost and state do not
depend on the length of the source.

Encoder (cost linear in the source length L):

* the real tokens of each row are read in order (left or right padding alike:
  padding is removed first, so chunk boundaries and every output of a real
  example do not depend on how much padding its batch needs);
* the document is cut into chunks of ``--encoder-chunk-length`` C tokens; a
  chunk's tokens attend to the tokens of the same chunk and of the previous
  chunk of the same document (``--no-previous-chunk``: the same chunk only),
  so each chunk costs O(C²) and the document O(L·C). Chunks of all documents
  of the batch are packed into one batch of chunks (no work on padding
  chunks);
* positions are rotary, relative inside the attention window (no maximum
  length); the global position of a token reaches the decoder through the
  basis position (i + ½)/L of its state in the memory;
* pre-norm blocks (self-attention, FFN), final LayerNorm.

Memory: the top encoder states of the whole document, gated by
X ⊙ sigmoid(Conv1d(X)) (paper §3.3; ``--no-memory-gate`` drops it), are
fitted by ridge regression (λ = ``--ridge-penalty``, zero padding at both
ends as in the LM) onto ``--num-basis-functions`` N Gaussian RBFs at positions
(i + ½)/L: B ∈ R^{N×e} per document, whatever L
(:func:`~fairseq_plugins.modules.long_term_memory.fit_sequences`). The fit is
differentiable: the encoder learns through it.

Decoder (cost per step independent of L): pre-norm blocks of causal
self-attention (fairseq's ``MultiheadAttention``, sinusoidal or learned
absolute positions), cross-attention = continuous Gaussian attention over B
(:class:`~fairseq_plugins.modules.continuous_cross_attention.ContinuousCrossAttention`,
one per layer) plus, when ``--lead-window`` W > 0, ordinary multi-head
attention over the first W encoder states (the lead of the document, always
W slots, masked beyond a shorter document), the two summed; then FFN. The
decoder returns ``extra["ltm_stats"]`` (per layer ``(μ, σ², valid)``) so that
``--criterion infinite_former_kl`` adds the variance KL (§3.4).

Generation: the encoder output holds only fixed-size tensors (B, the lead
window and its mask, the source lengths), reordered by
:meth:`InfiniteFormerSummarizerEncoder.reorder_encoder_out`; the decoder keeps
its self-attention cache, the lead window's keys/values and the memory's
keys/values in fairseq's ``incremental_state``. Works with the ``translation``
task, ``fairseq-generate`` and beam search. The source is never truncated:
set the task's ``--max-source-positions`` above the longest document.
"""

import math
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F
from fairseq import utils
from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from fairseq.models import (FairseqEncoder, FairseqEncoderDecoderModel, FairseqIncrementalDecoder,
                            register_model, register_model_architecture)
from fairseq.modules import LayerNorm, MultiheadAttention, PositionalEmbedding
from fairseq.modules.fairseq_dropout import FairseqDropout
from fairseq.modules.rotary_positional_embedding import RotaryPositionalEmbedding, rotate_half
from omegaconf import II
from torch import Tensor, nn

from fairseq_plugins.errors import ConfigError
from fairseq_plugins.models.dictionary_check import DictionaryCheckMixin
from fairseq_plugins.models.fastformer_lm import check_not_empty, set_arch_defaults
from fairseq_plugins.models.infinite_former_lm import _parse_widths
from fairseq_plugins.modules.continuous_cross_attention import ContinuousCrossAttention
from fairseq_plugins.modules.long_term_memory import fit_sequences, rbf_basis


@dataclass
class InfiniteFormerSummarizerConfig(FairseqDataclass):
    activation_fn: ChoiceEnum(utils.get_available_activation_fns()) = field(
        default="gelu", metadata={"help": "activation function in the feed-forward blocks"})
    dropout: float = field(default=0.1, metadata={"help": "dropout probability"})
    attention_dropout: float = field(default=0.0, metadata={"help": "dropout on attention weights"})
    activation_dropout: float = field(default=0.0, metadata={"help": "dropout after the FFN activation"})
    encoder_embed_dim: int = field(default=128, metadata={"help": "encoder width (also the width of the memory B)"})
    encoder_ffn_embed_dim: int = field(default=512, metadata={"help": "encoder feed-forward width"})
    encoder_layers: int = field(default=2, metadata={"help": "encoder blocks"})
    encoder_attention_heads: int = field(default=4, metadata={"help": "encoder heads (must divide the width)"})
    encoder_chunk_length: int = field(
        default=256, metadata={"help": "C: the source is read in chunks of C tokens; encoder self-attention stays "
                                       "inside a chunk (and the previous one), so its cost is linear in the length"})
    no_previous_chunk: bool = field(
        default=False, metadata={"help": "encoder tokens attend to their own chunk only (default: also to the "
                                         "previous chunk of the document)"})
    decoder_embed_dim: int = field(default=128, metadata={"help": "decoder width"})
    decoder_ffn_embed_dim: int = field(default=512, metadata={"help": "decoder feed-forward width"})
    decoder_layers: int = field(default=2, metadata={"help": "decoder blocks"})
    decoder_attention_heads: int = field(default=4, metadata={"help": "decoder heads (must divide the width)"})
    decoder_learned_pos: bool = field(default=False, metadata={"help": "learned decoder positions"})
    lead_window: int = field(
        default=256, metadata={"help": "W: the decoder also attends (ordinary attention) to the first W encoder "
                                       "states of the document, beside the continuous memory; 0 disables"})
    num_basis_functions: int = field(
        default=256, metadata={"help": "N Gaussian basis functions of the document memory B (N x width, any "
                                       "source length)"})
    basis_widths: str = field(
        default="0.005,0.01", metadata={"help": "comma-separated basis widths; each centre gets every width"})
    ridge_penalty: float = field(default=0.5, metadata={"help": "ridge regression penalty λ of the memory fit"})
    sigma2_min: float = field(default=1e-4, metadata={"help": "lower clamp of the attention variance σ²"})
    no_boundary_padding: bool = field(
        default=False, metadata={"help": "memory fit without the zero padding on both sides of [0,1]"})
    no_memory_gate: bool = field(
        default=False, metadata={"help": "fit the encoder states without the smoothing gate X*sigmoid(conv(X))"})
    share_decoder_input_output_embed: bool = field(
        default=False, metadata={"help": "tie the decoder input embedding and the output projection"})
    share_all_embeddings: bool = field(
        default=False, metadata={"help": "one embedding for source, target and output (joined dictionary)"})
    no_scale_embedding: bool = field(default=False, metadata={"help": "do not scale embeddings by sqrt(width)"})
    max_source_positions: int = II("task.max_source_positions")
    max_target_positions: int = II("task.max_target_positions")


def validate_config(cfg) -> None:
    """One-line errors for inconsistent options (raised before any allocation)."""
    for side in ("encoder", "decoder"):
        layers, width = getattr(cfg, f"{side}_layers"), getattr(cfg, f"{side}_embed_dim")
        heads = getattr(cfg, f"{side}_attention_heads")
        if layers <= 0:
            raise ConfigError(f"--{side}-layers must be positive, got {layers}")
        if width <= 0 or getattr(cfg, f"{side}_ffn_embed_dim") <= 0:
            raise ConfigError(f"--{side}-embed-dim and --{side}-ffn-embed-dim must be positive")
        if heads <= 0 or width % heads != 0:
            raise ConfigError(f"--{side}-attention-heads ({heads}) must be positive and divide "
                              f"--{side}-embed-dim ({width})")
    if cfg.encoder_chunk_length <= 0:
        raise ConfigError(f"--encoder-chunk-length must be positive, got {cfg.encoder_chunk_length}")
    if cfg.lead_window < 0:
        raise ConfigError(f"--lead-window must be >= 0 (0 disables it), got {cfg.lead_window}")
    if cfg.ridge_penalty <= 0:
        raise ConfigError(f"--ridge-penalty (λ) must be positive, got {cfg.ridge_penalty}")
    if cfg.sigma2_min <= 0:
        raise ConfigError(f"--sigma2-min must be positive, got {cfg.sigma2_min}")
    rbf_basis(cfg.num_basis_functions, _parse_widths(cfg.basis_widths))  # N and widths (one-line errors)
    if cfg.share_all_embeddings and cfg.encoder_embed_dim != cfg.decoder_embed_dim:
        raise ConfigError(f"--share-all-embeddings needs --encoder-embed-dim ({cfg.encoder_embed_dim}) equal to "
                          f"--decoder-embed-dim ({cfg.decoder_embed_dim})")


# ---- encoder ------------------------------------------------------------------


class ChunkEncoderLayer(nn.Module):
    """Pre-norm block: self-attention inside a chunk (optionally also to the
    previous chunk), rotary positions, FFN.

    Args:
        embed_dim, num_heads, ffn_embed_dim: width e, heads h (e % h == 0), FFN width.
        previous_chunk: keys/values also include the previous chunk.
        dropout, attention_dropout, activation_dropout, activation_fn: as in
            fairseq's ``TransformerEncoderLayer``.
    """

    def __init__(self, embed_dim: int, num_heads: int, ffn_embed_dim: int, previous_chunk: bool = True,
                 dropout: float = 0.1, attention_dropout: float = 0.0, activation_dropout: float = 0.0,
                 activation_fn: str = "gelu"):
        super().__init__()
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.head_dim = embed_dim // num_heads
        self.previous_chunk = previous_chunk
        self.attention_dropout = attention_dropout
        self.self_attn_layer_norm = LayerNorm(embed_dim)
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.k_proj = nn.Linear(embed_dim, embed_dim)
        self.v_proj = nn.Linear(embed_dim, embed_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim)
        self.rotary_dim = self.head_dim - self.head_dim % 2  # an odd head width keeps one channel as is
        self.rotary = RotaryPositionalEmbedding(self.rotary_dim)
        self.final_layer_norm = LayerNorm(embed_dim)
        self.fc1 = nn.Linear(embed_dim, ffn_embed_dim)
        self.fc2 = nn.Linear(ffn_embed_dim, embed_dim)
        self.activation_fn = utils.get_activation_fn(activation_fn)
        self.dropout_module = FairseqDropout(dropout, module_name=self.__class__.__name__)
        self.activation_dropout_module = FairseqDropout(activation_dropout, module_name=self.__class__.__name__)

    def _rotate(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        # x: (C, K, H, d); cos/sin: (C, 1, 1, rotary_dim)
        cos, sin = cos.to(device=x.device, dtype=x.dtype), sin.to(device=x.device, dtype=x.dtype)
        rot, rest = x[..., : self.rotary_dim], x[..., self.rotary_dim:]
        rot = rot * cos + rotate_half(rot) * sin
        return torch.cat([rot, rest], dim=-1) if rest.size(-1) else rot

    def forward(self, x: Tensor, key_padding_mask: Tensor, previous: Optional[Tensor] = None,
                has_previous: Optional[Tensor] = None) -> Tensor:
        """
        Args:
            x: ``(C, K, e)`` K chunks of C positions.
            key_padding_mask: ``(K, C)`` bool, True at padding (every chunk has
                at least its first position real).
            previous: ``(K,)`` long, index of each chunk's predecessor (any
                valid index where there is none); used when ``previous_chunk``.
            has_previous: ``(K,)`` bool, False for the first chunk of a document.
        Returns:
            ``(C, K, e)``.
        """
        chunk, num_chunks, _ = x.shape
        h, d = self.num_heads, self.head_dim
        hidden = self.self_attn_layer_norm(x)
        q = self.q_proj(hidden).view(chunk, num_chunks, h, d)
        k = self.k_proj(hidden).view(chunk, num_chunks, h, d)
        v = self.v_proj(hidden).view(chunk, num_chunks, h, d)
        allowed = ~key_padding_mask  # (K, C)
        use_previous = self.previous_chunk and previous is not None
        cos, sin = self.rotary(x, seq_len=2 * chunk)
        if use_previous:
            # window = [previous chunk (positions 0..C-1); own chunk (C..2C-1)]
            q = self._rotate(q, cos[chunk:2 * chunk], sin[chunk:2 * chunk])
            k_prev = self._rotate(k, cos[:chunk], sin[:chunk]).index_select(1, previous)
            k = torch.cat([k_prev, self._rotate(k, cos[chunk:2 * chunk], sin[chunk:2 * chunk])], dim=0)
            v = torch.cat([v.index_select(1, previous), v], dim=0)
            allowed_prev = allowed.index_select(0, previous) & has_previous[:, None]
            allowed = torch.cat([allowed_prev, allowed], dim=1)  # (K, 2C)
        else:
            q = self._rotate(q, cos[:chunk], sin[:chunk])
            k = self._rotate(k, cos[:chunk], sin[:chunk])
        attn = F.scaled_dot_product_attention(
            q.permute(1, 2, 0, 3), k.permute(1, 2, 0, 3), v.permute(1, 2, 0, 3),  # (K, H, ·, d)
            attn_mask=allowed[:, None, None, :],
            dropout_p=self.attention_dropout if self.training else 0.0,
        )  # (K, H, C, d)
        attn = self.out_proj(attn.permute(2, 0, 1, 3).reshape(chunk, num_chunks, self.embed_dim))
        x = x + self.dropout_module(attn)
        y = self.activation_fn(self.fc1(self.final_layer_norm(x)))
        y = self.fc2(self.activation_dropout_module(y))
        return x + self.dropout_module(y)


class InfiniteFormerSummarizerEncoder(FairseqEncoder):
    """Chunked encoder + continuous memory of the whole document (see the module docstring)."""

    def __init__(self, cfg: InfiniteFormerSummarizerConfig, dictionary, embed_tokens: nn.Embedding):
        super().__init__(dictionary)
        embed_dim = cfg.encoder_embed_dim
        self.embed_dim = embed_dim
        self.padding_idx = dictionary.pad()
        self.max_source_positions = cfg.max_source_positions
        self.chunk_length = cfg.encoder_chunk_length
        self.lead_window = cfg.lead_window
        self.ridge_penalty = cfg.ridge_penalty
        self.boundary_padding = not cfg.no_boundary_padding
        self.embed_tokens = embed_tokens
        self.embed_scale = 1.0 if cfg.no_scale_embedding else math.sqrt(embed_dim)
        self.dropout_module = FairseqDropout(cfg.dropout, module_name=self.__class__.__name__)
        self.layers = nn.ModuleList(
            ChunkEncoderLayer(embed_dim, cfg.encoder_attention_heads, cfg.encoder_ffn_embed_dim,
                              previous_chunk=not cfg.no_previous_chunk, dropout=cfg.dropout,
                              attention_dropout=cfg.attention_dropout, activation_dropout=cfg.activation_dropout,
                              activation_fn=cfg.activation_fn)
            for _ in range(cfg.encoder_layers))
        self.layer_norm = LayerNorm(embed_dim)
        # smoothing gate X̃ = X ⊙ sigmoid(Conv1d(X)), kernel 3 (paper §3.3)
        self.memory_gate = None if cfg.no_memory_gate else nn.Conv1d(embed_dim, embed_dim, kernel_size=3, padding=1)
        # float64 basis masters (not buffers: model.half() must not cast them)
        self._centers64, self._widths64 = rbf_basis(cfg.num_basis_functions, _parse_widths(cfg.basis_widths))

    def _chunks(self, src_tokens: Tensor):
        """Remove padding and cut every document into chunks, packed over the batch.

        Returns ``(packed (K, C), lengths (bsz,), chunk_valid (bsz, n_max),
        has_previous (K,))``: chunk j of document b is a row of ``packed``
        where ``chunk_valid[b, j]``, in document order.
        """
        check_not_empty(src_tokens, "the source")
        bsz = src_tokens.size(0)
        padding = src_tokens.eq(self.padding_idx)
        lengths = (~padding).sum(dim=1)
        if bool((lengths == 0).any()):
            raise ConfigError("a source has all positions padded; every document needs at least one token")
        # real tokens first, in their order (a stable sort of the padding flags)
        order = torch.sort(padding.to(torch.uint8), dim=1, stable=True).indices
        tokens = src_tokens.gather(1, order)
        chunk = self.chunk_length
        num_max = (int(lengths.max()) + chunk - 1) // chunk
        tokens = F.pad(tokens[:, : int(lengths.max())], (0, num_max * chunk - int(lengths.max())),
                       value=self.padding_idx)
        index = torch.arange(num_max, device=src_tokens.device)
        chunk_valid = index[None, :] < ((lengths + chunk - 1) // chunk)[:, None]  # (bsz, n_max)
        packed = tokens.view(bsz, num_max, chunk)[chunk_valid]  # (K, C)
        has_previous = (index[None, :] > 0).expand(bsz, -1)[chunk_valid]
        return packed, lengths, chunk_valid, has_previous

    def smooth(self, states: Tensor) -> Tensor:
        """The memory gate on ``(bsz, L, e)`` (zeros at padding) → float32 ``(bsz, L, e)``."""
        x = states.float()
        if self.memory_gate is None:
            return x
        with torch.autocast(device_type=x.device.type, enabled=False):
            xt = x.transpose(1, 2)  # (bsz, e, L)
            gate = F.conv1d(xt, self.memory_gate.weight.float(), self.memory_gate.bias.float(), padding=1)
            return (xt * torch.sigmoid(gate)).transpose(1, 2)

    def forward(self, src_tokens: Tensor, src_lengths: Optional[Tensor] = None, return_all_hiddens: bool = False,
                **unused):
        """
        Args:
            src_tokens: ``(bsz, S)`` token ids, left or right padded; any S.
            src_lengths: ignored (lengths are recomputed from the padding).
        Returns:
            dict (fairseq's list-of-tensors convention): ``encoder_out``
            ``[(W, bsz, e)]`` the lead window, ``encoder_padding_mask``
            ``[(bsz, W)]`` (both empty lists when W = 0),
            ``memory_coefficients`` ``[(bsz, N, e)]`` float32 (the paper's B),
            ``src_lengths`` ``[(bsz,)]`` real tokens per document, and empty
            ``encoder_embedding``, ``encoder_states``, ``src_tokens``. Nothing
            in it grows with the source length.
        Raises:
            ConfigError: an empty source, or a source of padding only.
        """
        packed, lengths, chunk_valid, has_previous = self._chunks(src_tokens)
        bsz, num_max = chunk_valid.shape
        chunk, num_chunks = self.chunk_length, packed.size(0)
        padding = packed.eq(self.padding_idx)  # (K, C)
        previous = (torch.arange(num_chunks, device=packed.device) - 1).clamp_min(0)
        x = self.dropout_module(self.embed_scale * self.embed_tokens(packed)).transpose(0, 1)  # (C, K, e)
        for layer in self.layers:
            x = layer(x, padding, previous, has_previous)
        x = self.layer_norm(x).masked_fill(padding.t()[..., None], 0.0)

        # back to documents: (bsz, n_max·C, e), zeros at padding
        slots = chunk_valid.reshape(-1).nonzero().squeeze(1)
        states = x.new_zeros(bsz * num_max, chunk, self.embed_dim).index_copy(0, slots, x.transpose(0, 1))
        states = states.view(bsz, num_max * chunk, self.embed_dim)
        max_len = int(lengths.max())
        coefficients = fit_sequences(self.smooth(states[:, :max_len]), lengths, self._centers64, self._widths64,
                                     self.ridge_penalty, self.boundary_padding)

        out = {
            "memory_coefficients": [coefficients],
            "encoder_out": [],
            "encoder_padding_mask": [],
            "encoder_embedding": [],
            "encoder_states": [],
            "src_tokens": [],
            "src_lengths": [lengths],
        }
        if self.lead_window > 0:
            window = self.lead_window
            lead = states[:, :window]
            if lead.size(1) < window:
                lead = F.pad(lead, (0, 0, 0, window - lead.size(1)))
            positions = torch.arange(window, device=lengths.device)
            out["encoder_out"] = [lead.transpose(0, 1)]  # (W, bsz, e)
            out["encoder_padding_mask"] = [positions[None, :] >= lengths[:, None]]  # (bsz, W)
        return out

    def reorder_encoder_out(self, encoder_out: Dict[str, List[Tensor]], new_order: Tensor):
        """Select batch entries ``new_order`` (beam expansion and reordering)."""
        def pick(key, dim):
            return [t.index_select(dim, new_order) for t in encoder_out.get(key, [])]

        return {
            "memory_coefficients": pick("memory_coefficients", 0),
            "encoder_out": pick("encoder_out", 1),
            "encoder_padding_mask": pick("encoder_padding_mask", 0),
            "encoder_embedding": pick("encoder_embedding", 0),
            "encoder_states": pick("encoder_states", 1),
            "src_tokens": pick("src_tokens", 0),
            "src_lengths": pick("src_lengths", 0),
        }

    def max_positions(self):
        """The task's ``--max-source-positions``: the model itself has no limit
        (chunked, relative positions) and never truncates."""
        return self.max_source_positions


# ---- decoder ------------------------------------------------------------------


class SummarizerDecoderLayer(nn.Module):
    """Pre-norm block: causal self-attention; continuous attention over B plus
    (optionally) attention over the lead window, summed; FFN."""

    def __init__(self, cfg: InfiniteFormerSummarizerConfig):
        super().__init__()
        embed_dim, heads = cfg.decoder_embed_dim, cfg.decoder_attention_heads
        self.self_attn = MultiheadAttention(embed_dim, heads, dropout=cfg.attention_dropout, self_attention=True)
        self.self_attn_layer_norm = LayerNorm(embed_dim)
        self.memory_attn = ContinuousCrossAttention(embed_dim, heads, cfg.encoder_embed_dim,
                                                    cfg.num_basis_functions, _parse_widths(cfg.basis_widths),
                                                    sigma2_min=cfg.sigma2_min)
        self.lead_attn = None
        if cfg.lead_window > 0:
            self.lead_attn = MultiheadAttention(embed_dim, heads, kdim=cfg.encoder_embed_dim,
                                                vdim=cfg.encoder_embed_dim, dropout=cfg.attention_dropout,
                                                encoder_decoder_attention=True)
        self.encoder_attn_layer_norm = LayerNorm(embed_dim)
        self.final_layer_norm = LayerNorm(embed_dim)
        self.fc1 = nn.Linear(embed_dim, cfg.decoder_ffn_embed_dim)
        self.fc2 = nn.Linear(cfg.decoder_ffn_embed_dim, embed_dim)
        self.activation_fn = utils.get_activation_fn(cfg.activation_fn)
        self.dropout_module = FairseqDropout(cfg.dropout, module_name=self.__class__.__name__)
        self.activation_dropout_module = FairseqDropout(cfg.activation_dropout, module_name=self.__class__.__name__)

    def forward(self, x: Tensor, coefficients: Tensor, lead: Optional[Tensor], lead_padding_mask: Optional[Tensor],
                self_attn_mask: Optional[Tensor], self_attn_padding_mask: Optional[Tensor],
                incremental_state=None) -> Tuple[Tensor, Tensor, Tensor]:
        """
        Args:
            x: ``(T, bsz, C)``; coefficients: ``(bsz, N, e)``; lead: ``(W, bsz, e)``;
            lead_padding_mask: ``(bsz, W)``; self_attn_mask: ``(T, T)`` float
            (``None`` when incremental).
        Returns:
            ``(x (T, bsz, C), mu, sigma2)``, the last two ``(bsz, H, T)``.
        """
        h = self.self_attn_layer_norm(x)
        h, _ = self.self_attn(query=h, key=h, value=h, key_padding_mask=self_attn_padding_mask,
                              incremental_state=incremental_state, need_weights=False, attn_mask=self_attn_mask)
        x = x + self.dropout_module(h)
        h = self.encoder_attn_layer_norm(x)
        y, mu, sigma2 = self.memory_attn(h, coefficients, incremental_state=incremental_state)
        if self.lead_attn is not None:
            z, _ = self.lead_attn(query=h, key=lead, value=lead, key_padding_mask=lead_padding_mask,
                                  incremental_state=incremental_state, static_kv=True, need_weights=False)
            y = y + z
        x = x + self.dropout_module(y)
        y = self.activation_fn(self.fc1(self.final_layer_norm(x)))
        y = self.fc2(self.activation_dropout_module(y))
        return x + self.dropout_module(y), mu, sigma2


class InfiniteFormerSummarizerDecoder(FairseqIncrementalDecoder):
    """Causal decoder reading the document memory (see the module docstring)."""

    def __init__(self, cfg: InfiniteFormerSummarizerConfig, dictionary, embed_tokens: nn.Embedding):
        super().__init__(dictionary)
        embed_dim = cfg.decoder_embed_dim
        self.padding_idx = dictionary.pad()
        self.max_target_positions = cfg.max_target_positions
        self.embed_tokens = embed_tokens
        self.embed_scale = 1.0 if cfg.no_scale_embedding else math.sqrt(embed_dim)
        self.embed_positions = PositionalEmbedding(cfg.max_target_positions, embed_dim, self.padding_idx,
                                                   learned=cfg.decoder_learned_pos)
        self.dropout_module = FairseqDropout(cfg.dropout, module_name=self.__class__.__name__)
        self.layers = nn.ModuleList(SummarizerDecoderLayer(cfg) for _ in range(cfg.decoder_layers))
        self.layer_norm = LayerNorm(embed_dim)
        self.output_projection = nn.Linear(embed_dim, len(dictionary), bias=False)
        if cfg.share_decoder_input_output_embed or cfg.share_all_embeddings:
            self.output_projection.weight = self.embed_tokens.weight
        else:
            nn.init.normal_(self.output_projection.weight, mean=0, std=embed_dim ** -0.5)

    def forward(self, prev_output_tokens: Tensor, encoder_out=None, incremental_state=None,
                features_only: bool = False, return_all_hiddens: bool = False, src_lengths=None, **unused):
        """
        Args:
            prev_output_tokens: ``(bsz, T)``; with ``incremental_state`` the
                whole prefix, of which only the last token is processed.
            encoder_out: the encoder's output dict.
        Returns:
            ``(logits (bsz, T, V), extra)`` with ``extra["ltm_stats"]`` a list,
            per layer, of ``(mu, sigma2, valid)`` (``(bsz, H, T)`` ×2, ``(bsz,)``
            bool) for ``--criterion infinite_former_kl``; ``extra["attn"]`` is
            ``[None]`` (no alignment to source positions).
        Raises:
            ConfigError: no encoder output, or an empty decoder input.
        """
        x, extra = self.extract_features(prev_output_tokens, encoder_out=encoder_out,
                                         incremental_state=incremental_state, return_all_hiddens=return_all_hiddens)
        if not features_only:
            x = self.output_projection(x)
        return x, extra

    def extract_features(self, prev_output_tokens, encoder_out=None, incremental_state=None,
                         return_all_hiddens: bool = False, **unused):
        check_not_empty(prev_output_tokens, "the decoder input")
        if encoder_out is None or not encoder_out.get("memory_coefficients"):
            raise ConfigError("the summarizer decoder needs the encoder output (encoder_out with "
                              "memory_coefficients)")
        coefficients = encoder_out["memory_coefficients"][0]
        lead = encoder_out["encoder_out"][0] if encoder_out.get("encoder_out") else None
        lead_mask = encoder_out["encoder_padding_mask"][0] if encoder_out.get("encoder_padding_mask") else None
        positions = self.embed_positions(prev_output_tokens, incremental_state=incremental_state)
        if incremental_state is not None:
            prev_output_tokens = prev_output_tokens[:, -1:]
            positions = positions[:, -1:]
        x = self.embed_scale * self.embed_tokens(prev_output_tokens) + positions
        x = self.dropout_module(x).transpose(0, 1)  # (T, bsz, C)
        tgt_len, bsz = x.size(0), x.size(1)
        padding_mask = prev_output_tokens.eq(self.padding_idx)
        if not padding_mask.any():
            padding_mask = None
        self_attn_mask = None
        if incremental_state is None:
            self_attn_mask = torch.triu(utils.fill_with_neg_inf(x.new_zeros(tgt_len, tgt_len)), 1)
        valid = torch.ones(bsz, dtype=torch.bool, device=x.device)
        ltm_stats: List[Tuple[Tensor, Tensor, Tensor]] = []
        inner_states: List[Tensor] = [x]
        for layer in self.layers:
            x, mu, sigma2 = layer(x, coefficients, lead, lead_mask, self_attn_mask, padding_mask,
                                  incremental_state=incremental_state)
            ltm_stats.append((mu, sigma2, valid))
            if return_all_hiddens:
                inner_states.append(x)
        x = self.layer_norm(x).transpose(0, 1)
        return x, {"attn": [None], "inner_states": inner_states, "ltm_stats": ltm_stats}

    def output_layer(self, features, **kwargs):
        return self.output_projection(features)

    def max_positions(self):
        return self.max_target_positions


# ---- model ----------------------------------------------------------------------


def _embedding(dictionary, dim: int) -> nn.Embedding:
    emb = nn.Embedding(len(dictionary), dim, dictionary.pad())
    nn.init.normal_(emb.weight, mean=0, std=dim ** -0.5)
    nn.init.constant_(emb.weight[dictionary.pad()], 0)
    return emb


@register_model("infinite_former_summarizer", dataclass=InfiniteFormerSummarizerConfig)
class InfiniteFormerSummarizerModel(DictionaryCheckMixin, FairseqEncoderDecoderModel):
    """Long-document summarizer on the ∞-former memory (see the module docstring)."""

    @classmethod
    def build_model(cls, cfg: InfiniteFormerSummarizerConfig, task):
        validate_config(cfg)
        src_dict, tgt_dict = task.source_dictionary, task.target_dictionary
        encoder_embed = _embedding(src_dict, cfg.encoder_embed_dim)
        if cfg.share_all_embeddings:
            if src_dict != tgt_dict:
                raise ConfigError("--share-all-embeddings needs one joined dictionary for source and target "
                                  "(fairseq-preprocess --joined-dictionary)")
            decoder_embed = encoder_embed
        else:
            decoder_embed = _embedding(tgt_dict, cfg.decoder_embed_dim)
        encoder = InfiniteFormerSummarizerEncoder(cfg, src_dict, encoder_embed)
        decoder = InfiniteFormerSummarizerDecoder(cfg, tgt_dict, decoder_embed)
        model = cls(encoder, decoder)
        model.remember_dictionaries(src_dict, tgt_dict)
        return model


# ---- named architectures ----------------------------------------------------
# ``--arch infinite_former_summarizer`` is the tiny default of the config
# (2+2 blocks, width 128, 4 heads, FFN 512, N = 256, C = W = 256).


@register_model_architecture("infinite_former_summarizer", "infinite_former_summarizer_base")
def infinite_former_summarizer_base(args):
    """6+6 blocks, width 512, 8 heads, FFN 2048 (transformer-base sized), N = 512 (paper)."""
    set_arch_defaults(args, encoder_layers=6, encoder_embed_dim=512, encoder_attention_heads=8,
                      encoder_ffn_embed_dim=2048, decoder_layers=6, decoder_embed_dim=512, decoder_attention_heads=8,
                      decoder_ffn_embed_dim=2048, num_basis_functions=512)
