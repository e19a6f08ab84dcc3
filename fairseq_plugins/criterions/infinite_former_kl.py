"""``infinite_former_kl``: token cross-entropy + λ_KL · KL on the ∞-former's
attention variances (Martins et al., ACL 2022, §3.4; the criterion layout
follows fairseq's ``examples/adaptive_span``: cross-entropy plus the model's
auxiliary term).

    loss = Σ_tokens NLL + λ_KL · sample_size · Σ_layers mean_{batch, head, query} KL(N(μ, σ²) ‖ N(μ, σ₀²))

so that, per token, the objective is the paper's NLL + λ_KL Σ_layers KL. The
logged ``nll_loss`` and perplexity exclude the KL; ``kl`` is logged on its
own (per segment-read, summed over layers). The model returns its reads'
:class:`~fairseq_plugins.modules.continuous_attention.ReadStats` in
``extra["ltm_stats"]``; models that return none (the memory-off twin, any other
fairseq LM) get KL = 0.
"""

import math
from dataclasses import dataclass, field

from fairseq import metrics, utils
from fairseq.criterions import register_criterion
from fairseq.criterions.cross_entropy import CrossEntropyCriterion, CrossEntropyCriterionConfig

from fairseq_plugins.errors import ConfigError
from fairseq_plugins.modules.continuous_attention import total_kl


@dataclass
class InfiniteFormerKLConfig(CrossEntropyCriterionConfig):
    kl_weight: float = field(default=1e-6, metadata={"help": "λ_KL, weight of the variance KL term (paper: 1e-6)"})
    kl_sigma0: float = field(default=0.05, metadata={"help": "σ₀, standard deviation of the KL's reference Gaussian"})


@register_criterion("infinite_former_kl", dataclass=InfiniteFormerKLConfig)
class InfiniteFormerKLCriterion(CrossEntropyCriterion):
    def __init__(self, task, sentence_avg, kl_weight=1e-6, kl_sigma0=0.05):
        super().__init__(task, sentence_avg)
        if kl_weight < 0:
            raise ConfigError(f"--kl-weight must be >= 0, got {kl_weight}")
        if kl_sigma0 <= 0:
            raise ConfigError(f"--kl-sigma0 must be positive, got {kl_sigma0}")
        self.kl_weight = kl_weight
        self.kl_sigma0 = kl_sigma0

    def forward(self, model, sample, reduce=True):
        net_output = model(**sample["net_input"])
        nll, _ = self.compute_loss(model, net_output, sample, reduce=reduce)
        sample_size = sample["target"].size(0) if self.sentence_avg else sample["ntokens"]
        stats = net_output[1].get("ltm_stats", []) if isinstance(net_output[1], dict) else []
        kl = total_kl(stats, self.kl_sigma0).to(nll.device)
        loss = nll + self.kl_weight * sample_size * kl
        logging_output = {
            "loss": loss.data,
            "nll_loss": nll.data,
            "kl": kl.data * sample_size,
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
        ntokens = sum(log.get("ntokens", 0) for log in logging_outputs)
        sample_size = sum(log.get("sample_size", 0) for log in logging_outputs)
        # base 2, as fairseq's cross_entropy
        metrics.log_scalar("loss", loss_sum / sample_size / math.log(2), sample_size, round=3)
        metrics.log_scalar("nll_loss", nll_sum / ntokens / math.log(2), ntokens, round=3)
        metrics.log_scalar("kl", kl_sum / sample_size, sample_size, round=4)
        metrics.log_derived("ppl", lambda meters: utils.get_perplexity(meters["nll_loss"].avg))

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True
