"""fairseq's hub interface for the segmented memory language models (the ∞-former LM and GPT-2
with the memory), as fairseq users know it from ``TransformerLanguageModel.from_pretrained``
(docs/generation.md, "From Python"; docs/gpt2.md)::

    lm = InfiniteFormerLanguageModel.from_pretrained(model_dir, checkpoint_file="checkpoint_last.pt",
        data_name_or_path="data/books/bin", bpe="sentencepiece", sentencepiece_model="data/books/spm.model")
    lm.sample(prompt, beam=1, max_len_b=50)     # the prompt, then its continuation
    lm.score(text)["positional_scores"]         # log-probs of every token, the memory carried

:class:`HubMixin` gives a model class ``from_pretrained`` (local folders only: nothing is
downloaded); it returns a :class:`SegmentedLMHubInterface`, fairseq's own
``GeneratorHubInterface`` (``encode``, ``decode``, ``sample``, ``score``) whose ``generate``
accepts a prompt of any length: the prompt is read into the memory segment by segment (the
decoder's ``prefill``, one segment of activations at a time) and fairseq's
``SequenceGenerator`` generates after it, from that state. Its ``score`` runs the full forward
over a text of any length a few segments per call, the memory carried between calls (as
``fairseq-eval-lm --task streaming_lm`` carries it between batches).

The prompt reaches the generator as the *source* of :class:`PromptedLM`, a thin
encoder–decoder around the LM's decoder: its encoder prefills the prompt and hands over the
decoder's state (:meth:`~fairseq_plugins.models.segment_decoder.SegmentIncrementalDecoder.decoding_state`),
which beam search reorders like any encoder output; its decoder continues from it
(``continue_from``). fairseq's own path, the prompt as ``prefix_tokens``, would feed it one
token per step, count it against the length limit, and end a hypothesis at every
end-of-sentence token inside it.
"""

import copy
import logging
import os
import pickle
from typing import Dict, List, Optional

import torch
from fairseq import hub_utils
from fairseq.models import MODEL_REGISTRY, FairseqEncoder, FairseqEncoderDecoderModel, FairseqIncrementalDecoder
from omegaconf import open_dict
from torch import Tensor

from fairseq_plugins.errors import ConfigError
from fairseq_plugins.models.prompts import EMPTY, check_prompt, decode_lines, prompt_lines

logger = logging.getLogger(__name__)

# the most tokens one generate() call produces: fairseq's SequenceGenerator allocates its
# (bsz × beam, max_len + 2) token and score buffers up front and takes one step per token
MAX_GENERATED = 100_000
SCORE_TOKENS_PER_CALL = 1024  # score(): whole segments of about this many tokens per forward call
SCORE_KEY = "hub-score"  # the memory bank's key of score()'s stream (apart from the task's splits)
GPT2_BPE_FILES = (("encoder.json", "vocab.bpe"), ("vocab.json", "merges.txt"))  # fairseq's; Hugging Face's


def check_generation_length(max_len: int, beam: int) -> None:
    """Refuse a generation fairseq's ``SequenceGenerator`` cannot finish: more than
    :data:`MAX_GENERATED` tokens (``max_len``, after the prompt) or a beam below 1.

    Raises:
        ConfigError: naming the limit and why.
    """
    if beam < 1:
        raise ConfigError(f"the beam size must be at least 1, got {beam}")
    if max_len > MAX_GENERATED:
        buffers = beam * (max_len + 2) * (8 + 4) / 2 ** 30  # int64 tokens + fp32 scores
        raise ConfigError(
            f"{max_len:,} tokens to generate is more than one run generates (at most {MAX_GENERATED:,}): fairseq's "
            f"SequenceGenerator allocates its (beam × (max_len + 2)) token and score buffers up front ({buffers:.1f} "
            f"GiB here) and takes one step per token; generate {MAX_GENERATED:,} or fewer, and continue the "
            f"continuation for more")


class PromptedLM(FairseqEncoderDecoderModel):
    """An encoder–decoder view of a segmented LM decoder for ``SequenceGenerator``: the source
    is the context (the stream's first end-of-sentence, the prompt); the encoder prefills all
    of it but its last token, which the generator passes as its first ("bos") token."""

    def __init__(self, decoder):
        super().__init__(_PromptEncoder(decoder), _PromptedDecoder(decoder))


class _PromptEncoder(FairseqEncoder):
    """Prefills ``src_tokens[:, :-1]``; ``encoder_out`` holds the decoder's state, tensor by tensor."""

    def __init__(self, decoder):
        super().__init__(decoder.dictionary)
        self.lm = [decoder]  # not a submodule: the decoder belongs to _PromptedDecoder

    def forward(self, src_tokens: Tensor, src_lengths=None):
        state: Dict = {}
        if src_tokens.size(1) > 1:
            self.lm[0].prefill(src_tokens[:, :-1], state)
        flat = self.lm[0].decoding_state(state) or {}
        return {"names": sorted(flat), "state": [flat[k] for k in sorted(flat)]}

    def reorder_encoder_out(self, encoder_out, new_order: Tensor):
        if not encoder_out["names"]:
            return encoder_out
        state: Dict = {}
        self.lm[0].continue_from(state, dict(zip(encoder_out["names"], encoder_out["state"])))
        self.lm[0].reorder_incremental_state(state, new_order)
        flat = self.lm[0].decoding_state(state)
        return {"names": encoder_out["names"], "state": [flat[k] for k in encoder_out["names"]]}

    def max_positions(self):
        return int(1e9)


class _PromptedDecoder(FairseqIncrementalDecoder):
    """The LM's decoder, started from the prompt's state at the generator's first step."""

    def __init__(self, decoder):
        super().__init__(decoder.dictionary)
        self.lm = decoder

    def forward(self, prev_output_tokens: Tensor, encoder_out=None, incremental_state=None, **kwargs):
        if incremental_state is not None and self.lm.decoding_state(incremental_state) is None \
                and encoder_out is not None and encoder_out["names"]:
            self.lm.continue_from(incremental_state, dict(zip(encoder_out["names"], encoder_out["state"])))
        return self.lm(prev_output_tokens, incremental_state=incremental_state)

    def max_positions(self):
        return int(1e9)


class SegmentedLMHubInterface(hub_utils.GeneratorHubInterface):
    """fairseq's ``GeneratorHubInterface`` for a segmented memory LM (see the module docstring).

    ``encode``/``decode`` are fairseq's; ``sample`` and ``score`` read a text by the prompt
    policy of :mod:`fairseq_plugins.models.prompts` (each line ends with end-of-sentence, as
    in training, unless ``join_lines``; an empty prompt, or one of unknown symbols only, raises
    ``ValueError``; some unknown symbols: one warning), and ``sample`` returns one line per
    end-of-sentence. A tokenized sentence (``encode``'s output) is read as fairseq's
    language-modelling tasks read it: the end-of-sentence tokens at its ends stripped, one put in
    front (the stream's start); :meth:`continue_tokens` and :meth:`score_tokens` take that
    context as it is.
    """

    def encode_prompt(self, text: str, join_lines: bool = False) -> Tensor:
        """``text`` → ``(P,)`` ids: each line encoded by :meth:`encode` (which ends it with
        end-of-sentence), the lines of :func:`~fairseq_plugins.models.prompts.prompt_lines`."""
        lines = prompt_lines(text, join_lines)
        return torch.cat([self.encode(line) for line in lines]) if lines else torch.zeros(0, dtype=torch.long)

    def decode_lines(self, tokens: Tensor) -> str:
        """``(T,)`` ids → text, one line per end-of-sentence (:func:`~fairseq_plugins.models.prompts.decode_lines`)."""
        return decode_lines(tokens, self.tgt_dict.eos(), self.decode)

    def sample(self, sentences, beam: int = 1, verbose: bool = False, *, join_lines: bool = False, **kwargs):
        """fairseq's ``sample`` by the prompt policy: a text (or a list of texts) → the prompt and
        its continuation, one line per end-of-sentence.

        Raises:
            ConfigError (a ``ValueError``): an empty prompt, or one of unknown symbols only.
        """
        if isinstance(sentences, str):
            return self.sample([sentences], beam, verbose, join_lines=join_lines, **kwargs)[0]
        hypos = self.generate([self.encode_prompt(s, join_lines) for s in sentences], beam, verbose, **kwargs)
        return [self.decode_lines(h[0]["tokens"]) for h in hypos]

    def score(self, sentences, replace_newline_with_eos: Optional[bool] = None, *, join_lines: bool = False,
              **kwargs):
        """fairseq's ``score`` by the prompt policy: each text's tokens scored with the memory
        carried (:meth:`score_tokens`). fairseq's ``replace_newline_with_eos``, when given, is the
        opposite of ``join_lines``.

        Raises:
            ConfigError (a ``ValueError``): an empty text, or one of unknown symbols only.
        """
        if replace_newline_with_eos is not None:
            join_lines = not replace_newline_with_eos
        if isinstance(sentences, str):
            return self.score([sentences], join_lines=join_lines, **kwargs)[0]
        tokens = [self.encode_prompt(s, join_lines) for s in sentences]
        return [hypos[0] for hypos in self.generate(tokens, score_reference=True, **kwargs)]

    def check(self, tokens: Tensor) -> None:
        """The prompt policy on ``(P,)`` ids (:func:`~fairseq_plugins.models.prompts.check_prompt`):
        raises on an empty prompt or one of unknown symbols only, logs one warning on some."""
        warning = check_prompt(tokens.tolist(), self.tgt_dict)
        if warning:
            logger.warning(warning)

    def generate(self, tokenized_sentences, beam: int = 5, verbose: bool = False,
                 skip_invalid_size_inputs: bool = False, inference_step_args=None,
                 prefix_allowed_tokens_fn=None, **kwargs) -> List[List[Dict[str, Tensor]]]:
        """fairseq's ``generate``, for prompts of any length, one prompt at a time (each is
        prefilled alone: prompts of different lengths are never padded into one batch).

        Args:
            tokenized_sentences: a list of ``(P,)`` id tensors (or one).
            beam, kwargs: fairseq's generation options (``sampling``, ``sampling_topp``,
                ``temperature``, ``max_len_a``/``max_len_b``, ...); the length limit counts the
                tokens generated after the prompt, ``max_len_a × P + max_len_b`` (P: the prompt's
                tokens other than end-of-sentence).
                ``score_reference=True`` scores the sentences instead (:meth:`score_tokens`).
        Returns:
            per sentence, fairseq's hypotheses, best first: ``tokens`` the prompt then the
            continuation (and its end-of-sentence if generated), ``score`` and
            ``positional_scores`` those of the continuation (the prompt is read, not scored).
        Raises:
            ConfigError: ``inference_step_args`` (the prompt is the sentence itself), a length
                limit past :data:`MAX_GENERATED`, an empty prompt or one of unknown symbols only.
        """
        if torch.is_tensor(tokenized_sentences) and tokenized_sentences.dim() == 1:
            return self.generate([tokenized_sentences], beam, verbose, skip_invalid_size_inputs, inference_step_args,
                                 prefix_allowed_tokens_fn, **kwargs)[0]
        for tokens in tokenized_sentences:
            self.check(tokens)
        if kwargs.pop("score_reference", False):
            return [[self.score_tokens(self.context(tokens))] for tokens in tokenized_sentences]
        if inference_step_args:
            raise ConfigError("generate() takes no inference_step_args (prefix_tokens, constraints): the prompt is "
                              "the sentence itself, read whole before generating")
        results = []
        for tokens in tokenized_sentences:
            hypos = self.continue_tokens(self.context(tokens), beam, prefix_allowed_tokens_fn, **kwargs)
            if verbose:
                logger.info("S\t%s", self.string(tokens))
                for hypo in hypos:
                    logger.info("H\t%s\t%s", float(hypo["score"]), self.decode(hypo["tokens"]))
            results.append(hypos)
        return results

    def context(self, tokens: Tensor) -> Tensor:
        """``(P,)`` sentence ids → the model's input ``(1 + P',)``: the end-of-sentence tokens at
        both ends stripped (as fairseq's ``StripTokenDataset``), one in front."""
        eos, tokens = self.tgt_dict.eos(), tokens.long().cpu()
        ends = tokens.ne(eos).nonzero()
        kept = tokens[int(ends[0]):int(ends[-1]) + 1] if ends.numel() else tokens[:0]
        return torch.cat([kept.new_tensor([eos]), kept])

    def continue_tokens(self, context: Tensor, beam: int = 1, prefix_allowed_tokens_fn=None,
                        **kwargs) -> List[Dict[str, Tensor]]:
        """Generate after ``context`` ``(P,)``, the model's input as it is (``context[0]`` the
        stream's first end-of-sentence; end-of-sentence tokens inside or at its end are read
        like any other). Arguments and result: :meth:`generate`, for one prompt."""
        if context.numel() == 0:
            raise ConfigError(EMPTY)
        gen_args = copy.deepcopy(self.cfg.generation)
        with open_dict(gen_args):
            gen_args.beam = beam
            for key, value in kwargs.items():
                setattr(gen_args, key, value)
        prompt = int((context.ne(self.tgt_dict.eos()) & context.ne(self.tgt_dict.pad())).sum())  # as the generator
        check_generation_length(int(gen_args.max_len_a * prompt + gen_args.max_len_b), gen_args.beam)
        context = context.to(self.device)
        models = [PromptedLM(model.decoder) for model in self.models]
        generator = self.task.build_generator(models, gen_args, prefix_allowed_tokens_fn=prefix_allowed_tokens_fn)
        sample = {"net_input": {"src_tokens": context[None], "src_lengths": context.new_tensor([context.numel()])}}
        with torch.no_grad():
            hypos = generator.generate(models, sample, bos_token=int(context[-1]))[0]
        for hypo in hypos:
            hypo["tokens"] = torch.cat([context[1:], hypo["tokens"]])
        return hypos

    def score_tokens(self, context: Tensor) -> Dict[str, Tensor]:
        """Score ``context[1:]`` after ``context[0]`` with the full forward, whole segments of
        about :data:`SCORE_TOKENS_PER_CALL` tokens per call and the memory carried between calls,
        so that a text of any length is scored in the memory of a few segments.

        Returns:
            fairseq's scorer hypothesis: ``tokens`` ``context[1:]``, ``positional_scores``
            their log-probabilities (natural log), ``score`` their mean.
        """
        context = context.to(self.device)
        inputs, targets = context[None, :-1], context[1:]
        per_model = []
        with torch.no_grad():
            for model in self.models:
                length = model.decoder.segment_length
                step = length * max(1, SCORE_TOKENS_PER_CALL // length)
                model.reset_memory(SCORE_KEY)
                scores = []
                for start in range(0, inputs.size(1), step):
                    out = model(inputs[:, start:start + step], memory_key=SCORE_KEY)
                    lprobs = model.get_normalized_probs(out, log_probs=True)[0].float()
                    scores.append(lprobs.gather(-1, targets[start:start + step, None])[:, 0])
                model.reset_memory(SCORE_KEY)
                per_model.append(torch.cat(scores) if scores else context.new_zeros(0, dtype=torch.float))
        scores = per_model[0] if len(per_model) == 1 else \
            torch.logsumexp(torch.stack(per_model), 0) - torch.log(torch.tensor(float(len(per_model))))
        return {"tokens": targets, "score": scores.mean() if scores.numel() else scores.sum(),
                "positional_scores": scores, "attention": None, "alignment": None}


class HubMixin:
    """``from_pretrained`` for a model class (mixed in before fairseq's model base)."""

    default_bpe = None  # the bpe from_pretrained uses when none is given

    @classmethod
    def from_pretrained(cls, model_name_or_path: str, checkpoint_file: str = "model.pt",
                        data_name_or_path: str = ".", **kwargs) -> SegmentedLMHubInterface:
        """Load ``model_name_or_path/checkpoint_file`` with its data's dictionary, as fairseq's
        ``from_pretrained``, from local files only.

        Args:
            model_name_or_path: the folder of the checkpoint (never a name or URL: nothing is
                downloaded).
            checkpoint_file: its file name(s) (``checkpoint_last.pt``; several joined by
                ``os.pathsep``: an ensemble).
            data_name_or_path: the data folder (``dict.txt``); one starting with ``.`` is
                relative to the model folder.
            kwargs: overrides of the checkpoint's options: ``bpe="sentencepiece"`` with
                ``sentencepiece_model=`` (default: data-prep's ``spm.model`` beside the data
                folder), ``bpe="gpt2"`` with ``gpt2_encoder_json=``/``gpt2_vocab_bpe=`` (default:
                ``encoder.json``/``vocab.bpe`` or ``vocab.json``/``merges.txt`` in the model or data
                folder), model options (``segment_length=``, ...).
        Raises:
            ConfigError: a missing folder or file, a URL, a checkpoint of another model.
        """
        if not os.path.isdir(model_name_or_path):
            raise ConfigError(f"{model_name_or_path} is not a folder: from_pretrained reads a local checkpoint "
                              "folder (nothing is downloaded)")
        for name in checkpoint_file.split(os.pathsep):
            if not os.path.isfile(os.path.join(model_name_or_path, name)):
                raise ConfigError(f"{os.path.join(model_name_or_path, name)} not found; pass checkpoint_file= "
                                  "(e.g. checkpoint_last.pt, as fairseq-train writes it)")
        data = (os.path.join(model_name_or_path, data_name_or_path) if data_name_or_path.startswith(".")
                else data_name_or_path)
        if not os.path.isfile(os.path.join(data, "dict.txt")):
            raise ConfigError(f"{os.path.join(data, 'dict.txt')} not found; pass data_name_or_path= the data folder "
                              "the model was trained on (data-prep's OUT/bin)")
        kwargs.setdefault("bpe", cls.default_bpe)
        if kwargs["bpe"] is None:
            del kwargs["bpe"]
        local_bpe_files(kwargs, [model_name_or_path, data, os.path.dirname(os.path.abspath(data))])
        try:
            loaded = hub_utils.from_pretrained(model_name_or_path, checkpoint_file, data_name_or_path, **kwargs)
        except (pickle.UnpicklingError, EOFError, RuntimeError) as e:  # torch.load's and load_state_dict's
            what = (str(e).strip().splitlines() or [type(e).__name__])[0].split(". ")[0][:100]
            raise ConfigError(f"cannot load {os.path.join(model_name_or_path, checkpoint_file)} ({what}); pass a "
                              f"complete checkpoint of fairseq-train") from None
        for model in loaded["models"]:
            if not isinstance(model, cls):
                names = {model_class: name for name, model_class in MODEL_REGISTRY.items()}
                raise ConfigError(f"{os.path.join(model_name_or_path, checkpoint_file)} holds a "
                                  f"{names.get(type(model), type(model).__name__)} model; {cls.__name__}.from_pretrained "
                                  f"loads {names.get(cls, cls.__name__)} checkpoints")
        for part in (loaded["args"].bpe, loaded["args"].tokenizer):
            urls = [str(v) for v in (part or {}).values() if "://" in str(v)]
            if urls:
                raise ConfigError(f"the checkpoint's {part._name} settings name {urls[0]}, which would be downloaded; "
                                  f"pass local files (docs/generation.md)")
        return SegmentedLMHubInterface(loaded["args"], loaded["task"], loaded["models"])


def local_bpe_files(kwargs: Dict, folders: List[str]) -> None:
    """Fill in and check the local files of ``kwargs["bpe"]`` (see ``from_pretrained``), looking
    in ``folders`` for those not given.

    Raises:
        ConfigError: a file that is missing or a URL, or none found.
    """
    bpe = kwargs.get("bpe")
    if bpe == "sentencepiece" and not kwargs.get("sentencepiece_model"):
        found = [os.path.join(f, n) for f in folders for n in ("spm.model", "sentencepiece.bpe.model")
                 if os.path.isfile(os.path.join(f, n))]
        if not found:
            raise ConfigError(f"bpe='sentencepiece' needs sentencepiece_model= (data-prep writes OUT/spm.model); "
                              f"none in {', '.join(folders)}")
        kwargs["sentencepiece_model"] = found[0]
    if bpe == "gpt2" and not (kwargs.get("gpt2_encoder_json") and kwargs.get("gpt2_vocab_bpe")):
        pairs = [(os.path.join(f, a), os.path.join(f, b)) for f in folders for a, b in GPT2_BPE_FILES
                 if os.path.isfile(os.path.join(f, a)) and os.path.isfile(os.path.join(f, b))]
        if not pairs:
            raise ConfigError("bpe='gpt2' needs GPT-2's BPE files: pass gpt2_encoder_json= and gpt2_vocab_bpe= "
                              "(encoder.json and vocab.bpe, or a Hugging Face folder's vocab.json and merges.txt); "
                              f"none in {', '.join(folders)} (nothing is downloaded)")
        kwargs.setdefault("gpt2_encoder_json", pairs[0][0])
        kwargs.setdefault("gpt2_vocab_bpe", pairs[0][1])
    for key in ("sentencepiece_model", "gpt2_encoder_json", "gpt2_vocab_bpe"):
        if key in kwargs and ("://" in str(kwargs[key]) or not os.path.isfile(kwargs[key])):
            raise ConfigError(f"{key}={kwargs[key]} is not a local file (nothing is downloaded)")
