"""GPU kernels against the CPU references (marked gpu; skipped without CuPy and a device).

Run on a GPU machine with ``pytest tests/kernels/test_kernels_gpu.py -m gpu`` or through
``python -m smallinit.tools.gpu_kernels`` (tests + benchmarks, JSON out).
"""

import kernel_cases as cases
import numpy as np
import pytest

import smallinit.kernels as K

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(K.backend() != "cupy", reason="needs CuPy and a usable CUDA device"),
]


@pytest.fixture(scope="module")
def gpu():
    from smallinit.kernels import gpu as g

    return g


@pytest.mark.parametrize("path", ["ours", "library"])
@pytest.mark.parametrize("shape", cases.GRAM_SHAPES)
@pytest.mark.parametrize("dtype", cases.DTYPES)
def test_cosine_gram_gpu_vs_cpu(gpu, shape, dtype, path):
    cases.check_cosine_gram(
        lambda W: gpu.cosine_gram(W, path).get(), cases.gram_input(shape, dtype), dtype
    )


def test_bf16_through_torch(gpu):
    torch = pytest.importorskip("torch")
    W = torch.randn(3, 70, 33, device="cuda").to(torch.bfloat16)
    got = K.cosine_gram(W)
    assert isinstance(got, torch.Tensor) and got.is_cuda
    cases.check_cosine_gram(
        lambda _: got.float().cpu().numpy(), W.float().cpu().numpy(), np.float32
    )
    for path in ("ours", "library"):  # the library path: cuBLAS bf16 on the tensor cores
        one = gpu.cosine_gram(W, path)
        cases.check_cosine_gram(lambda _, g=one: g.get(), W.float().cpu().numpy(), np.float32)


@pytest.mark.parametrize(
    ("act", "dtype", "per_network", "d"), cases.GROUPED_CASES, ids=cases.GROUPED_IDS
)
def test_grouped_step_gpu_vs_cpu(gpu, act, dtype, per_network, d):
    def step(*args):
        return [None if o is None else o.get() for o in gpu.grouped_two_layer_step(*args)]

    cases.check_grouped_step(step, cases.grouped_inputs(dtype, per_network, d), act)


def test_grouped_step_gpu_no_bias_empty_batch_and_cpu_fallback(gpu):
    def step(*args):
        out = gpu.grouped_two_layer_step(*args)
        return out._replace(**{k: v.get() for k, v in out._asdict().items() if v is not None})

    cases.check_no_bias_empty_batch_and_cpu_fallback(step)


def test_torch_cuda_roundtrip_is_on_device():
    torch = pytest.importorskip("torch")
    W = torch.randn(50, 8, device="cuda", dtype=torch.float64)
    G = K.cosine_gram(W)
    assert G.is_cuda
    Wn = W / W.norm(dim=1, keepdim=True)
    torch.testing.assert_close(G, Wn @ Wn.T)


def _stack(seed=0, B=6, m=130, d=48):
    r = np.random.default_rng(seed)
    W = r.standard_normal((B, m, d))
    W[1, 3] = 0
    W[2] = np.outer(r.uniform(0.5, 2, m), r.standard_normal(d))
    W[3, :60] = W[3, 0] * r.uniform(0.5, 2, (60, 1))
    return W


def test_measure_stack_on_cuda_tensors_runs_on_the_device(monkeypatch):
    """CUDA torch stacks go to CuPy by DLPack (the stack itself never reaches measure._np,
    the host converter) and agree with the NumPy path of the same values."""
    torch = pytest.importorskip("torch")
    from smallinit.kernels import measure

    W = _stack()
    Wc = torch.from_numpy(W).cuda()
    real = measure._np

    def host_guard(x, name):
        assert name != "W", "the stack was copied to the host"
        return real(x, name)

    monkeypatch.setattr(measure, "_np", host_guard)
    got = K.measure_stack(Wc)
    amp = torch.rand(W.shape[:2], dtype=torch.float64, device="cuda") + 0.1
    scores = K.condensation_scores(Wc, amp, top_k=3)
    monkeypatch.undo()
    want = K.measure_stack(W)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-9, atol=1e-12, err_msg=k)
    np.testing.assert_allclose(
        scores, K.condensation_scores(W, amp.cpu().numpy(), top_k=3), rtol=1e-9
    )
