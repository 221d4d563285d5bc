"""Post-norm blocks (``model.norm_position="post"``, docs/science.md §6): the block
computes N₂(h + MLP(h)) with h = N₁(x + Attn(x)), checked against a reference written out
here from the modules' own weights; pre-norm is unchanged and keeps its run keys; one head
works; the held-out-pair classifier on constructed predictions."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from smallinit.core.config import config_to_dict, load_config, override
from smallinit.core.errors import ConfigError
from smallinit.core.runs import config_key
from smallinit.llm.data import anchor
from smallinit.llm.model.transformer import Transformer
from smallinit.llm.run_config import ModelConfig
from smallinit.llm.training.anchor import KIND, VERSION, AnchorConfig
from smallinit.study.experiments.anchor_scan import cell_config


def tiny(**kw) -> ModelConfig:
    base = dict(
        vocab_size=16,
        context=6,
        d_model=8,
        n_layers=2,
        n_heads=2,
        positions="learned",
        mlp="gelu",
        norm="layernorm",
    )
    return ModelConfig(**{**base, **kw})


def layer_norm(x, mod):
    """(x − mean) / √(var + ε) · g + b, written out (biased variance, as LayerNorm)."""
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    out = (x - mu) / torch.sqrt(var + mod.eps) * mod.weight
    return out + mod.bias if mod.bias is not None else out


def attention(x, attn):
    """Causal softmax(QKᵀ/√d_h)V per head, then W_o, from the fused qkv weight."""
    B, T, d = x.shape
    h = attn.n_heads
    q, k, v = (x @ attn.qkv.weight.T).split(d, dim=-1)
    split = lambda t: t.view(B, T, h, d // h).transpose(1, 2)  # noqa: E731
    q, k, v = split(q), split(k), split(v)
    scores = q @ k.transpose(-1, -2) / math.sqrt(d // h)
    scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    y = (scores.softmax(-1) @ v).transpose(1, 2).reshape(B, T, d)
    return y @ attn.proj.weight.T


def mlp(x, m):
    return F.gelu(x @ m.up.weight.T) @ m.down.weight.T


def reference_logits(model, idx, post):
    x = model.tok_emb.weight[idx] + model.pos_emb.weight[: idx.shape[1]]
    for b in model.blocks:
        if post:
            h = layer_norm(x + attention(x, b.attn), b.norm1)
            x = layer_norm(h + mlp(h, b.mlp), b.norm2)
        else:
            h = x + attention(layer_norm(x, b.norm1), b.attn)
            x = h + mlp(layer_norm(h, b.norm2), b.mlp)
    if not post:
        x = layer_norm(x, model.norm_f)
    return x @ model.head.weight.T


def randomize_norms(model, gen):
    """Gains and biases away from (1, 0), so a norm applied in the wrong place shows."""
    with torch.no_grad():
        for mod in model.modules():
            if isinstance(mod, torch.nn.LayerNorm):
                mod.weight.copy_(1 + 0.5 * torch.randn(mod.weight.shape, generator=gen))
                if mod.bias is not None:
                    mod.bias.copy_(0.3 * torch.randn(mod.bias.shape, generator=gen))


@pytest.mark.parametrize("post", [False, True])
@pytest.mark.parametrize("heads", [1, 2])
def test_block_matches_the_written_out_reference(post, heads):
    torch.manual_seed(0)
    cfg = tiny(norm_position="post" if post else "pre", n_heads=heads, bias=True)
    model = Transformer(cfg, "gamma:0.5", seed=1)
    randomize_norms(model, torch.Generator().manual_seed(2))
    idx = torch.randint(0, 16, (3, 6), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        got = model(idx)
        want = reference_logits(model, idx, post)
        explicit = model(idx, need_weights=True)[0]  # the explicit-softmax path
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(explicit, want, rtol=1e-5, atol=1e-5)


def test_post_norm_block_output_is_normalized_and_differs_from_pre():
    idx = torch.randint(0, 16, (4, 6), generator=torch.Generator().manual_seed(0))
    pre = Transformer(tiny(), "gamma:0.5", seed=0)
    post = Transformer(tiny(norm_position="post"), "gamma:0.5", seed=0)
    post.load_state_dict(pre.state_dict(), strict=False)  # same weights, other placement
    with torch.no_grad():
        h_post = post.hidden(idx)[0]
        # every position of a post-LN block's output is LN(·) with gain 1, bias 0
        torch.testing.assert_close(h_post.mean(-1), torch.zeros(4, 6), atol=1e-5, rtol=0)
        torch.testing.assert_close(
            h_post.var(-1, unbiased=False), torch.ones(4, 6), atol=1e-3, rtol=0
        )
        assert (post(idx) - pre(idx)).abs().max() > 1e-2
    assert isinstance(post.norm_f, torch.nn.Identity)
    # the same parameters apart from the final norm the post-norm model does not have
    assert set(pre.state_dict()) - set(post.state_dict()) == {"norm_f.weight"}


def test_post_norm_trains_with_rmsnorm_and_one_head():
    torch.manual_seed(0)
    cfg = tiny(norm="rmsnorm", norm_position="post", n_heads=1)
    model = Transformer(cfg, "gamma:0.5", seed=0)
    idx = torch.randint(0, 16, (8, 6), generator=torch.Generator().manual_seed(1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(30):  # memorize a fixed batch: the loss must fall
        _, loss = model(idx[:, :-1], idx[:, 1:])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]


def test_norm_position_default_keeps_run_keys_and_post_gets_its_own():
    cfg = AnchorConfig()
    assert "norm_position" not in config_to_dict(cfg.model)  # pre: key-neutral default
    before = config_key(KIND, cfg, VERSION)
    explicit = load_config(AnchorConfig, None, ["model.norm_position=pre"])
    assert config_key(KIND, explicit, VERSION) == before
    post = override(cfg, {"model.norm_position": "post"})
    assert post.model.norm_position == "post"
    assert config_to_dict(post.model)["norm_position"] == "post"
    assert config_key(KIND, post, VERSION) != before
    # the quick anchor cell the profiles recorded before the field existed
    quick = cell_config(AnchorConfig(), gamma=0.5, seed=0)
    assert config_key(KIND, override(quick, {"model.norm_position": "pre"}), VERSION) == config_key(
        KIND, quick, VERSION
    )
    with pytest.raises(ConfigError, match="norm_position='middle' is not allowed"):
        load_config(AnchorConfig, None, ["model.norm_position=middle"])


def test_classifier_on_constructed_predictions():
    x = np.array([30, 30, 30, 50, 50, 60, 70, 80])
    pred = np.array([20, 24, 21, 40, 44, 56, 16, 70])  # x−10, x−6, x−9, x−10, x−6, x−4, …
    kinds = anchor.classify(pred, x)
    assert kinds.tolist() == [0, 1, 2, 0, 1, 2, 2, 0]
    shares = anchor.solution_shares(pred, x)
    assert shares == pytest.approx({"inferential": 3 / 8, "symmetric": 2 / 8, "other": 3 / 8})
    # the symmetric answer is exactly the seen exception's label, the inferential one the
    # composition of the single maps
    assert np.all(anchor.label(x, 3, 4)[kinds == 1] == pred[kinds == 1])
    assert np.all(anchor.label(x, 4, 3)[kinds == 0] == pred[kinds == 0])


class _Run:
    """A finished run as :class:`Cell` reads it (done, summary)."""

    def __init__(self, **shares):
        self.done = True
        self.summary = shares


def _cell(gamma, seed, sym, inf, layers=2, wd=0.01, panel="depth"):
    from smallinit.study.experiments.anchor_scan import Cell

    return Cell(
        panel,
        gamma,
        layers,
        wd,
        seed,
        _Run(share_symmetric=sym, share_inferential=inf, share_other=1 - sym - inf),
    )


def test_seed_shares_and_the_claims_share_rule_against_scipy():
    from scipy import stats

    from smallinit.study.claims import share_rule
    from smallinit.study.experiments.anchor_scan import seed_shares

    sym05 = [0.9, 0.85, 0.2, 0.95, 0.7]
    inf08 = [0.97, 0.99, 0.92, 0.4, 0.88]
    cells = [_cell(0.5, s, v, 0.05) for s, v in enumerate(sym05)]
    cells += [_cell(0.8, s, 0.0, v) for s, v in enumerate(inf08)]
    cells += [_cell(0.7, s, 0.3, 0.3) for s in range(5)]  # no published expectation
    cells += [_cell(0.5, s, 0.0, 1.0, layers=3) for s in range(5)]  # another depth: left out
    cells += [_cell(0.5, s, 0.0, 1.0, panel="wd") for s in range(5)]  # another panel
    shares = seed_shares(cells, "depth", layers=2, weight_decay=0.01)
    assert sorted(shares) == [0.5, 0.7, 0.8]
    assert shares[0.5]["seed"].tolist() == [0, 1, 2, 3, 4]
    np.testing.assert_allclose(shares[0.5]["share_symmetric"], sym05)
    for gamma, claimed, opposite in (
        (0.5, "share_symmetric", "share_inferential"),
        (0.8, "share_inferential", "share_symmetric"),
    ):
        row = shares[gamma]
        judgement = share_rule(dict(enumerate(row[claimed])), dict(enumerate(row[opposite])))
        vals = row[claimed]
        ref = stats.ttest_1samp(vals, 0.5, alternative="greater")
        assert judgement.estimate.p_value == pytest.approx(ref.pvalue)
        assert judgement.estimate.effect == pytest.approx(np.mean(vals))
        half = stats.t.ppf(0.975, 4) * np.std(vals, ddof=1) / np.sqrt(5)
        assert judgement.estimate.ci_low == pytest.approx(np.mean(vals) - half)
        assert "majority in 4 of 5 seeds" in judgement.detail
