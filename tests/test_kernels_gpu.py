"""GPU kernels against the CPU references (marked gpu; skipped without CuPy and a device).

Run on a GPU machine with ``pytest tests/test_kernels_gpu.py -m gpu`` or through
``python -m smallinit.kernels.gpu_check`` (tests + benchmarks, JSON out).
"""

import numpy as np
import pytest

import smallinit.kernels as K
from smallinit.kernels import activations, cpu

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(K.backend() != "cupy", reason="needs CuPy and a usable CUDA device"),
]

GRAM_SHAPES = [
    (1, 1),
    (0, 3),
    (2, 0, 4),
    (1, 1, 1),
    (130, 7),
    (3, 65, 17),
    (2, 64, 64),
    (5, 200, 129),
]


@pytest.fixture(scope="module")
def gpu():
    from smallinit.kernels import gpu as g

    return g


def tol(dtype):
    return {"rtol": 1e-4, "atol": 1e-5} if dtype == np.float32 else {"rtol": 1e-11, "atol": 1e-12}


@pytest.mark.parametrize("shape", GRAM_SHAPES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cosine_gram_gpu_vs_cpu(gpu, shape, dtype):
    W = np.random.default_rng(0).standard_normal(shape).astype(dtype)
    if W.size and shape[-2] > 2:
        W[..., 1, :] = 0
    got = gpu.cosine_gram(W).get()
    np.testing.assert_allclose(got, cpu.cosine_gram(W.astype(np.float64)), **tol(dtype))


def test_bf16_through_torch(gpu):
    torch = pytest.importorskip("torch")
    W = torch.randn(3, 70, 33, device="cuda").to(torch.bfloat16)
    ref = cpu.cosine_gram(W.float().cpu().numpy().astype(np.float64))
    got = K.cosine_gram(W)
    assert isinstance(got, torch.Tensor) and got.is_cuda
    np.testing.assert_allclose(got.float().cpu().numpy(), ref, atol=1e-5)


@pytest.mark.parametrize("act", activations.NAMES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("per_network", [False, True])
@pytest.mark.parametrize("d", [1, 5, 17])
def test_grouped_step_gpu_vs_cpu(gpu, act, dtype, per_network, d):
    r = np.random.default_rng(2)
    widths = [1, 0, 300, 1025, 7]
    off = K.offsets_from_widths(widths)
    G, M, n = len(widths), int(off[-1]), 9
    X = r.standard_normal((G, n, d) if per_network else (n, d))
    y, a = r.standard_normal((G, n)), r.standard_normal(M) / np.sqrt(M)
    W, b, al = r.standard_normal((M, d)), r.standard_normal(M), r.uniform(0.5, 2, G)
    args = [v.astype(dtype) for v in (X, y, a, W, b)]
    got = gpu.grouped_two_layer_step(*args, off, al.astype(dtype), act)
    want = cpu.grouped_two_layer_step_loop(X, y, a, W, b, off, al, act)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g.get(), w, **tol(dtype))


def test_grouped_step_gpu_no_bias_empty_batch_and_cpu_fallback(gpu):
    r = np.random.default_rng(3)
    empty = gpu.grouped_two_layer_step(
        np.ones((3, 2)),
        np.zeros((0, 3)),
        np.zeros(0),
        np.zeros((0, 2)),
        None,
        np.array([0]),
        np.ones(0),
        "relu",
    )
    assert empty.loss.shape == (0,) and empty.grad_b is None
    off = K.offsets_from_widths([4, 6])
    X, y = r.standard_normal((5, 40)), r.standard_normal((2, 5))
    a, W = r.standard_normal(10), r.standard_normal((10, 40))
    with pytest.warns(UserWarning, match="CPU"):
        got = gpu.grouped_two_layer_step(X, y, a, W, None, off, np.ones(2), "tanh")
    want = cpu.grouped_two_layer_step_loop(X, y, a, W, None, off, np.ones(2), "tanh")
    np.testing.assert_allclose(got.grad_W.get(), want[2], rtol=1e-11)


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
        scores, K.condensation_scores(W, amp.cpu().numpy(), top_k=3), rtol=1e-9)
