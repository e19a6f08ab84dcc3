"""``streaming_lm``: truncated-BPTT-style language modelling for memory models.

The layout follows fairseq's ``examples/truncated_bptt``: the split's tokens
are cut into ``bsz × world_size`` contiguous streams (each rank keeps its own
``bsz``), and item i of the dataset is already a batch: the i-th segment of
``--tokens-per-sample`` tokens of every stream of this rank. Items are never
shuffled, so each batch slot reads its stream in order and a memory model
(``infinite_former_lm``) carries its memory from one batch to the next.

``net_input`` carries, besides ``src_tokens``:

* ``memory_key``: the split name, so that training and validation streams keep
  separate memories (validation may run mid-epoch);
* ``reset_memory``: ``(bsz,)`` bool, True where a stream starts in this batch
  (every slot at item 0, i.e. at the start of each epoch, of each validation
  and of each ``fairseq-eval-lm`` run; and, with
  ``--reset-memory-at-document-boundary``, where a document starts).

With ``--reset-memory-at-document-boundary`` every document (separated by an
empty line in the raw text, i.e. two consecutive end-of-sentence tokens after
``fairseq-preprocess``) starts at a segment boundary; its last segment is
padded. ``fairseq-eval-lm`` honours the option as training does: each document is
read from an empty memory, and every token of the split is still scored once (the
padding is not).
"""

import inspect
import logging
import math
import os
from dataclasses import dataclass, field
from typing import Dict, List, Optional

import torch
from fairseq import utils
from fairseq.data import Dictionary, FairseqDataset, data_utils, iterators
from fairseq.dataclass import FairseqDataclass
from fairseq.tasks import FairseqTask, register_task
from omegaconf import II

from fairseq_plugins.models.inference import positions_refusal
from fairseq_plugins.errors import ConfigError
from fairseq_plugins.tasks.generation_checks import GenerationChecksMixin
from fairseq_plugins.tasks.segment_lengths import say_which_segments_run
from fairseq_plugins.modules.memory_bank import StreamingMemoryModel

logger = logging.getLogger(__name__)


@dataclass
class StreamingLanguageModelingConfig(FairseqDataclass):
    data: Optional[str] = field(
        default=None, metadata={"help": "fairseq-preprocess output folder (dict.txt, train.bin/.idx, ...)"})
    tokens_per_sample: int = field(
        default=64, metadata={"help": "segment length: tokens of each stream per batch"})
    reset_memory_at_document_boundary: bool = field(
        default=False, metadata={"help": "start every document (empty line in the raw text) at a segment "
                                         "boundary and reset that stream's memory there (training, validation, "
                                         "fairseq-eval-lm)"})
    max_target_positions: Optional[int] = field(
        default=None, metadata={"help": "longest input for models with absolute positions (e.g. fastformer_lm); "
                                        "default: --tokens-per-sample"})
    # fairseq's save schedule: the ranks gather their training memory at the updates it saves
    save_interval: int = II("checkpoint.save_interval")
    save_interval_updates: int = II("checkpoint.save_interval_updates")
    validate_after_updates: int = II("dataset.validate_after_updates")
    max_update: int = II("optimization.max_update")
    update_freq: List[int] = II("optimization.update_freq")
    batch_size: Optional[int] = II("dataset.batch_size")
    batch_size_valid: Optional[int] = II("dataset.batch_size_valid")
    seed: int = II("common.seed")


class StreamingLMDataset(FairseqDataset):
    """Item i = segment i of every stream of this rank, as one batch.

    Args:
        tokens: 1-D LongTensor, the split's token ids in order.
        bsz: streams per rank; num_shards/shard_id: world size and rank.
        tokens_per_sample: segment length.
        pad, eos: dictionary indices.
        document_starts: sorted start offsets of documents in ``tokens``, or
            ``None`` for one continuous stream.
        split: name used as ``memory_key``.
    """

    def __init__(self, tokens, bsz, tokens_per_sample, pad, eos, split, num_shards=1, shard_id=0,
                 document_starts: Optional[List[int]] = None):
        super().__init__()
        self.bsz, self.tokens_per_sample, self.pad, self.split = bsz, tokens_per_sample, pad, split
        self.document_starts = document_starts
        n_streams = bsz * num_shards
        eos_t = tokens.new_tensor([eos])
        if document_starts is None:
            # eos in front so that every token of the split is predicted
            seq = torch.cat([eos_t, tokens])
            src, tgt = seq[:-1], seq[1:]
            starts = torch.zeros_like(src, dtype=torch.bool)
            align = 1
        else:
            bounds = list(document_starts) + [tokens.numel()]
            srcs, tgts, flags = [], [], []
            for begin, end in zip(bounds[:-1], bounds[1:]):
                doc = torch.cat([eos_t, tokens[begin:end]])
                n = doc.numel() - 1
                padded = math.ceil(n / tokens_per_sample) * tokens_per_sample
                fill = doc.new_full((padded - n,), pad)
                srcs.append(torch.cat([doc[:-1], fill]))
                tgts.append(torch.cat([doc[1:], fill]))
                flag = torch.zeros(padded, dtype=torch.bool)
                flag[0] = True
                flags.append(flag)
            src, tgt, starts = torch.cat(srcs), torch.cat(tgts), torch.cat(flags)
            align = tokens_per_sample
        stream_len = math.ceil(src.numel() / n_streams / align) * align
        total = stream_len * n_streams
        fill = total - src.numel()
        src = torch.cat([src, src.new_full((fill,), pad)]).view(n_streams, stream_len)
        tgt = torch.cat([tgt, tgt.new_full((fill,), pad)]).view(n_streams, stream_len)
        starts = torch.cat([starts, torch.zeros(fill, dtype=torch.bool)]).view(n_streams, stream_len)
        rows = slice(shard_id * bsz, (shard_id + 1) * bsz)
        self.src, self.tgt, self.starts = src[rows].contiguous(), tgt[rows].contiguous(), starts[rows].contiguous()
        self.stream_len = stream_len

    def __len__(self):
        return math.ceil(self.stream_len / self.tokens_per_sample)

    def __getitem__(self, index):
        cols = slice(index * self.tokens_per_sample, (index + 1) * self.tokens_per_sample)
        reset = self.starts[:, index * self.tokens_per_sample].clone()
        if index == 0:
            reset[:] = True
        return {"index": index, "src": self.src[:, cols].contiguous(), "tgt": self.tgt[:, cols].contiguous(),
                "reset": reset}

    def collater(self, items):
        if len(items) == 0:
            return {}
        assert len(items) == 1, "each streaming item is already a batch"
        item = items[0]
        src, tgt = item["src"], item["tgt"]
        bsz, length = src.shape
        return {
            "id": torch.arange(bsz) + item["index"] * bsz,
            "nsentences": bsz,
            "ntokens": int(tgt.ne(self.pad).sum()),
            "net_input": {
                "src_tokens": src,
                "src_lengths": src.ne(self.pad).sum(-1),
                "reset_memory": item["reset"],
                "memory_key": self.split,
            },
            "target": tgt,
        }

    def num_tokens(self, index):
        return self.bsz * self.tokens_per_sample

    def size(self, index):
        return self.tokens_per_sample

    def ordered_indices(self):
        return list(range(len(self)))


def document_starts(lines_dataset, eos: int) -> List[int]:
    """Token offsets where documents start; a document ends at an empty line
    (a line holding only the end-of-sentence token)."""
    starts, offset, at_start = [], 0, True
    for line in lines_dataset:
        n = line.numel()
        if n == 1 and int(line[0]) == eos:
            at_start = True
        elif at_start:
            starts.append(offset)
            at_start = False
        offset += n
    return starts or [0]


@register_task("streaming_lm", dataclass=StreamingLanguageModelingConfig)
class StreamingLanguageModelingTask(GenerationChecksMixin, FairseqTask):
    """Language modelling over in-order streams with memory carried across batches
    (fairseq-generate's prompts: generation_checks.py)."""

    def __init__(self, cfg: StreamingLanguageModelingConfig, dictionary: Dictionary):
        super().__init__(cfg)
        self.dictionary = dictionary
        # the model whose training memory goes into checkpoints (set by begin_epoch),
        # and a training memory read from a checkpoint, waiting for the first begin_epoch
        self.memory_model: Optional[StreamingMemoryModel] = None
        self.restored_train_memory: Optional[dict] = None
        # with several processes: every rank's training memory, gathered at the last
        # train_step of an update fairseq saves (rank 0 keeps it for get_checkpoint_dict)
        self.epoch = 1
        self.train_steps = 0
        self.gathered: Optional[List[dict]] = None
        self.gathered_at_step = -1

    @classmethod
    def setup_task(cls, cfg: StreamingLanguageModelingConfig, **kwargs):
        if not cfg.data:
            raise ConfigError("no data directory given; pass the fairseq-preprocess output folder "
                              "(e.g. data/books/bin) as the first argument")
        data = utils.split_paths(cfg.data)[0]
        dict_path = os.path.join(data, "dict.txt")
        if not os.path.isdir(data):
            raise ConfigError(f"data directory {data} does not exist; run data-prep/prepare-lm.sh first")
        if not os.path.isfile(dict_path):
            hint = ""
            if os.path.isfile(os.path.join(data, "bin", "dict.txt")):
                hint = f"; did you mean {os.path.join(data, 'bin')} (data-prep's OUT/bin)?"
            raise ConfigError(f"{dict_path} is missing; {data} is not a fairseq-preprocess output folder{hint}")
        if cfg.tokens_per_sample <= 0:
            raise ConfigError(f"--tokens-per-sample must be positive, got {cfg.tokens_per_sample}")
        dictionary = Dictionary.load(dict_path)
        logger.info("dictionary: %d types", len(dictionary))
        return cls(cfg, dictionary)

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        data = utils.split_paths(self.cfg.data)[0]
        path = os.path.join(data, split)
        lines = data_utils.load_indexed_dataset(path, self.dictionary, combine=False)
        if lines is None or len(lines) == 0:
            hint = "check the data directory and --valid-subset/--gen-subset"
            if os.path.isfile(os.path.join(data, "bin", split + ".idx")):
                hint = f"the fairseq data folder is {os.path.join(data, 'bin')} (data-prep's OUT/bin)"
            raise ConfigError(f"split '{split}' not found or empty in {data} (expected {path}.bin/.idx); {hint}")
        tokens = torch.cat([lines[i] for i in range(len(lines))]).long()
        bsz = self.cfg.batch_size if split == "train" else (self.cfg.batch_size_valid or self.cfg.batch_size)
        if not bsz:
            raise ConfigError("the streaming_lm task needs --batch-size (the number of parallel streams per process)")
        rank, world = _data_parallel_rank_and_size()
        starts = document_starts(lines, self.dictionary.eos()) if self.cfg.reset_memory_at_document_boundary else None
        self.datasets[split] = StreamingLMDataset(
            tokens, bsz, self.cfg.tokens_per_sample, self.dictionary.pad(), self.dictionary.eos(),
            split, num_shards=world, shard_id=rank, document_starts=starts)
        logger.info("%s: %d tokens in %d streams per rank × %d ranks, %d batches of %d tokens per stream",
                    split, tokens.numel(), bsz, world, len(self.datasets[split]), self.cfg.tokens_per_sample)

    def build_model(self, cfg, from_checkpoint=False):
        """The model; says in one line when a segmented memory model (the ∞-former LM, GPT-2) runs
        other segments than ``--tokens-per-sample`` (a checkpoint keeps the segment length it was
        trained with, whatever fairseq-eval-lm's ``--tokens-per-sample``; ``--model-overrides``
        changes it).

        Raises:
            ConfigError: GPT-2 asked for blocks longer than its position table; a model whose
                decoder's ``forward`` takes no ``reset_memory`` (the streams' starts every batch carries),
                such as fairseq's own ``transformer_lm``.
        """
        model = super().build_model(cfg, from_checkpoint=from_checkpoint)
        taken = inspect.signature(model.decoder.forward).parameters.values()
        if not any(p.name == "reset_memory" or p.kind is p.VAR_KEYWORD for p in taken):
            raise ConfigError(f"--task streaming_lm runs the plugin's language models (infinite_former_lm, "
                              f"fastformer_lm, infinite_former_gpt2), not {getattr(cfg, '_name', None) or 'this model'}: "
                              f"use --task language_modeling (with --context-window in fairseq-eval-lm)")
        say_which_segments_run(model, self.cfg.tokens_per_sample, from_checkpoint)
        return model

    def get_batch_iterator(self, dataset, num_workers=0, epoch=1, data_buffer_size=0,
                           skip_remainder_batch=False, **kwargs):
        # One item = one batch, in stream order; sharding happened in load_dataset.
        # The tokens are already in memory and a batch is a slice: worker
        # processes buy nothing, and fairseq's checkpoint save stalls ~5 s
        # shutting them down (trainer.state_dict), so batches are made in the
        # main process whatever --num-workers says.
        num_workers = 0
        return iterators.EpochBatchIterator(
            dataset=dataset, collate_fn=dataset.collater,
            batch_sampler=[[i] for i in range(len(dataset))],
            seed=self.cfg.seed, num_shards=1, shard_id=0, num_workers=num_workers,
            epoch=epoch, buffer_size=data_buffer_size, disable_shuffling=True,
            skip_remainder_batch=skip_remainder_batch)

    def eval_lm_dataloader(self, dataset, max_tokens=None, batch_size=None, max_positions=None,
                           num_shards=1, shard_id=0, num_workers=1, data_buffer_size=10, context_window=0):
        if context_window > 0:
            raise ConfigError("--context-window does not apply to streaming_lm: the memory already "
                              "carries the whole past; drop the option")
        if max_positions is not None and self.cfg.tokens_per_sample > max_positions:
            raise positions_refusal(int(max_positions), self.cfg.tokens_per_sample)
        return self.get_batch_iterator(dataset, num_workers=num_workers,
                                       data_buffer_size=data_buffer_size).next_epoch_itr(shuffle=False)

    def begin_epoch(self, epoch, model):
        """Start the training streams: restore their memory from the checkpoint being
        resumed (once), else empty it. ``model`` is fairseq's unwrapped model."""
        self.epoch = epoch
        if not isinstance(model, StreamingMemoryModel):
            return  # a model without memory between calls (e.g. fastformer_lm)
        self.memory_model = model
        restored, self.restored_train_memory = self.restored_train_memory, None
        if restored is not None:
            model.load_memory_state_dict("train", restored)
            logger.info("restored the training streams' memory from the checkpoint")
        else:
            model.reset_memory("train")

    def train_step(self, sample, model, criterion, optimizer, update_num, ignore_grad=False):
        out = super().train_step(sample, model, criterion, optimizer, update_num, ignore_grad=ignore_grad)
        self.train_steps += 1
        _, world = _data_parallel_rank_and_size()
        if world > 1 and self.memory_model is not None and self._saved_after(sample, update_num + 1):
            self.gathered = gather_memory(self.memory_model.memory_state_dict("train"))
            self.gathered_at_step = self.train_steps
        return out

    def _saved_after(self, sample, update: int) -> bool:
        """Whether ``sample`` is the last batch of ``update`` and fairseq-train saves a
        checkpoint after that update (end of a saved epoch, --save-interval-updates,
        --max-update; the same decision on every rank). A save for another reason
        (--patience, --stop-time-hours) finds no gathered memory: see set_checkpoint_dict."""
        cfg, dataset = self.cfg, self.datasets["train"]
        index = int(sample["id"][0]) // dataset.bsz
        freq = cfg.update_freq[min(self.epoch, len(cfg.update_freq)) - 1]
        end_of_epoch = index == len(dataset) - 1
        if not (end_of_epoch or (index + 1) % freq == 0):
            return False
        return ((end_of_epoch and self.epoch % cfg.save_interval == 0)
                or (cfg.max_update > 0 and update >= cfg.max_update)
                or (cfg.save_interval_updates > 0 and update % cfg.save_interval_updates == 0
                    and update >= cfg.validate_after_updates))

    # Exact resume: the training streams' memory is saved with every checkpoint
    # (fairseq merges get_checkpoint_dict() into its extra_state and hands it back
    # through set_checkpoint_dict() on every rank before the first begin_epoch of the
    # resumed run). Only rank 0 saves, and only rank 0 calls get_checkpoint_dict, so with
    # several processes the ranks gather their memories in train_step at the updates
    # fairseq saves, and each rank takes its own back on resume.

    def get_checkpoint_dict(self):
        if self.memory_model is None:
            return {}
        _, world = _data_parallel_rank_and_size()
        state = {"world_size": world, "train_memory": self.memory_model.memory_state_dict("train")}
        if world > 1 and self.gathered is not None and self.gathered_at_step == self.train_steps:
            state["train_memory"] = self.gathered[0]
            state["other_ranks_train_memory"] = self.gathered[1:]
        return {type(self).__name__: state}

    def set_checkpoint_dict(self, state):
        rank, world = _data_parallel_rank_and_size()
        saved = state.get("world_size")
        if saved != world:
            if rank == 0:
                logger.warning("resuming with %d processes a checkpoint of %s: the training streams' memory restarts "
                               "empty (resume with %s processes to continue it)", world, saved, saved)
        elif rank == 0:
            self.restored_train_memory = state.get("train_memory", {})
        elif len(state.get("other_ranks_train_memory", [])) == world - 1:
            self.restored_train_memory = state["other_ranks_train_memory"][rank - 1]
        else:
            logger.warning("rank %d: the checkpoint holds only rank 0's training memory (saved at an update fairseq "
                           "does not save on schedule): this rank's streams restart with an empty memory", rank)

    def begin_valid_epoch(self, epoch, model):
        """Every validation (and evaluation) split's streams start with an empty memory."""
        if isinstance(model, StreamingMemoryModel):
            for split in self.datasets:
                if split != "train":
                    model.reset_memory(split)

    @property
    def source_dictionary(self):
        return self.dictionary

    @property
    def target_dictionary(self):
        return self.dictionary

    def max_positions(self):
        return None


def gather_memory(flat: Dict[str, torch.Tensor]) -> List[Dict[str, torch.Tensor]]:
    """Every data-parallel rank's ``flat`` memory (same names and shapes on every rank,
    as every rank reads the same number of streams), on the CPU, in rank order."""
    from fairseq.distributed import utils as dist_utils
    group = dist_utils.get_data_parallel_group()
    world = dist_utils.get_data_parallel_world_size()
    out: List[Dict[str, torch.Tensor]] = [{} for _ in range(world)]
    for name in sorted(flat):
        tensor = flat[name].contiguous()
        sent = tensor.to(torch.uint8) if tensor.dtype == torch.bool else tensor
        parts = [torch.empty_like(sent) for _ in range(world)]
        torch.distributed.all_gather(parts, sent, group=group)
        for r, part in enumerate(parts):
            out[r][name] = part.to(tensor.dtype).cpu()
    return out


def _data_parallel_rank_and_size():
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        from fairseq.distributed import utils as dist_utils
        return dist_utils.get_data_parallel_rank(), dist_utils.get_data_parallel_world_size()
    return 0, 1
