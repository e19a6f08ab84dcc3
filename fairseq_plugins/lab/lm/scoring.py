"""Every token of a split scored as ``fairseq-eval-lm`` scores it, with its place in the split.

The run is ``fairseq_cli/eval_lm.py``'s, step for step: fairseq's eval-lm parser reads the
options, the task is set up from them, the checkpoint is loaded with
``checkpoint_utils.load_model_ensemble_and_task``, the split is read through the task's
``eval_lm_dataloader`` and scored by ``fairseq.sequence_scorer.SequenceScorer``; tokens with an
infinite score are skipped as eval-lm skips them. The options are those of the project's
evaluation (docs/analysis.md): a ``streaming_lm`` checkpoint reads the split as ``streams``
contiguous streams of its training segment, the memory carried through each stream (and
reset where a document starts if the checkpoint was trained with
``--reset-memory-at-document-boundary``); a
``language_modeling`` checkpoint (``transformer_lm``, ``fastformer_lm``) scores blocks of its
training ``--tokens-per-sample`` with ``--context-window`` (default: half of it), so that
every scored token sees at least that much context.

Each scored token gets its index in the split (the concatenation of the split's lines, each
ending in the end-of-sentence token, as both tasks read it); the index is checked against the
token itself, so a batch layout this module does not know fails loudly instead of mislabelling.
"""

import math
import os
from dataclasses import dataclass
from typing import List, Optional

import torch

from fairseq_plugins.errors import ConfigError
from fairseq_plugins.lab.common.fairseq_tools import PACKAGE_DIR

TASKS = ("streaming_lm", "language_modeling")


@dataclass
class ScoredSplit:
    """The scores of one checkpoint on one split.

    Attributes:
        checkpoint: the checkpoint's path.
        task: ``streaming_lm`` or ``language_modeling``.
        positions: ``(n,)`` int64, index in the split of every scored token (each once).
        log_probs: ``(n,)`` float64, natural-log probability of that token.
        eval_args: the fairseq-eval-lm options that reproduce the run (after DATA).
        eval_lm_sum: the sum of the log probabilities as fairseq-eval-lm adds them (float32, batch
            by batch in its order), so that :attr:`loss_bits` is the loss it prints to the last
            digit; ``None``: the float64 sum of ``log_probs``.
    """

    checkpoint: str
    task: str
    positions: torch.Tensor
    log_probs: torch.Tensor
    eval_args: List[str]
    eval_lm_sum: Optional[float] = None

    @property
    def loss_bits(self) -> float:
        """Mean loss in bits per token, eval-lm's ``Loss (base 2)`` (and its perplexity 2 ** this,
        to the digit it prints, where :attr:`eval_lm_sum` is set)."""
        total = self.log_probs.sum() if self.eval_lm_sum is None else self.eval_lm_sum
        return float(-total / self.log_probs.numel() / math.log(2))


def split_lines(data: str, split: str, dictionary):
    """The split's lines (fairseq's indexed dataset), or ConfigError naming the splits there."""
    from fairseq.data import data_utils

    path = os.path.join(data, split)
    if not os.path.isfile(path + ".idx"):
        there = sorted(f[:-4] for f in os.listdir(data) if f.endswith(".idx")) if os.path.isdir(data) else []
        raise ConfigError(f"split '{split}' not found in {data} (no {split}.idx); choose one of "
                          f"{', '.join(there) or 'none: is --data the fairseq-preprocess folder (OUT/bin)?'}")
    return data_utils.load_indexed_dataset(path, dictionary, combine=False)


@dataclass
class CheckpointInfo:
    """What the analyses read from a checkpoint's config before scoring it: its ``task`` section
    (a dict), its training ``seed``, its model's registered name (``arch``) and whether the model
    has a long-term memory."""

    task: dict
    seed: int
    long_term_memory: bool
    arch: str = ""


# the config field of the models that build a long-term memory unless it is set (infinite_former_lm and
# infinite_former_gpt2, under any of their architecture names, compressive_transformer_lm included)
NO_MEMORY_FIELD = "no_long_term_memory"


def checkpoint_info(checkpoint: str) -> CheckpointInfo:
    """:class:`CheckpointInfo` of a checkpoint; ConfigError for a checkpoint that is missing or cannot
    be read, or of a task not scored here."""
    from fairseq import checkpoint_utils

    from fairseq_plugins.compat.checkpoint_files import check_readable

    check_readable(checkpoint, tool="analyze", option="--checkpoint")
    state = checkpoint_utils.load_checkpoint_to_cpu(checkpoint)
    cfg = state.get("cfg")
    task = dict(cfg["task"]) if cfg is not None and cfg.get("task") is not None else {}
    name = task.get("_name")
    if name not in TASKS:
        raise ConfigError(f"checkpoint {checkpoint} was trained with task '{name}'; the analysis scores language "
                          f"models of the tasks {' or '.join(TASKS)} (a summarizer or translation model is not one)")
    model = cfg.get("model") or {}
    memory = NO_MEMORY_FIELD in model and not model[NO_MEMORY_FIELD]
    return CheckpointInfo(task, int((cfg.get("common") or {}).get("seed", 1)), bool(memory),
                          str(model.get("_name") or ""))


def checkpoint_task(checkpoint: str) -> dict:
    """The task section of a checkpoint's config (:func:`checkpoint_info`)."""
    return checkpoint_info(checkpoint).task


def eval_lm_args(checkpoint: str, data: str, split: str, task: dict, streams: int, batch_size: int,
                 context_window: Optional[int], cpu: bool) -> List[str]:
    """fairseq-eval-lm's options (after DATA) for ``checkpoint``, as docs/analysis.md states them."""
    tokens = int(task["tokens_per_sample"])
    args = ["--task", task["_name"], "--path", checkpoint, "--gen-subset", split, "--user-dir", PACKAGE_DIR]
    if task["_name"] == "streaming_lm":
        if streams <= 0:
            raise ConfigError(f"--streams must be positive, got {streams}")
        args += ["--tokens-per-sample", str(tokens), "--batch-size", str(streams)]
        if task.get("reset_memory_at_document_boundary"):
            args.append("--reset-memory-at-document-boundary")
    else:
        window = tokens // 2 if context_window is None else context_window
        if not 0 <= window < tokens:
            raise ConfigError(f"--context-window must lie in [0, {tokens}) (the checkpoint's --tokens-per-sample "
                              f"{tokens}), got {window}")
        if batch_size <= 0:
            raise ConfigError(f"--batch-size must be positive, got {batch_size}")
        args += ["--sample-break-mode", "none", "--tokens-per-sample", str(tokens), "--context-window", str(window),
                 "--batch-size", str(batch_size)]
    return args + (["--cpu"] if cpu else [])


def score_split(checkpoint: str, data: str, split: str = "test", streams: int = 16, batch_size: int = 16,
                context_window: Optional[int] = None, cpu: bool = True, memory_wiped: bool = False,
                task_cfg: Optional[dict] = None) -> ScoredSplit:
    """Score every token of ``split`` with ``checkpoint`` as fairseq-eval-lm does (module docstring).

    Args:
        checkpoint: a ``streaming_lm`` or ``language_modeling`` checkpoint.
        data: the fairseq-preprocess folder (``dict.txt``, ``SPLIT.bin/.idx``).
        streams: parallel streams of a ``streaming_lm`` model (its ``--batch-size``).
        batch_size, context_window: blocks per batch and ``--context-window`` of a
            ``language_modeling`` model (``None``: half its ``--tokens-per-sample``).
        cpu: run on the CPU even when a GPU is there.
        memory_wiped: score with the long-term memory emptied before every read
            (:func:`~fairseq_plugins.modules.memory.contract.set_memory_wiped`); ``eval_args``
            then holds ``--model-overrides {'memory_wiped': True}``, which reproduces it in
            fairseq-eval-lm with the plugin (:mod:`fairseq_plugins.compat.overrides`).
        task_cfg: the checkpoint's task section when the caller has read it already
            (:func:`checkpoint_info`); ``None``: read here.
    Returns:
        :class:`ScoredSplit`.
    Raises:
        ConfigError: a checkpoint of another task, a missing split or a bad option; with
            ``memory_wiped``, a model without long-term memory.
    """
    from fairseq import options, tasks, utils
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.sequence_scorer import SequenceScorer

    from fairseq_plugins.lab.common.checkpoints import load

    task_cfg = checkpoint_task(checkpoint) if task_cfg is None else task_cfg
    if not os.path.isfile(os.path.join(data, "dict.txt")):
        raise ConfigError(f"{os.path.join(data, 'dict.txt')} is missing; --data is the fairseq-preprocess folder "
                          "(data-prep's OUT/bin)")
    cpu = cpu or not torch.cuda.is_available()
    args = eval_lm_args(checkpoint, data, split, task_cfg, streams, batch_size, context_window, cpu)
    parser = options.get_eval_lm_parser()
    cfg = convert_namespace_to_omegaconf(options.parse_args_and_arch(parser, [data] + args))
    if cfg.eval_lm.context_window > 0:  # as fairseq_cli/eval_lm.py: blocks shrink by the window
        cfg.task.tokens_per_sample -= cfg.eval_lm.context_window
    task = tasks.setup_task(cfg.task)
    lines = split_lines(data, split, task.source_dictionary)
    split_tokens = torch.cat([lines[i] for i in range(len(lines))]).long()
    model, _, task = load(checkpoint, cpu=True, arg_overrides=eval(cfg.common_eval.model_overrides), task=task)
    if memory_wiped:
        from fairseq_plugins.modules.memory.contract import set_memory_wiped

        set_memory_wiped(model)
        args = args + ["--model-overrides", "{'memory_wiped': True}"]
    if not cpu:
        model.cuda()
    model.prepare_for_inference_(cfg)
    task.load_dataset(split)
    dataset = task.dataset(split)
    itr = task.eval_lm_dataloader(
        dataset=dataset, max_tokens=cfg.dataset.max_tokens or 36000, batch_size=cfg.dataset.batch_size,
        max_positions=utils.resolve_max_positions(model.max_positions()), num_workers=cfg.dataset.num_workers,
        data_buffer_size=cfg.dataset.data_buffer_size, context_window=cfg.eval_lm.context_window)
    scorer = SequenceScorer(task.target_dictionary, cfg.eval_lm.softmax_batch)
    device = next(model.parameters()).device
    positions, scores = [], []
    eval_lm_sum = 0.0  # fairseq_cli/eval_lm.py's accumulation: a float32 tensor, batch by batch
    layout = _stream_layout(dataset, split_tokens.numel(), cfg) if cfg.task._name == "streaming_lm" else None
    for sample in itr:
        if "net_input" not in sample:
            continue
        sample = utils.move_to_cuda(sample, device=device) if device.type == "cuda" else sample
        for i, hypos in enumerate(scorer.generate([model], sample)):
            hypo = hypos[0]
            pos = _positions(int(sample["id"][i]), hypo["tokens"].numel(), dataset, layout, cfg)
            if pos.numel() and (int(pos[-1]) >= split_tokens.numel()
                                or not torch.equal(split_tokens[pos], hypo["tokens"].cpu())):
                raise ConfigError(f"the scored tokens of batch item {int(sample['id'][i])} are not the split's tokens "
                                  f"at {int(pos[0])}..; this batch layout of task {task_cfg['_name']} is not "
                                  "supported by the analysis")
            score32 = hypo["positional_scores"].float()
            finite = torch.isfinite(score32)  # eval-lm skips tokens with an infinite score
            eval_lm_sum += score32[finite].sum().cpu()
            positions.append(pos[finite.cpu()])
            scores.append(score32.double().cpu()[finite.cpu()])
    positions_t, scores_t = torch.cat(positions), torch.cat(scores)
    if positions_t.unique().numel() != positions_t.numel():
        raise ConfigError(f"some tokens of split '{split}' were scored twice; the analysis needs each token once")
    return ScoredSplit(checkpoint, task_cfg["_name"], positions_t, scores_t, args, float(eval_lm_sum))


def _stream_layout(dataset, n: int, cfg) -> torch.Tensor:
    """``(streams, stream_len)``: the split index of the target at each place of a ``streaming_lm``
    dataset (-1 where it pads), built by laying out ``0..n-1`` exactly as the task lays out the
    split's tokens (with its document starts when it resets at documents)."""
    from fairseq_plugins.tasks.streaming_language_modeling import StreamingLMDataset

    return StreamingLMDataset(torch.arange(n), dataset.bsz, dataset.tokens_per_sample, pad=-1, eos=-2,
                              split="layout", document_starts=dataset.document_starts).tgt


def _positions(item: int, count: int, dataset, layout: Optional[torch.Tensor], cfg) -> torch.Tensor:
    """Indices in the split of the ``count`` scored tokens of batch item ``item``.

    ``streaming_lm``: item ``id`` is segment ``id // streams`` of stream ``id % streams``; its
    targets are that slice of :func:`_stream_layout` without padding (fairseq's scorer strips the
    padding, which only ends a segment). ``language_modeling`` with ``--sample-break-mode none``:
    block ``id`` holds tokens ``[id·B, (id+1)·B)``, B its ``--tokens-per-sample`` less the context
    window (the window's tokens are not scored).
    """
    if layout is not None:
        seg = dataset.tokens_per_sample
        row = layout[item % dataset.bsz, (item // dataset.bsz) * seg:(item // dataset.bsz + 1) * seg]
        return row[row >= 0][:count]
    block = cfg.task.tokens_per_sample
    return item * block + torch.arange(count)
