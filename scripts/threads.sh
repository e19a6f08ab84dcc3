# Sourced by the shell scripts: the CPU thread count of torch.
#   set_threads PROG [cpu|cuda] THREADS (a positive integer; default 1 on a CPU, torch's own choice
#                               on a CUDA machine) is exported as OMP_NUM_THREADS and
#                               MKL_NUM_THREADS, which torch reads when it starts; one line says so
#                               (it goes into the script's log). A bad THREADS: one error line, exit 2.
#                               On a CPU it also keeps freed memory in the process (glibc's mmap and
#                               trim thresholds, unless already set): otherwise every tensor of 32 MB
#                               or more is page-faulted in anew at each use, which halves the summarizer
#                               encoder's training speed at 64k-token documents (docs/benchmark.md).
#                               Without cpu|cuda: cuda_visible decides. Both must be set before the
#                               Python process starts, so they stay here.
#   cuda_visible                succeeds when this process can see an NVIDIA GPU (the driver lists one
#                               and CUDA_VISIBLE_DEVICES hides none of it), without starting Python;
#                               `fairseq-longmem arms train|eval` ask torch the same and pass --cpu if not.
#   torch_cuda                  succeeds when torch can use a CUDA device; asks torch (it starts Python
#                               and imports torch) only where cuda_visible finds a GPU or a ROCm device
#                               (/dev/kfd) is present, and fails at once elsewhere.
cuda_visible() {
  case "${CUDA_VISIBLE_DEVICES-all}" in ""|-1) return 1 ;; esac
  compgen -G "/proc/driver/nvidia/gpus/*" > /dev/null || nvidia-smi -L > /dev/null 2>&1
}
torch_cuda() {
  { cuda_visible || [ -e /dev/kfd ]; } || return 1
  python -c "import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null
}
set_threads() {
  local device=${2:-}
  if [ -z "$device" ]; then if cuda_visible; then device=cuda; else device=cpu; fi; fi
  if [ -n "${THREADS:-}" ]; then
    [[ "$THREADS" =~ ^[1-9][0-9]*$ ]] || { echo "$1: error: THREADS must be a positive integer, not '$THREADS'" >&2; exit 2; }
  elif [ "$device" = cpu ]; then
    THREADS=1
  fi
  if [ "$device" = cpu ]; then
    export MALLOC_MMAP_THRESHOLD_="${MALLOC_MMAP_THRESHOLD_:-4294967296}" \
           MALLOC_TRIM_THRESHOLD_="${MALLOC_TRIM_THRESHOLD_:-1099511627776}"
  fi
  if [ -n "${THREADS:-}" ]; then
    export THREADS OMP_NUM_THREADS=$THREADS MKL_NUM_THREADS=$THREADS
    echo "$1: THREADS=$THREADS (torch CPU threads, via OMP_NUM_THREADS)"
  else
    echo "$1: THREADS unset: torch's own number of CPU threads (CUDA device)"
  fi
}
