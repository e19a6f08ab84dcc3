"""The FLOPs of a measured step, and the speed ratio they alone would give (docs/benchmark.md).

``bench paired`` and ``bench gpt2`` count each model's FLOPs of one measured step (forward +
backward) once, outside the timing, with ``torch.utils.flop_counter.FlopCounterMode``, and
print beside each measured speed ratio t_B ÷ t_A (A's speed as a share of B's) the ratio the
FLOPs alone would give, FLOPs_B ÷ FLOPs_A (:func:`bound`), and the efficiency, measured ÷
FLOP-proportional: 1 where time follows the FLOPs, below 1 where A spends more time per FLOP
than B (calls, elementwise passes, memory traffic).

What is counted: torch's counter counts the matrix products (``mm``, ``addmm``, ``bmm``,
``baddbmm``), convolutions and the fused attention kernels, 2 FLOPs per multiply-add, and no
elementwise operation (``exp``, ``erf``, softmax, layer norm, the optimizer's update). Its
registry lacks the CPU's fused attention (``_scaled_dot_product_flash_attention_for_cpu`` and
its backward), which ``scaled_dot_product_attention`` runs on a CPU: :data:`CPU_ATTENTION`
counts them with torch's own formulas for the GPU kernels (the whole score matrix, causal or not).
"""

from typing import Callable, Dict, Optional


def _attention(query, key, value, *args, out_shape=None, **kwargs) -> int:
    from torch.utils import flop_counter

    return flop_counter.sdpa_flop_count(query, key, value)


def _attention_backward(grad_out, query, key, value, *args, out_shape=None, **kwargs) -> int:
    from torch.utils import flop_counter

    return flop_counter.sdpa_backward_flop_count(grad_out, query, key, value)


def _cpu_attention() -> Dict:
    """{the CPU's fused attention forward and backward: torch's formulas of the GPU kernels} (the
    counter passes them the tensors' shapes)."""
    import torch

    aten = torch.ops.aten
    formulas = {"_scaled_dot_product_flash_attention_for_cpu": _attention,
                "_scaled_dot_product_flash_attention_for_cpu_backward": _attention_backward}
    return {getattr(aten, name): formula for name, formula in formulas.items() if hasattr(aten, name)}


def counter():
    """A ``FlopCounterMode`` that prints nothing and counts the CPU's fused attention too."""
    from torch.utils.flop_counter import FlopCounterMode

    return FlopCounterMode(display=False, custom_mapping=_cpu_attention())


def count(function: Callable[[], object]) -> int:
    """The FLOPs ``function()`` runs (forward and whatever backward it calls), by :func:`counter`."""
    with counter() as mode:
        function()
    return int(mode.get_total_flops())


def bound(measured: Optional[float], flops_a: Optional[int], flops_b: Optional[int]) -> Dict[str, float]:
    """For a measured speed ratio t_B ÷ t_A of A against B: ``{"flop_ratio": FLOPs_B ÷ FLOPs_A,
    "efficiency": measured ÷ flop_ratio}`` (empty where a count or the measurement is missing)."""
    if not flops_a or not flops_b:
        return {}
    out = {"flop_ratio": flops_b / flops_a}
    if measured is not None:
        out["efficiency"] = measured / out["flop_ratio"]
    return out


def gflop(flops: float) -> str:
    """FLOPs as GFLOP for a table: three decimals below 10, one above."""
    value = flops / 1e9
    return f"{value:.3f}" if value < 10 else f"{value:,.1f}"


def convention(first: str, second: str, step: str = "step") -> str:
    """The sentence a table puts above its columns: which ratio is which."""
    return (f"Speed ratio: t({second}) ÷ t({first}) per {step}, {first}'s speed as a share of {second}'s; "
            f"FLOP-proportional: the ratio the FLOPs alone would give, FLOPs of {second} ÷ FLOPs of {first}; "
            f"efficiency: measured ÷ FLOP-proportional (below 1: {first} spends more time per FLOP than {second}). "
            f"FLOPs: forward + backward of one measured {step}, counted once outside the timing by torch's "
            "FlopCounterMode (matrix products, convolutions, attention; no elementwise operation).")
