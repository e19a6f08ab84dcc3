"""Fastformer additive attention (Wu, Wu, Qi, Huang & Xie, "Fastformer: Additive
Attention Can Be All You Need", arXiv 2108.09084, 2021), bidirectional and causal.

Shapes are time-first like fairseq: ``x`` is ``(T, B, C)`` = (positions, batch,
width); ``H`` heads of width ``d = C / H``; ``padding_mask`` is ``(B, T)``,
True at padding. Per head, with projections q_i, k_i, v_i of x_i (§3.2):

* Eq. (1)-(2), global query: α_i = softmax_i(w_qᵀ q_i / √d), q = Σ_i α_i q_i;
* Eq. (3), p_i = q ⊙ k_i;
* Eq. (4)-(5), global key: β_i = softmax_i(w_kᵀ p_i / √d), k = Σ_i β_i p_i;
* Eq. (6), u_i = k ⊙ v_i, then r_i = W_r u_i and output_i = r_i + q_i (query
  residual); heads concatenated, then the output projection W_o.

Each head's score uses its own slice (``w_q``, ``w_k`` are ``(H, d)``). W_r
acts on the concatenated heads (the authors' code; a per-head W_r is its
block-diagonal special case). Options: ``query_value_sharing`` (no value
projection: u_i = k ⊙ q_i, §3.3), ``scale_scores`` (the 1/√d; off: raw dot
products). Layer-wise sharing (§3.3) is done by the host model, which calls
one module from several layers with a different ``slot`` each.

Causal form (``causal=True``): position t pools only positions i ≤ t, i.e. the
softmaxes run over the prefix: q_t = Σ_{i≤t} e^{a_i} q_i / Σ_{i≤t} e^{a_i},
p_i = q_i ⊙ k_i with the prefix's own global query, and the same for the
global key. Computed in O(T·d) (for a fixed chunk size) by
:func:`~fairseq_plugins.modules.ops.prefix_pool.prefix_softmax_pool`: chunks of ``chunk_size`` positions are pooled
exactly with a masked c×c weight matrix whose exponents are taken relative to
the running (prefix) maximum, so every exponent is ≤ 0 and the largest term is
exactly 1 (no overflow, no 0/0, any logit size); a carry of (running max,
Σe^{a−max}, Σe^{a−max}·value) links the chunks. Scores, exponentials and
sums are fp32 even for fp16 inputs or under autocast.

Incremental decoding (causal only): the same carry is the whole state, per
layer slot and per sequence ``4·H + 2·C`` numbers (running max and
denominator per head for the query and the key pools, and the two
width-C weighted sums), independent of the number of steps.

Padding: padded positions get zero weight (score −inf). A sequence whose
positions are all padding, or an empty sequence, raises :class:`ConfigError`
(one line). In the causal form, a non-padded position always has itself in
its prefix; a padded position preceded only by padding gets a zero global
vector.

:func:`build_fastformer_blocks` builds the Fastformer models' blocks (additive attention +
FFN, optional cross-attention, layer-wise sharing) for ``fastformer_lm`` and ``fastformer``.
"""

from typing import Dict, Optional

import torch
from fairseq.incremental_decoding_utils import with_incremental_state
from torch import Tensor, nn

from fairseq_plugins.config import check_heads
from fairseq_plugins.errors import ConfigError
from fairseq_plugins.modules.attention.contract import AttentionDeclarations, AttentionOutput
from fairseq_plugins.modules.block import FeedForward, PreNormBlock, build_blocks
from fairseq_plugins.modules.ops.prefix_pool import empty_carry, prefix_softmax_pool, softmax_pool

_STATE_KEY = "additive_attention_state"
_STATE_NAMES = ("q_max", "q_sum", "q_acc", "k_max", "k_sum", "k_acc")



@with_incremental_state
class AdditiveAttention(AttentionDeclarations, nn.Module):
    """Multi-head Fastformer additive attention (see the module docstring).

    Args:
        embed_dim: width C.
        num_heads: heads H; must divide C (else :class:`ConfigError`).
        causal: prefix (decoder) form instead of the paper's bidirectional one.
        query_value_sharing: no value projection, u_i = k ⊙ q_i.
        scale_scores: divide the scores by √d (the paper); False: no scaling.
        bias: biases of the projections.
        chunk_size: positions per chunk of the causal computation.

    Parameters: ``5·C² + 7·C`` (``4·C² + 6·C`` with query–value sharing):
    W_q, W_k, (W_v), W_r, W_o with biases, and the score vectors w_q, w_k
    (``(H, d)`` each, no bias: it would cancel in the softmax).
    """

    def __init__(self, embed_dim: int, num_heads: int, causal: bool = False, query_value_sharing: bool = False,
                 scale_scores: bool = True, bias: bool = True, chunk_size: int = 64):
        super().__init__()
        check_heads(embed_dim, num_heads)
        if chunk_size <= 0:
            raise ConfigError(f"chunk_size must be positive, got {chunk_size}")
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.head_dim = embed_dim // num_heads
        self.causal = causal
        self.query_value_sharing = query_value_sharing
        self.scaling = self.head_dim ** -0.5 if scale_scores else 1.0
        self.chunk_size = chunk_size
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.k_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.v_proj = None if query_value_sharing else nn.Linear(embed_dim, embed_dim, bias=bias)
        self.w_q = nn.Parameter(torch.empty(num_heads, self.head_dim))
        self.w_k = nn.Parameter(torch.empty(num_heads, self.head_dim))
        self.r_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.reset_parameters()

    def reset_parameters(self):
        for proj in (self.q_proj, self.k_proj, self.v_proj, self.r_proj, self.out_proj):
            if proj is not None:
                nn.init.xavier_uniform_(proj.weight)
                if proj.bias is not None:
                    nn.init.zeros_(proj.bias)
        nn.init.normal_(self.w_q, std=self.head_dim ** -0.5)
        nn.init.normal_(self.w_k, std=self.head_dim ** -0.5)

    # ---- helpers ------------------------------------------------------------

    def _heads(self, x: Tensor) -> Tensor:
        """``(T, B, C)`` → ``(B, H, T, d)`` fp32."""
        length, bsz, _ = x.shape
        return x.float().view(length, bsz, self.num_heads, self.head_dim).permute(1, 2, 0, 3)

    def _scores(self, x: Tensor, w: Tensor, pad: Optional[Tensor]) -> Tensor:
        """``(B, H, T, d)`` → per-head scores ``(B, H, T)``, −inf at padding."""
        scores = torch.einsum("bhtd,hd->bht", x, w.float()) * self.scaling
        if pad is not None:
            scores = scores.masked_fill(pad.unsqueeze(1), float("-inf"))
        return scores

    def _get_state(self, incremental_state, slot: str) -> Optional[Dict[str, Optional[Tensor]]]:
        saved = self.get_incremental_state(incremental_state, _STATE_KEY)
        if saved is None or slot + _STATE_NAMES[0] not in saved:
            return None
        return saved

    # ---- forward --------------------------------------------------------------

    def empty_state(self, bsz: int, device) -> None:
        """Additive attention carries nothing from one segment to the next (``None``)."""
        return None

    def forward(self, x: Tensor, *, padding_mask: Optional[Tensor] = None,
                incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
                slot: str = "", **unused) -> AttentionOutput:
        """The attention contract of :mod:`fairseq_plugins.modules.attention.contract`.

        Args:
            x: ``(T, B, C)``; with ``incremental_state``, only the new positions
                (usually T = 1).
            padding_mask: ``(B, T)`` bool, True at padding (optional).
            incremental_state: fairseq's generation state (causal form only);
                the carry of the earlier positions is read from and written to it.
            slot: name prefix of this call's carry in the state, so that
                one module shared by several layers keeps one carry per layer.
        Returns:
            :class:`AttentionOutput`: ``out`` ``(T, B, C)`` in ``x``'s dtype and
            ``query`` (the projections q_i, which a long-term memory can read with).
        Raises:
            ConfigError: empty sequence, all positions of a sequence padded
                (causal form: of every sequence of the batch), width not C, or
                incremental state with the bidirectional form.
        """
        length, bsz, width = x.shape
        if width != self.embed_dim:
            raise ConfigError(f"additive attention expects width {self.embed_dim}, got {width}")
        if length == 0:
            raise ConfigError("additive attention got an empty sequence (0 positions); give at least one token")
        if incremental_state is not None and not self.causal:
            raise ConfigError("incremental decoding needs the causal form of additive attention (causal=True)")
        pad = None
        state_slot = slot
        if padding_mask is not None:
            pad = padding_mask.to(device=x.device, dtype=torch.bool)
            if pad.shape != (bsz, length):
                raise ConfigError(f"padding_mask must be (batch, time) = {(bsz, length)}, got {tuple(pad.shape)}")
            if not pad.any():
                pad = None
            elif incremental_state is None:
                empty = pad.all(dim=1)
                # causal: a fully padded row is harmless (its outputs are zeros) — the streaming
                # task's last batch can hold one; bidirectional: it has no softmax to take
                if bool(empty.all()) or (not self.causal and bool(empty.any())):
                    raise ConfigError("additive attention: all positions padded in a sequence; "
                                      "remove empty sequences from the batch")

        q = self.q_proj(x)
        k = self.k_proj(x)
        v = q if self.v_proj is None else self.v_proj(x)
        with torch.autocast(device_type=x.device.type, enabled=False):
            qh, kh, vh = self._heads(q), self._heads(k), self._heads(v)  # (B,H,T,d) fp32
            a = self._scores(qh, self.w_q, pad)  # Eq. (1) logits
            if self.causal:
                hd = (bsz, self.num_heads, self.head_dim)
                saved = self._get_state(incremental_state, state_slot) if incremental_state is not None else None
                if saved is None:
                    carry_q = empty_carry(*hd, device=x.device)
                    carry_k = empty_carry(*hd, device=x.device)
                else:
                    carry_q = tuple(saved[state_slot + n] for n in _STATE_NAMES[:3])
                    carry_k = tuple(saved[state_slot + n] for n in _STATE_NAMES[3:])
                global_q, carry_q = prefix_softmax_pool(a, qh, carry_q, self.chunk_size)  # (B,H,T,d)
                p = global_q * kh  # Eq. (3), each prefix with its own global query
                global_k, carry_k = prefix_softmax_pool(self._scores(p, self.w_k, pad), p, carry_k, self.chunk_size)
                if incremental_state is not None:
                    saved = self.get_incremental_state(incremental_state, _STATE_KEY) or {}
                    for name, value in zip(_STATE_NAMES, carry_q + carry_k):
                        saved[state_slot + name] = value
                    self.set_incremental_state(incremental_state, _STATE_KEY, saved)
            else:
                global_q = softmax_pool(a, qh)  # Eq. (2), (B,H,1,d)
                p = global_q * kh  # Eq. (3)
                global_k = softmax_pool(self._scores(p, self.w_k, pad), p)  # Eq. (4)-(5)
            u = global_k * vh  # Eq. (6), (B,H,T,d)
            u = u.permute(2, 0, 1, 3).reshape(length, bsz, width).to(x.dtype)
        out = self.r_proj(u) + q  # r_i = W_r u_i, plus the query residual
        return AttentionOutput(self.out_proj(out), query=q)

    def reorder_incremental_state(self, incremental_state: Dict[str, Dict[str, Optional[Tensor]]],
                                  new_order: Tensor):
        """Select the carries of the surviving beams (every layer slot of this module)."""
        saved = self.get_incremental_state(incremental_state, _STATE_KEY)
        if saved is not None:
            for name, value in saved.items():
                if value is not None:
                    saved[name] = value.index_select(0, new_order.to(value.device))
            incremental_state = self.set_incremental_state(incremental_state, _STATE_KEY, saved)
        return incremental_state


def build_fastformer_blocks(cfg, num_layers: int, share: str, causal: bool, query_value_sharing: bool,
                            embed_dim: int, heads: int, ffn_dim: int, make_cross=None) -> nn.ModuleList:
    """Blocks of additive attention + FFN (+ ``make_cross()`` cross-attention), with
    layer-wise sharing (docs/fastformer.md); parameters in the order attention, FFN,
    cross-attention."""
    def make_attention():
        return AdditiveAttention(embed_dim, heads, causal=causal, query_value_sharing=query_value_sharing,
                                 scale_scores=not cfg.no_score_scaling, chunk_size=cfg.attention_chunk_size)

    def make_block(attention):
        ffn = FeedForward(embed_dim, ffn_dim, cfg.activation_fn, cfg.activation_dropout)
        cross = make_cross() if make_cross is not None else None
        return PreNormBlock(embed_dim, attention, ffn, cross_attention=cross, dropout=cfg.dropout)

    return build_blocks(num_layers, share, make_attention, make_block)
