"""Option groups and checks shared by the plugin's models.

fairseq builds each model's command-line options from its dataclass; the
groups here are dataclass bases that a model's config inherits, so that an
option means the same thing (and is checked the same way) in every model.
A config lists its bases from the most specific to the most general: dataclass
fields come in reverse order of the bases, so sizes are listed first.
The checks raise :class:`~fairseq_plugins.errors.ConfigError` with one line
naming the option, before anything is allocated.
"""

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence

from fairseq import utils
from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from fairseq.models import register_model_architecture
from fairseq.utils import safe_getattr
from torch import Tensor

from fairseq_plugins.errors import ConfigError

SHARE_CHOICES = ChoiceEnum(["none", "attention", "all"])
# the --memory-read choices: where each query's Gaussian goes (:mod:`fairseq_plugins.modules.continuous.read`)
READS = ("location", "content", "mixture")


@dataclass
class BlockConfig(FairseqDataclass):
    """Dropouts and activation of the pre-norm blocks (as in fairseq's transformer)."""

    activation_fn: ChoiceEnum(utils.get_available_activation_fns()) = field(
        default="gelu", metadata={"help": "activation function in the feed-forward blocks"})
    dropout: float = field(default=0.1, metadata={"help": "dropout probability"})
    activation_dropout: float = field(default=0.0, metadata={"help": "dropout after the FFN activation"})
    no_scale_embedding: bool = field(default=False, metadata={"help": "do not scale embeddings by sqrt(width)"})


@dataclass
class AttentionDropoutConfig(FairseqDataclass):
    attention_dropout: float = field(default=0.0, metadata={"help": "dropout on attention weights"})


@dataclass
class AdditiveAttentionConfig(FairseqDataclass):
    """Options of Fastformer's additive attention (docs/design/fastformer.md)."""

    no_score_scaling: bool = field(
        default=False, metadata={"help": "do not divide the additive-attention scores by sqrt(head width)"})
    attention_chunk_size: int = field(
        default=16, metadata={"help": "positions per chunk of the causal prefix computation (memory vs speed; 16 "
                                      "measured fastest on a CPU, docs/benchmark.md)"})


@dataclass
class DecoderSizeConfig(FairseqDataclass):
    decoder_embed_dim: int = field(default=128, metadata={"help": "decoder width"})
    decoder_ffn_embed_dim: int = field(default=512, metadata={"help": "decoder feed-forward width"})
    decoder_layers: int = field(default=2, metadata={"help": "decoder blocks"})
    decoder_attention_heads: int = field(default=4, metadata={"help": "decoder heads (must divide the width)"})
    share_decoder_input_output_embed: bool = field(
        default=False, metadata={"help": "tie the decoder input embedding and the output projection"})


@dataclass
class EncoderSizeConfig(FairseqDataclass):
    encoder_embed_dim: int = field(default=128, metadata={"help": "encoder width"})
    encoder_ffn_embed_dim: int = field(default=512, metadata={"help": "encoder feed-forward width"})
    encoder_layers: int = field(default=2, metadata={"help": "encoder blocks"})
    encoder_attention_heads: int = field(default=4, metadata={"help": "encoder heads (must divide the width)"})


@dataclass
class EncoderDecoderConfig(AttentionDropoutConfig, BlockConfig, DecoderSizeConfig, EncoderSizeConfig):
    share_all_embeddings: bool = field(
        default=False, metadata={"help": "one embedding for source, target and output (joined dictionary)"})


@dataclass
class ContinuousMemoryConfig(FairseqDataclass):
    """The continuous memory's basis and fit (docs/design/infinite-former.md §1-§2)."""

    num_basis_functions: int = field(
        default=512, metadata={"help": "N Gaussian basis functions of the continuous memory (paper: 512)"})
    basis_widths: str = field(
        default="0.005,0.01", metadata={"help": "comma-separated basis widths; each centre gets every width "
                                                "(paper, language modelling: 0.005,0.01)"})
    ridge_penalty: float = field(default=0.5, metadata={"help": "ridge regression penalty λ (paper LM: 0.5)"})
    sigma2_min: float = field(default=1e-4, metadata={"help": "lower clamp of the attention variance σ²"})
    no_boundary_padding: bool = field(
        default=False, metadata={"help": "ridge fit without the zero padding on both sides of [0,1]"})
    memory_read: ChoiceEnum(READS) = field(
        default="location", metadata={"help": "where each query reads the memory: 'location' (the paper's: a "
                                              "Gaussian at mu = sigmoid(w_mu . s)); beyond the paper, addressed by "
                                              "a softmax p over the N basis scores: 'content' (a Gaussian at the "
                                              "mean of the basis centres under p, sigma^2 their spread) or "
                                              "'mixture' (the mixture of the basis functions' Gaussians weighted "
                                              "by p); docs/infinite-former.md"})


# the --ltm-input choices (a block also takes "residual", GPT-2's fixed setting: modules/block.py)
LTM_INPUTS = ("segment", "evicted")


@dataclass
class LongTermMemoryConfig(ContinuousMemoryConfig):
    """The LM memory's update (docs/design/infinite-former.md §3-§4)."""

    no_long_term_memory: bool = field(
        default=False, metadata={"help": "switch the continuous long-term memory off (Transformer-XL-style twin)"})
    no_sticky_memories: bool = field(
        default=False, metadata={"help": "sample the old memory uniformly instead of where attention went"})
    tau: float = field(default=0.5, metadata={"help": "τ in (0,1): share of [0,1] kept for the old memory "
                                                      "at each update (paper LM: 0.5)"})
    num_samples: int = field(default=512, metadata={"help": "M samples of the old signal per update (paper: 512)"})
    sticky_bins: int = field(default=128, metadata={"help": "D histogram bins of sticky memories (paper: 128)"})
    memory_wiped: bool = field(
        default=False, metadata={"help": "evaluation control: empty the long-term memory before every read (the "
                                         "short-term memory is kept), so that the read adds nothing; a checkpoint "
                                         "scored with and without it measures what its memory contributes "
                                         "(docs/analysis.md); the parameters are unchanged"})
    ltm_input: ChoiceEnum(LTM_INPUTS) = field(
        default="segment", metadata={"help": "what enters the long-term memory after each segment: 'segment' "
                                             "(the segment just read, which also enters the short-term memory) "
                                             "or 'evicted' (what leaves the short-term memory, as the paper's "
                                             "code: with --mem-len = segment length the segment before)"})


# the --memory-type choices: the long-term memory beside each block's attention
MEMORY_TYPES = ("continuous", "compressive")
# the --compression choices of the compressive memory
COMPRESSIONS = ("conv", "mean")


@dataclass
class CompressiveMemoryConfig(FairseqDataclass):
    """The Compressive Transformer's compressed memory (Rae et al., ICLR 2020, §3;
    docs/design/architecture.md, "Memory"), chosen with ``--memory-type compressive``."""

    memory_type: ChoiceEnum(MEMORY_TYPES) = field(
        default="continuous", metadata={"help": "the long-term memory beside each block's attention: 'continuous' "
                                                "(the ∞-former's) or 'compressive' (the Compressive Transformer's "
                                                "compressed memory, attended in the attention's softmax; it takes "
                                                "--ltm-input evicted)"})
    compressed_memory_slots: Optional[int] = field(
        default=None, metadata={"help": "n_cm, compressed-memory slots per layer (default: --num-basis-functions, "
                                        "so that both long-term memories hold as many vectors of width e per layer)"})
    compression_rate: int = field(
        default=4, metadata={"help": "c, short-term-memory states pooled into one compressed slot (kernel and stride "
                                     "of the compression); must divide the segment length (paper: single digits)"})
    compression: ChoiceEnum(COMPRESSIONS) = field(
        default="conv", metadata={"help": "the compression: 'conv' (1D convolution, trained by the "
                                          "attention-reconstruction loss; the paper's best) or 'mean' (mean pooling, "
                                          "no parameters)"})


def parse_widths(spec: str) -> List[float]:
    """``"0.005,0.01"`` → ``[0.005, 0.01]``.

    Raises:
        ConfigError: not comma-separated numbers.
    """
    try:
        return [float(w) for w in str(spec).split(",") if w.strip()]
    except ValueError:
        raise ConfigError(f"--basis-widths must be comma-separated numbers, got {spec!r}") from None


def check_heads(embed_dim: int, num_heads: int, what: str = "--decoder") -> None:
    """Raises ConfigError unless ``num_heads`` is positive and divides ``embed_dim``.

    ``what`` is the option prefix named in the message (``--decoder``, ``--encoder``).
    """
    if num_heads <= 0 or embed_dim <= 0 or embed_dim % num_heads != 0:
        raise ConfigError(f"{what}-attention-heads ({num_heads}) must be positive and divide "
                          f"{what}-embed-dim ({embed_dim})")


def check_sizes(cfg, sides: Sequence[str] = ("decoder",)) -> None:
    """Layers, widths and heads of each side (``encoder``/``decoder``) of ``cfg``.

    Raises:
        ConfigError: a non-positive size, or heads that do not divide the width.
    """
    for side in sides:
        layers, width = getattr(cfg, f"{side}_layers"), getattr(cfg, f"{side}_embed_dim")
        if layers <= 0:
            raise ConfigError(f"--{side}-layers must be positive, got {layers}")
        if width <= 0 or getattr(cfg, f"{side}_ffn_embed_dim") <= 0:
            raise ConfigError(f"--{side}-embed-dim and --{side}-ffn-embed-dim must be positive")
        check_heads(width, getattr(cfg, f"{side}_attention_heads"), f"--{side}")


def check_positive(value, option: str, allow_zero: bool = False, note: str = "") -> None:
    """Raises ConfigError unless ``value`` > 0 (or ≥ 0 with ``allow_zero``)."""
    if value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "positive"
        raise ConfigError(f"{option} must be {bound}{note}, got {value}")


def check_share(share, option: str) -> None:
    if str(share) not in ("none", "attention", "all"):
        raise ConfigError(f"{option} must be none, attention or all, got {share!r}")


def check_not_empty(tokens: Tensor, what: str) -> None:
    """Raises ConfigError for a batch of empty sequences (shape ``(B, 0)``)."""
    if tokens.dim() != 2 or tokens.size(1) == 0:
        raise ConfigError(f"{what} is an empty sequence (shape {tuple(tokens.shape)}); give at least one token")


def set_arch_defaults(args, **defaults) -> None:
    """Fill the options a named architecture fixes, keeping those given on the command line."""
    for name, value in defaults.items():
        setattr(args, name, safe_getattr(args, name, value))


def sizes(side: str, layers: int, width: int, heads: int, ffn: int) -> Dict[str, int]:
    """``{side}_layers``, ``{side}_embed_dim``, ``{side}_attention_heads``, ``{side}_ffn_embed_dim``."""
    return {f"{side}_layers": layers, f"{side}_embed_dim": width, f"{side}_attention_heads": heads,
            f"{side}_ffn_embed_dim": ffn}


def declared_defaults(model: str) -> Dict[str, object]:
    """Every option of registered ``model``'s dataclass that has a default, with that default."""
    from dataclasses import MISSING, fields

    from fairseq.models import MODEL_DATACLASS_REGISTRY

    found = {}
    for f in fields(MODEL_DATACLASS_REGISTRY[model]):
        if f.default is not MISSING:
            found[f.name] = f.default
        elif f.default_factory is not MISSING:
            found[f.name] = f.default_factory()
    return found


def fill_declared_defaults(args, model: str) -> None:
    """Give ``args`` (an argparse namespace or a checkpoint's OmegaConf ``model`` node) every
    option of ``model`` it lacks, with its default. fairseq merges a checkpoint's config with the
    model's defaults only when it is saved under the model's own name; under a named architecture
    it calls the architecture's function alone, and an option added to the model after the
    checkpoint was saved would otherwise be a missing key when the model reads it."""
    from omegaconf import DictConfig

    held = set(args.keys()) if isinstance(args, DictConfig) else set(vars(args))
    for name, value in declared_defaults(model).items():
        if name not in held:
            setattr(args, name, value)


def register_named_architecture(model: str, name: str, doc: str, **defaults) -> None:
    """Register ``--arch name`` of ``model``: the options ``defaults`` fixes, unless the
    command line gives them, and the model's declared defaults for every option a checkpoint
    saved under this name predates (:func:`fill_declared_defaults`; ``doc`` is what the
    architecture is)."""
    def architecture(args):
        set_arch_defaults(args, **defaults)
        fill_declared_defaults(args, model)

    architecture.__name__, architecture.__doc__ = name, doc
    register_model_architecture(model, name)(architecture)
