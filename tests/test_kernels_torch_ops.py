"""autograd wrappers of smallinit.kernels against torch's own autograd / gradcheck."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from smallinit.kernels import offsets_from_widths, torch_ops  # noqa: E402


def test_cosine_gram_gradcheck_and_reference():
    g = torch.Generator().manual_seed(0)
    W = torch.randn(2, 5, 3, dtype=torch.float64, generator=g, requires_grad=True)
    assert torch.autograd.gradcheck(torch_ops.cosine_gram, (W,))
    N = W / W.norm(dim=-1, keepdim=True)
    torch.testing.assert_close(torch_ops.cosine_gram(W), N @ N.transpose(-1, -2))


def test_cosine_gram_zero_row_gets_zero_grad():
    W = torch.randn(4, 3, dtype=torch.float64)
    W[1] = 0
    W.requires_grad_(True)
    torch_ops.cosine_gram(W).square().sum().backward()
    assert torch.all(W.grad[1] == 0) and torch.all(torch.isfinite(W.grad))


def test_bmm_gradcheck():
    g = torch.Generator().manual_seed(1)
    a = torch.randn(3, 4, 5, dtype=torch.float64, generator=g, requires_grad=True)
    b = torch.randn(3, 5, 2, dtype=torch.float64, generator=g, requires_grad=True)
    assert torch.autograd.gradcheck(torch_ops.bmm, (a, b))
    torch.testing.assert_close(torch_ops.bmm(a, b), a @ b)


@pytest.mark.parametrize("act", ["relu", "tanh", "x2tanh", "gelu"])
def test_grouped_loss_gradients_match_torch_autograd(act):
    g = torch.Generator().manual_seed(2)
    widths = [3, 0, 4]
    off = offsets_from_widths(widths)
    M, n, d = 7, 5, 2
    X = torch.randn(n, d, dtype=torch.float64, generator=g)
    y = torch.randn(3, n, dtype=torch.float64, generator=g)
    a = torch.randn(M, dtype=torch.float64, generator=g, requires_grad=True)
    W = torch.randn(M, d, dtype=torch.float64, generator=g, requires_grad=True)
    b = torch.randn(M, dtype=torch.float64, generator=g, requires_grad=True)
    alpha = np.array([0.5, 1.0, 2.0])
    weights = torch.tensor([1.0, 3.0, -2.0], dtype=torch.float64)
    (
        torch_ops.grouped_two_layer_loss(X, y, a, W, b, offsets=off, alpha=alpha, activation=act)
        * weights
    ).sum().backward()
    fn = {
        "relu": torch.relu,
        "tanh": torch.tanh,
        "gelu": torch.nn.functional.gelu,
        "x2tanh": lambda z: z * z * torch.tanh(z),
    }[act]
    a2, W2, b2 = (t.detach().clone().requires_grad_(True) for t in (a, W, b))
    total = 0
    for k in range(3):
        lo, hi = off[k], off[k + 1]
        f = fn(X @ W2[lo:hi].T + b2[lo:hi]) @ a2[lo:hi] / alpha[k]
        total = total + weights[k] * 0.5 * torch.mean((f - y[k]) ** 2)
    total.backward()
    for got, want in ((a, a2), (W, W2), (b, b2)):
        torch.testing.assert_close(got.grad, want.grad, rtol=1e-10, atol=1e-12)
