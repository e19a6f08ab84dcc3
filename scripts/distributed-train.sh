#!/usr/bin/env bash
# fairseq-train under torchrun, on CPUs (gloo) or GPUs (nccl).
#
#   torchrun --nproc_per_node 2 --no-python bash scripts/distributed-train.sh DATA [fairseq-train options...]
#
# fairseq's own torchrun detection divides by the CUDA device count (fails on CPU), so
# this wrapper passes torchrun's RANK / WORLD_SIZE / LOCAL_RANK explicitly with
# --distributed-init-method env:// --distributed-no-spawn. On CPU add
# --cpu --distributed-backend gloo --ddp-backend legacy_ddp to the options.
# Every rank reads the checkpoint it resumes from (--load-checkpoint-on-all-dp-ranks): fairseq
# would otherwise send rank 0's copy to the others through torch.load(weights_only=True), which
# refuses the config it holds, so that resubmitting the same command would stop instead of resuming.
# Multi-node: run the same torchrun line on every node with --nnodes, --node_rank and
# --master_addr/--master_port (SLURM: one `srun torchrun ...` per node).
set -euo pipefail
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0; fi
: "${RANK:?run this under torchrun (RANK is not set)}" "${WORLD_SIZE:?}" "${LOCAL_RANK:?}"
exec fairseq-train "$@" --distributed-init-method env:// --distributed-world-size "$WORLD_SIZE" \
  --distributed-rank "$RANK" --device-id "$LOCAL_RANK" --distributed-no-spawn --load-checkpoint-on-all-dp-ranks
