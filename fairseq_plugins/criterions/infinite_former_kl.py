"""``infinite_former_kl``: token cross-entropy + λ_KL · KL on the ∞-former's
attention variances (Martins et al., ACL 2022, §3.4; the criterion layout
follows fairseq's ``examples/adaptive_span``: cross-entropy plus the model's
auxiliary term).

    loss = Σ_tokens NLL + λ_KL · sample_size · Σ_layers mean_{batch, head, query} KL(N(μ, σ²) ‖ N(μ, σ₀²))

so that, per token, the objective is the paper's NLL + λ_KL Σ_layers KL. The
logged ``nll_loss`` and perplexity exclude the KL; ``kl`` is logged on its
own (per segment-read, summed over layers). The model returns its reads'
:class:`~fairseq_plugins.modules.continuous.read.ReadStats` in
``extra["ltm_stats"]``; models that return none (the memory-off twin, any other
fairseq LM) get KL = 0.

A memory's auxiliary loss (``extra["memory_losses"]``: the Compressive Transformer's
attention-reconstruction loss, Rae et al. 2020 §3.2, which trains only its compression) is
added the same way, ``λ_mem · sample_size · Σ losses`` (``--memory-loss-weight``), and logged
as ``memory_loss``.

``--loss-after-symbol SYMBOL`` scores only the targets after SYMBOL in their line
(:mod:`~fairseq_plugins.criterions.loss_mask`; the sorting task's answer after ``sep``,
docs/results/sorting.md): the NLL sums over those targets only, ``sample_size`` and the logged
``ntokens`` count them only (so the logged ``nll_loss``/``ppl`` are per answer token), and
the KL term is the same per counted token: λ_KL · sample_size · KL.
"""

import math
from dataclasses import dataclass, field
from typing import Optional

import torch
from fairseq import metrics, utils
from fairseq.criterions import register_criterion
from fairseq.criterions.cross_entropy import CrossEntropyCriterion, CrossEntropyCriterionConfig

from fairseq_plugins.criterions.loss_mask import after_symbol_mask
from fairseq_plugins.errors import ConfigError
from fairseq_plugins.modules.continuous.read import total_kl


@dataclass
class InfiniteFormerKLConfig(CrossEntropyCriterionConfig):
    kl_weight: float = field(default=1e-6, metadata={"help": "λ_KL, weight of the variance KL term (paper: 1e-6)"})
    kl_sigma0: float = field(default=0.05, metadata={"help": "σ₀, standard deviation of the KL's reference Gaussian"})
    memory_loss_weight: float = field(
        default=1.0, metadata={"help": "λ_mem, weight of a memory's auxiliary loss (the compressive memory's "
                                       "attention-reconstruction loss, which trains only its compression; 0: off)"})
    loss_after_symbol: Optional[str] = field(
        default=None, metadata={"help": "score only the targets after this dictionary symbol in their line (the "
                                        "end-of-sentence token excluded), e.g. 'sep' for the sorting task's answer; "
                                        "the logged loss, nll_loss and ppl then cover those targets only"})


@register_criterion("infinite_former_kl", dataclass=InfiniteFormerKLConfig)
class InfiniteFormerKLCriterion(CrossEntropyCriterion):
    def __init__(self, task, sentence_avg, kl_weight=1e-6, kl_sigma0=0.05, loss_after_symbol=None,
                 memory_loss_weight=1.0):
        super().__init__(task, sentence_avg)
        if kl_weight < 0:
            raise ConfigError(f"--kl-weight must be >= 0, got {kl_weight}")
        if kl_sigma0 <= 0:
            raise ConfigError(f"--kl-sigma0 must be positive, got {kl_sigma0}")
        if memory_loss_weight < 0:
            raise ConfigError(f"--memory-loss-weight must be >= 0, got {memory_loss_weight}")
        self.kl_weight = kl_weight
        self.memory_loss_weight = memory_loss_weight
        self.kl_sigma0 = kl_sigma0
        # (dictionary index of the marker, of </s>) or None: every target counts
        self.loss_after: Optional[tuple] = None
        if loss_after_symbol is not None:
            dictionary = task.target_dictionary
            index = dictionary.index(loss_after_symbol)
            if index == dictionary.unk() and loss_after_symbol != dictionary.unk_word:
                raise ConfigError(f"--loss-after-symbol '{loss_after_symbol}' is not in the dictionary; "
                                  f"pass one of its symbols (the sorting task's separator is 'sep')")
            self.loss_after = (index, dictionary.eos())

    def scored_sample(self, sample):
        """``sample`` with the targets that do not count replaced by padding (which the
        cross-entropy ignores) and ``ntokens`` = the targets that count; unchanged without
        ``--loss-after-symbol``."""
        if self.loss_after is None:
            return sample
        symbol, eos = self.loss_after
        target = sample["target"]
        keep = after_symbol_mask(sample["net_input"]["src_tokens"], target, symbol, eos, self.padding_idx)
        return {**sample, "target": target.masked_fill(~keep, self.padding_idx), "ntokens": int(keep.sum())}

    def forward(self, model, sample, reduce=True):
        net_output = model(**sample["net_input"])
        sample = self.scored_sample(sample)
        nll, _ = self.compute_loss(model, net_output, sample, reduce=reduce)
        sample_size = sample["target"].size(0) if self.sentence_avg else sample["ntokens"]
        extra = net_output[1] if isinstance(net_output[1], dict) else {}
        kl = total_kl(extra.get("ltm_stats", []), self.kl_sigma0).to(nll.device)
        memory_loss = sum(extra.get("memory_losses", []), torch.zeros((), device=nll.device))
        loss = nll + self.kl_weight * sample_size * kl + self.memory_loss_weight * sample_size * memory_loss
        logging_output = {
            "loss": loss.data,
            "nll_loss": nll.data,
            "kl": kl.data * sample_size,
            "memory_loss": memory_loss.data * sample_size,
            "ntokens": sample["ntokens"],
            "nsentences": sample["target"].size(0),
            "sample_size": sample_size,
        }
        return loss, sample_size, logging_output

    @staticmethod
    def reduce_metrics(logging_outputs) -> None:
        loss_sum = sum(log.get("loss", 0) for log in logging_outputs)
        nll_sum = sum(log.get("nll_loss", 0) for log in logging_outputs)
        kl_sum = sum(log.get("kl", 0) for log in logging_outputs)
        memory_loss_sum = sum(log.get("memory_loss", 0) for log in logging_outputs)
        ntokens = sum(log.get("ntokens", 0) for log in logging_outputs)
        sample_size = sum(log.get("sample_size", 0) for log in logging_outputs)
        # base 2, as fairseq's cross_entropy; with --loss-after-symbol a batch may hold no scored
        # target (sample_size 0): it then logs with weight 0
        metrics.log_scalar("loss", loss_sum / (sample_size or 1) / math.log(2), sample_size, round=3)
        metrics.log_scalar("nll_loss", nll_sum / (ntokens or 1) / math.log(2), ntokens, round=3)
        metrics.log_scalar("kl", kl_sum / (sample_size or 1), sample_size, round=4)
        metrics.log_scalar("memory_loss", memory_loss_sum / (sample_size or 1), sample_size, round=4)
        metrics.log_derived("ppl", lambda meters: utils.get_perplexity(meters["nll_loss"].avg))

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True
