"""AdamW for a population: one optimizer over parameters stacked on a leading member axis,
each member with its own hyper-parameters, as if each had its own ``torch.optim.AdamW``.

A stacked parameter P has shape (M, …): row m is member m's tensor. Each member m has its
learning rate η_m(s) (set before every step, :meth:`PopulationAdamW.set_rates`), betas
(β₁, β₂)_m, ε_m, decoupled weight decay λ_m on the parameters it decays (≥ 2-d ones, or all
with ``train.decay_all``; :func:`smallinit.llm.training.train.make_optimizer`) and a clip
norm c_m (0: off). Step s (1-based) does, for every member independently:

* clip (``torch.nn.utils.clip_grad_norm_``): n_m = ‖(‖g_{m,p}‖₂)_p‖₂ over the member's
  parameters p, and every g_{m,p} ← g_{m,p} · min(1, c_m / (n_m + 10⁻⁶));
* AdamW (Loshchilov & Hutter 2019, as ``torch.optim.AdamW``):
  θ ← θ(1 − η λ);  m ← m + (1 − β₁)(g − m);  v ← β₂ v + (1 − β₂) g²;
  θ ← θ − η/(1 − β₁ˢ) · m / (√v / √(1 − β₂ˢ) + ε).

Rows never mix: a member's update reads only its own row of every tensor, so a member whose
numbers are no longer finite leaves the others untouched. The per-member scalars are
formed in float64 and cast to the parameters' dtype, as PyTorch forms them in Python
floats; in float64 the update equals ``torch.optim.AdamW``'s to rounding (~1e-16
relative per step), in float32 to a few ulps (the fused kernel orders its products
differently).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

CLIP_EPS = 1e-6  # clip_grad_norm_'s guard in c / (n + ε)


def per_member(values: Sequence[float], like: torch.Tensor, dtype=torch.float64) -> torch.Tensor:
    """``values`` (one per member) as a tensor shaped (M, 1, …, 1) to broadcast on ``like``."""
    return _rows(torch.tensor(list(values), dtype=dtype, device=like.device), like)


def _rows(values: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """A per-member vector (M,) viewed as (M, 1, …, 1) to broadcast on ``like``."""
    return values.view((-1,) + (1,) * (like.dim() - 1))


class PopulationAdamW(torch.optim.Optimizer):
    """AdamW with per-member hyper-parameters and gradient clipping (module docstring).

    ``params``: the stacked parameters (M, …); ``decays[i]``: the weight decay λ of each
    element of ``params[i]`` (a tensor of its shape, or one that broadcasts to it: 0 where
    the member does not decay that parameter); ``betas``, ``eps``, ``clip``: one value per
    member. The step count is the population's (every member takes every step)."""

    def __init__(
        self,
        params: Sequence[torch.Tensor],
        *,
        decays: Sequence[torch.Tensor],
        betas: Sequence[tuple[float, float]],
        eps: Sequence[float],
        clip: Sequence[float],
    ):
        params = list(params)
        super().__init__(params, {})
        if len(decays) != len(params):
            raise ValueError(f"{len(decays)} weight-decay rows for {len(params)} parameters")
        first = params[0]
        self.n = first.shape[0]
        self.decays = list(decays)
        self.beta1 = per_member([b[0] for b in betas], first).flatten()
        self.beta2 = per_member([b[1] for b in betas], first).flatten()
        self.eps = per_member(eps, first).flatten()
        self.clip = per_member(clip, first).flatten()
        self.clipping = any(c > 0 for c in clip)
        self.rates = torch.zeros_like(self.beta1)
        self.steps = 0
        for p in params:
            self.state[p] = {
                "exp_avg": torch.zeros_like(p, memory_format=torch.preserve_format),
                "exp_avg_sq": torch.zeros_like(p, memory_format=torch.preserve_format),
            }

    @property
    def params(self) -> list[torch.Tensor]:
        return self.param_groups[0]["params"]

    def set_rates(self, rates: Sequence[float]) -> None:
        """Every member's learning rate for the next step."""
        if len(rates) != self.n:
            raise ValueError(f"{len(rates)} learning rates for {self.n} members")
        self.rates = per_member(rates, self.params[0]).flatten()

    @torch.no_grad()
    def clip_grads(self) -> None:
        """Each member's gradients scaled to its global norm ``clip`` (0: untouched)."""
        grads = [p.grad for p in self.params if p.grad is not None]
        if not grads or not self.clipping:
            return
        norms = torch.stack([torch.linalg.vector_norm(g.flatten(1), dim=1) for g in grads])
        total = torch.linalg.vector_norm(norms, dim=0)  # (M,)
        limit = self.clip.to(total.dtype)
        coef = torch.clamp(limit / (total + CLIP_EPS), max=1.0)
        coef = torch.where(limit > 0, coef, torch.ones_like(coef))
        for g in grads:
            g.mul_(_rows(coef, g).to(g.dtype))

    @torch.no_grad()
    def step(self, closure=None):
        if closure is not None:
            raise ValueError("PopulationAdamW.step takes no closure")
        self.clip_grads()
        self.steps += 1
        s = self.steps
        lr, b1, b2 = self.rates, self.beta1, self.beta2
        step_size = lr / (1 - b1**s)
        root2 = torch.sqrt(1 - b2**s)
        for p, decay in zip(self.params, self.decays, strict=True):
            g = p.grad
            if g is None:
                continue
            state = self.state[p]
            m, v = state["exp_avg"], state["exp_avg_sq"]
            dt = p.dtype
            p.mul_((1 - _rows(lr, p) * decay).to(dt))
            m.lerp_(g, _rows(1 - b1, p).to(dt))
            v.mul_(_rows(b2, p).to(dt)).add_(g * g * _rows(1 - b2, p).to(dt))
            denom = (v.sqrt() / _rows(root2, p).to(dt)).add_(_rows(self.eps, p).to(dt))
            p.sub_(_rows(step_size, p).to(dt) * m / denom)
