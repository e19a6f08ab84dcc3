"""Generation mode of scripts/benchmark.py (``--modes generate``; docs/generation.md):
milliseconds per generated token, the incremental state's size and the prompt's read time
after a prompt of each ``--prompts`` length, every arm with its own incremental decoding
(transformer_lm: fairseq's key/value cache; fastformer_lm: its constant carry;
infinite_former_lm: its segment caches, the prompt read in one call)."""

import resource
import statistics
import time

import arms as arm_registry
from results_table import Column, markdown


def measure_generation(arm, prompt_len, args, build):
    """Runs in a worker: ms per generated token (median over ``--gen-tokens`` greedy steps after
    a prompt of ``prompt_len`` tokens), the incremental state's size, the prefill time.
    ``build(arm, args, context)`` makes the model (benchmark.build)."""
    import torch

    torch.manual_seed(0)
    device = torch.device(args.device)
    total = prompt_len + args.gen_tokens + 1
    model = build(arm, args, total).to(device).eval()
    if args.fp16:
        model = model.half()
    buf = torch.randint(4, args.vocab, (1, total), device=device)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    state = {}

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    with torch.no_grad():
        t0 = time.perf_counter()
        if arm.startswith("infinite_former_lm"):  # chunked prefill: the whole prompt in one call
            model.decoder(buf[:, :prompt_len], incremental_state=state, features_only=True)
        else:  # their incremental decoders read the last token of the prefix only
            for end in range(1, prompt_len + 1):
                model.decoder(buf[:, :end], incremental_state=state, features_only=True)
        sync()
        prefill = time.perf_counter() - t0
        times = []
        for end in range(prompt_len + 1, prompt_len + args.gen_tokens + 1):
            t0 = time.perf_counter()
            logits, _ = model.decoder(buf[:, :end], incremental_state=state)
            buf[:, end] = logits[:, -1].argmax(-1)
            sync()
            times.append(time.perf_counter() - t0)
    numbers = sum(t.numel() for part in state.values() for t in part.values() if t is not None)
    peak = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - base, 0.0)
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated() / 2**20
    return {"ms_per_token": 1000 * statistics.median(times), "tokens_per_s": 1 / statistics.median(times),
            "state_mb": numbers * 4 / 2**20, "prefill_s": prefill, "peak_mem_mb": peak,
            "params": sum(p.numel() for p in model.parameters())}


def generation_rows(args, arms, run_worker):
    """One worker per (prompt length, arm): the rows of the generate table."""
    rows = []
    for prompt_len in (int(x) for x in args.prompts.split(",")):
        for arm in (a for a in arm_registry.names("benchmark") if a in arms and a != "infinite_former_lm (LTM off)"):
            if not arm.startswith("infinite") and prompt_len > args.token_prefill_max:
                result = {"error": f"not run: token-by-token prompt > --token-prefill-max {args.token_prefill_max}"}
            else:
                result = run_worker({"arm": arm, "mode": "generate", "context": prompt_len}, args)
            rows.append({"mode": "generate", "context": prompt_len, "arm": arm, **result})
            print(f"generate {prompt_len:6d} {arm:30s} " + (
                f"{result['ms_per_token']:8.2f} ms/token, state {result['state_mb']:8.2f} MB, "
                f"peak {result['peak_mem_mb']:8.1f} MB, prompt read in {result['prefill_s']:.1f} s"
                if "error" not in result else result["error"]), flush=True)
    return rows


GENERATION_COLUMNS = [Column("context", "prompt"), Column("arm", "arm"), Column("ms_per_token", "ms / token", ".2f"),
                      Column("state_mb", "incremental state MB", ".2f"), Column("peak_mem_mb", "peak MB", ".1f"),
                      Column("prefill_s", "prompt read (s)", ".1f")]


def markdown_lines(rows):
    """The generate table (a failed measurement: its error in the ms/token column)."""
    shown = [{"context": r["context"], "arm": r["arm"], "ms_per_token": r["error"], "state_mb": "",
              "peak_mem_mb": "", "prefill_s": ""} if "error" in r else r for r in rows]
    return ["### generate (incremental decoding after a prompt)", "", markdown(shown, GENERATION_COLUMNS), ""]
