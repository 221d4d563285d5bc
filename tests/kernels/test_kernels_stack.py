"""Batched measurements of a stack of matrices (kernels/stack.py) on the CPU path: exactly the
per-matrix measurements, for NumPy and torch inputs."""

import numpy as np
import pytest

import smallinit.kernels as K


def stack(seed=0, B=5, m=40, d=16, dtype=np.float64):
    r = np.random.default_rng(seed)
    W = r.standard_normal((B, m, d))
    W[1, 3] = 0  # a zero row
    W[2] = np.outer(r.uniform(0.5, 2, m), r.standard_normal(d))  # rank one: one cluster
    W[3, :20] = W[3, 0] * r.uniform(0.5, 2, (20, 1))  # half the rows on one line
    W[4] = 0  # an all-zero matrix
    return W.astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_measure_stack_equals_measure_all_per_matrix(dtype):
    W = stack(dtype=dtype)
    got = K.measure_stack(W)
    for b in range(W.shape[0]):
        want = K.measure_all(W[b])
        assert {k: got[k][b] for k in want} == want, b
    assert got["cluster_count"][2] == 1 and got["effective_rank"][2] == pytest.approx(1.0, rel=1e-5)
    assert got["cluster_count"][3] == 21 and got["effective_rank"][4] == 0


def test_measure_stack_threshold_and_torch_input():
    torch = pytest.importorskip("torch")
    W = stack(1)
    got = K.measure_stack(torch.from_numpy(W).float(), threshold=0.5)
    for b in range(W.shape[0]):
        want = K.measure_all(W[b].astype(np.float32), threshold=0.5)
        assert {k: got[k][b] for k in want} == want, b


def test_condensation_scores_equal_per_matrix_scores():
    W = stack(2)[:4]
    amp = np.abs(np.random.default_rng(3).standard_normal(W.shape[:2]))
    got = K.condensation_scores(W, amp, top_k=2, threshold=0.9)
    want = [K.condensation_score(W[b], amp[b], top_k=2, threshold=0.9) for b in range(4)]
    assert got.tolist() == want
    assert got[2] == pytest.approx(1.0)  # rank one: all amplitude in one cluster


@pytest.mark.parametrize(
    "call,fragment",
    [
        (lambda: K.measure_stack(np.ones((3, 4))), "stack"),
        (lambda: K.measure_stack(np.ones((2, 3, 4)), threshold=1.5), "threshold"),
        (lambda: K.condensation_scores(np.ones((2, 3, 4)), np.ones((2, 4))), "amplitude"),
    ],
)
def test_bad_stacks_are_one_line_errors(call, fragment):
    with pytest.raises(ValueError, match=fragment) as err:
        call()
    assert "\n" not in str(err.value)


class _NumpyAsCupy:
    """NumPy standing in for CuPy, so the device path's logic runs on the CPU."""

    def __getattr__(self, name):
        return getattr(np, name)

    asnumpy = staticmethod(np.asarray)


@pytest.fixture
def device_path_on_numpy(monkeypatch):
    from smallinit.kernels import cpu
    from smallinit.kernels import stack as S
    from smallinit.kernels.backend import to_numpy

    monkeypatch.setattr(S, "_device", lambda: (_NumpyAsCupy(), cpu.cosine_gram, to_numpy))
    monkeypatch.setattr(S, "_on_gpu", lambda W: True)


def test_device_path_logic_matches_the_cpu_path(device_path_on_numpy):
    """The device path (batched Gram, bit-packed adjacency, host leader loop, batched SVD)
    run with NumPy as the array module gives the CPU path's values."""
    W = stack(4)
    from smallinit.kernels import stack as S

    got = K.measure_stack(W)
    want = {k: np.array([K.measure_all(w)[k] for w in W]) for k in got}
    for k in got:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-12, atol=1e-15, err_msg=k)
    amp = np.abs(np.random.default_rng(5).standard_normal(W.shape[:2]))
    amp[4] = 1.0  # the all-zero matrix still has amplitude (its rows have no cluster)
    np.testing.assert_allclose(
        K.condensation_scores(W[:4], amp[:4], top_k=3),
        [K.condensation_score(W[b], amp[b], top_k=3) for b in range(4)],
        rtol=1e-12,
    )
    assert S._device_singular_values(np.zeros((2, 0, 3))).shape == (2, 0)
