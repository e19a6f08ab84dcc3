"""``fairseq-longmem analyze memory-map``: the token mapping the memory reports against hand
computation and against the memory's own signal; μ, σ² of a trained model; one-line refusals
(the report against a re-simulation of the update: tests/core/test_memory_holdings.py)."""

import json

import pytest
import torch

from fairseq_plugins.lab.lm.timeline import Timeline, token_mass
from fairseq_plugins.modules.continuous.basis import evaluate_basis
from fairseq_plugins.modules.memory.continuous import LongTermMemory
from test_analyze_position import analyze, one_line_error
from test_inference_traps import SMALL, data, ok, train, work  # noqa: F401


def _memory(sticky: bool, tau: float = 0.5) -> LongTermMemory:
    memory = LongTermMemory(4, 2, num_basis=64, basis_widths=(0.01, 0.02), tau=tau, num_samples=64, sticky=sticky,
                            sticky_bins=32).eval()
    memory.report_holdings = True
    return memory


def _fed(memory: LongTermMemory, chunks, queries=None):
    """The state after ``chunks`` ``(L, 1, 4)`` entered ``memory`` one segment each, read by
    ``queries`` (default: random), the last chunk entered."""
    state = memory.empty_state(1, "cpu")
    for s, chunk in enumerate(chunks):
        query = queries[s] if queries is not None else torch.randn(chunk.size(0), 1, 4)
        with torch.no_grad():
            state = memory.step(query, state, chunk).state
    return memory.enter_pending(state)


@pytest.mark.parametrize("tau", [0.5, 0.25])
def test_mapping_of_k_segments_by_hand(tau):
    """Uniform sampling: after k chunks of L tokens, token i of chunk s sits at
    τ^(k-1)·(i + ½)/L for s = 0 and τ^(k-1-s)·(τ + (1 − τ)(i + 1)/L) for s ≥ 1."""
    length, k = 8, 4
    timeline = Timeline.of(_fed(_memory(False, tau), [torch.randn(length, 1, 4) for _ in range(k)]).holdings)
    expected = []
    for s in range(k):
        for i in range(length):
            base = (i + 0.5) / length if s == 0 else tau + (1 - tau) * (i + 1) / length
            expected.append(tau ** (k - 1 - s) * base)
    assert timeline.tokens.tolist() == list(range(k * length))
    assert torch.allclose(timeline.positions, torch.tensor(expected, dtype=torch.float64), atol=1e-12)


@pytest.mark.parametrize("sticky", [False, True])
def test_mapping_finds_each_token_in_the_memory_signal(sticky):
    """A memory fed a ramp (feature 0 = the token's index, feature 1 = 1, the gate opened to 1)
    holds x̄(t) ≈ index at the place the timeline gives each token; a mapping that ignores
    the sticky sampling is off by many tokens."""
    torch.manual_seed(0)
    memory = _memory(sticky)
    with torch.no_grad():
        memory.gate.weight.zero_()
        memory.gate.bias.fill_(30.0)
    length, segments = 16, 6
    chunks = []
    for s in range(segments):
        tokens = torch.arange(s * length, (s + 1) * length).float()
        chunks.append(torch.stack([tokens, torch.ones(length), torch.zeros(length), torch.zeros(length)], -1)[:, None])
    state = _fed(memory, chunks)
    timeline = Timeline.of(state.holdings)
    coefficients = state.coefficients[0]
    centers, widths = memory.basis("cpu")

    def error(tl):
        x = evaluate_basis(tl.positions.float()[None], centers, widths)[0] @ coefficients
        return (x[:, 0] / x[:, 1] - tl.tokens.float()).abs().median()

    assert error(timeline) < 2.0
    if sticky:
        uniform = Timeline.of(_fed(_memory(False), chunks).holdings)
        assert error(uniform) > 3 * error(timeline)


def test_token_mass_by_hand():
    timeline = Timeline(torch.tensor([3, 4]), torch.tensor([0.25, 0.75], dtype=torch.float64))
    mass = token_mass(torch.tensor([0.5]), torch.tensor([0.01]), timeline)  # cells [0, ½), [½, 1]
    phi = lambda z: 0.5 * (1 + torch.erf(torch.tensor(z / 2 ** 0.5, dtype=torch.float64)))  # noqa: E731
    assert torch.allclose(mass[0], torch.stack([phi(0.0) - phi(-5.0), phi(5.0) - phi(0.0)]))


@pytest.fixture(scope="module")
def text(work):
    path = work / "mm_text.txt"
    source = (work / "data" / "raw" / "test.txt").read_text(encoding="utf-8").splitlines()
    path.write_text("\n".join(source[:6]) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def memory_checkpoints(work, data):
    common = ["--task", "streaming_lm", "--arch", "infinite_former_lm", *SMALL, "--criterion", "infinite_former_kl",
              "--tokens-per-sample", "16", "--batch-size", "2", "--num-basis-functions", "16", "--num-samples", "16"]
    return {"on": train(data, work / "mm_on", *common), "off": train(data, work / "mm_off", *common,
                                                                      "--no-long-term-memory")}


@pytest.mark.full
def test_memory_map_of_a_trained_model(work, data, text, memory_checkpoints):
    out = work / "mm"
    proc = ok(analyze("memory-map", "--checkpoint", memory_checkpoints["on"], "--data", data, "--text", text,
                      "--out", out, "--max-tokens", "100", "--query-token", "70", "--top-k", "3"))
    assert "query token 70" in proc and proc.count("layer ") >= 2
    res = json.loads((out / "memory_map.json").read_text())
    n, length = len(res["tokens"]), res["segment_length"]
    assert n == 100 and length == 16 and res["memory"]["sticky"]
    for layer in res["layers"]:
        mu, sigma2 = (torch.tensor([[float("nan") if v is None else v for v in row] for row in layer[key]],
                                   dtype=torch.float64) for key in ("mu", "sigma2"))  # null: no read
        assert mu.shape == (2, n)
        assert torch.isnan(mu[:, :length]).all() and not torch.isnan(mu[:, length:]).any()
        assert ((mu[:, length:] >= 0) & (mu[:, length:] <= 1)).all()
        assert (sigma2[:, length:] >= res["memory"]["sigma2_min"] - 1e-7).all()
        for entry in layer["mapping"]:  # segment s reads every token of segments 0..s-1
            s = entry["segment"]
            assert entry["tokens"] == list(range(s * length))
            positions = torch.tensor(entry["positions"])
            assert (positions >= 0).all() and (positions <= 1).all() and (positions.diff() >= 0).all()
        assert [e["segment"] for e in layer["mapping"]] == list(range(1, -(-n // length)))
    for name in ("memory_map.png", "query_token.png"):
        assert (out / name).read_bytes()[:4] == b"\x89PNG"
    assert res["query_token"] == 70 and "--query-token 70" in res["provenance"]["command"]
    assert res["provenance"]["fairseq_longmem"] and res["provenance"]["torch"]
    # a second run into the same folder replaces the map only with --force
    before = (out / "memory_map.json").read_bytes()
    again = ["memory-map", "--checkpoint", memory_checkpoints["on"], "--data", data, "--text", text, "--out", out,
             "--max-tokens", "100"]
    one_line_error(analyze(*again), "memory_map.json", "--force")
    assert (out / "memory_map.json").read_bytes() == before and (out / "query_token.png").exists()
    ok(analyze(*again, "--force"))
    assert json.loads((out / "memory_map.json").read_text())["query_token"] is None
    assert not (out / "query_token.png").exists()  # the folder describes the last run only


@pytest.mark.full
def test_memory_map_refusals(work, data, text, memory_checkpoints):
    out = work / "mm_bad"
    base = ["--data", data, "--out", out]
    one_line_error(analyze("memory-map", "--checkpoint", memory_checkpoints["off"], "--text", text, *base),
                   "no continuous long-term memory")
    one_line_error(analyze("memory-map", "--checkpoint", memory_checkpoints["on"], "--text", text, *base,
                           "--max-tokens", "100", "--query-token", "100"), "past the text")
    short = work / "short.txt"
    short.write_text("a few words\n", encoding="utf-8")
    one_line_error(analyze("memory-map", "--checkpoint", memory_checkpoints["on"], "--text", short, *base),
                   "than one segment")
    assert not out.exists()


@pytest.mark.full
def test_a_torch_file_that_is_no_checkpoint_is_one_line(work, data, text):
    """A plain state dict (a Hugging Face pytorch_model.bin) used to end in fairseq's KeyError:
    'best_loss' traceback: one line naming the file and the fix, exit status 2, no --out."""
    hf = work / "pytorch_model.bin"
    torch.save({"transformer.wte.weight": torch.zeros(8, 4)}, hf)
    out = work / "mm_hf"
    for verb, extra in (("memory-map", ["--text", text]), ("position", [])):
        one_line_error(analyze(verb, "--checkpoint", hf, "--data", data, "--out", out, *extra),
                       f"{hf} is a torch file but not a fairseq checkpoint: it is a plain state dict",
                       "pass a checkpoint_*.pt written by fairseq-train with --checkpoint")
    assert not out.exists()
