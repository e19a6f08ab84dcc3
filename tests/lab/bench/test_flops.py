"""The FLOP bound beside the benchmark's speed ratios (fairseq_plugins/lab/bench/flops.py;
docs/benchmark.md): the counter against hand counts of one-layer models (attention written with
explicit matrix products and with the CPU's fused attention), and ``bench paired``'s table
carrying FLOPs off ÷ on and measured ÷ that, on a tiny run.

Hand counts: 2 FLOPs per multiply-add; a product (m × k)(k × n) is 2mkn, and its backward two more
products of the same size (one where only the weight needs a gradient).
"""

import json

import pytest
import torch
import torch.nn.functional as F

from fairseq_plugins import cli
from fairseq_plugins.lab.bench import flops


class OneLayer(torch.nn.Module):
    """Single-head attention with q, k, v and output projections (no biases), written out with
    ``@`` or through ``F.scaled_dot_product_attention``, causal or not."""

    def __init__(self, d, fused, causal=False):
        super().__init__()
        self.q, self.k, self.v, self.o = (torch.nn.Linear(d, d, bias=False) for _ in range(4))
        self.fused, self.causal = fused, causal

    def forward(self, x):
        q, k, v = self.q(x), self.k(x), self.v(x)
        if self.fused:
            out = F.scaled_dot_product_attention(q[:, None], k[:, None], v[:, None], is_causal=self.causal)[:, 0]
        else:
            scores = q @ k.transpose(1, 2) / q.size(-1) ** 0.5
            out = scores.softmax(-1) @ v
        return self.o(out)


def hand_count(b, t, d):
    """Forward + backward of :class:`OneLayer` on an input that needs no gradient, loss = sum."""
    projections = 2 * b * t * d * d  # one (bt × d)(d × d) product
    attention = 2 * b * t * t * d  # q kᵀ, or p v: (t × d)(d × t), (t × t)(t × d) per example
    forward = 4 * projections + 2 * attention
    # backward: o's weight and input gradients; p v's two gradients, q kᵀ's two; q, k, v: weights only
    backward = 2 * projections + 4 * attention + 3 * projections
    return forward + backward


@pytest.mark.parametrize("fused, causal", [(False, False), (True, False), (True, True)])
def test_the_counter_matches_a_hand_count_of_one_attention_layer(fused, causal):
    torch.manual_seed(0)
    b, t, d = 2, 6, 8
    model = OneLayer(d, fused, causal)
    x = torch.randn(b, t, d)
    counted = flops.count(lambda: model(x).sum().backward())
    # 18 b t d² + 12 b t² d = 13,824 + 6,912; the CPU's fused kernel counted as torch counts its
    # GPU kernels: the whole t × t score matrix, causal or not, and its backward recomputes q kᵀ
    recomputed = 2 * b * t * t * d if fused else 0
    assert counted == hand_count(b, t, d) + recomputed == 20_736 + recomputed


def test_a_linear_layer_and_its_input_gradient():
    """A (bt × d_in)(d_in × d_out) product with a bias: 2 b t d_in d_out forward; backward the
    input's and the weight's gradients, each as many (the bias adds no product)."""
    torch.manual_seed(0)
    layer = torch.nn.Linear(8, 3)
    x = torch.randn(4, 5, 8, requires_grad=True)
    assert flops.count(lambda: layer(x).sum().backward()) == 3 * 2 * 4 * 5 * 8 * 3


def test_bound_is_the_flops_ratio_and_the_measured_share_of_it():
    # a speed ratio t_B ÷ t_A of A = 120 GFLOP against B = 90 GFLOP: time ∝ FLOPs would give 0.75
    assert flops.bound(0.6, 120e9, 90e9) == pytest.approx({"flop_ratio": 0.75, "efficiency": 0.8})
    assert flops.bound(None, 120e9, 90e9) == {"flop_ratio": 0.75}
    assert flops.bound(0.6, None, 90e9) == {} and flops.bound(0.6, 0, 90e9) == {}
    assert flops.gflop(2_345_678_901) == "2.346" and flops.gflop(1_234_567_890_123) == "1,234.6"


TINY = ["--threads", "1", "--clock", "cpu", "--repeats", "1", "--warmup", "0", "--layers", "1", "--width", "16",
        "--heads", "2", "--ffn", "32", "--vocab", "40", "--num-basis", "8", "--segment", "8", "--paired-segments", "3"]


@pytest.fixture
def inline(monkeypatch):
    from fairseq_plugins.lab.bench import worker

    monkeypatch.setattr(worker, "run", lambda function, args, timeout=None, **kwargs: function(args, **kwargs))


def _row_cells(table, first_cell):
    lines = [line for line in table.splitlines() if line.startswith(f"| {first_cell} |")]
    assert len(lines) == 1, table
    return [cell.strip() for cell in lines[0].strip("|").split("|")]


@pytest.mark.parametrize("extra, first, second", [
    ((), "memory on", "memory off"),
    (("--memory-read", "mixture", "--paired-against", "location"), "mixture read", "location read"),
])
def test_the_paired_table_carries_the_flop_bound(tmp_path, capsys, inline, extra, first, second):
    status = cli.main(["bench", "paired", *TINY, *extra, "--paired-streams", "2", "--out", str(tmp_path)])
    out = capsys.readouterr()
    assert status == 0, out.err
    row = json.loads((tmp_path / "paired.json").read_text())["ltm_paired"][0]
    assert row["on_flops"] > 0 and row["off_flops"] > 0
    assert row["flop_ratio"] == pytest.approx(row["off_flops"] / row["on_flops"], rel=1e-12)
    assert row["efficiency"] == pytest.approx(row["speed_ratio"] / row["flop_ratio"], rel=1e-12)
    if not extra:  # the memory adds products: the twin's FLOPs are fewer
        assert row["flop_ratio"] < 1
    table = (tmp_path / "paired.md").read_text()
    header = [cell.strip() for cell in table.splitlines()[table.splitlines().index(
        next(line for line in table.splitlines() if line.startswith("| streams |")))].strip("|").split("|")]
    cells = dict(zip(header, _row_cells(table, 2)))
    assert cells[f"FLOP-proportional (FLOPs {second} ÷ {first})"] == f"{row['flop_ratio']:.3f}"
    assert cells["efficiency (measured ÷ FLOP-proportional)"] == f"{row['efficiency']:.3f}"
    assert cells[f"speed {first} ÷ {second} (median)"] == f"{row['speed_ratio']:.3f}"
    assert cells[f"{first}, GFLOP / step"] == flops.gflop(row["on_flops"])
    assert f"FLOPs of {second} ÷ FLOPs of {first}" in table
    assert f"FLOP-proportional {row['flop_ratio']:.3f}, efficiency {row['efficiency']:.3f}" in out.out


def test_the_paired_flops_are_one_step_of_each_model():
    """The counts are those of one training step of the two models measured (memory filled)."""
    from fairseq_plugins.lab.bench import cli as bench_cli, models, paired

    args = bench_cli._parser("fairseq-longmem bench")[1]["paired"].parse_args(TINY)
    args.paired_streams, args.verb = [1], "paired"
    got = paired.measure(args, streams=1)
    on, twin = models.memory_twins()
    device = torch.device("cpu")
    counts = {}
    for name, arm in (("on", on), ("off", twin)):
        torch.manual_seed(0)
        model = models.model_for(arm, args, args.segment, device, True)
        tokens = torch.randint(4, args.vocab, (1, 3 * args.segment))
        model.reset_memory("k")
        for s in range(2):  # the memory as the timed segments leave it: filled, then contracted
            models.step(model, tokens[:, s * args.segment:(s + 1) * args.segment], args, device, True, memory_key="k")
        counts[name] = flops.count(lambda: models.step(model, tokens[:, 2 * args.segment:], args, device, True,
                                                       memory_key="k"))
    assert (got["on_flops"], got["off_flops"]) == (counts["on"], counts["off"])
