"""Reference values of the init and the measurements, recorded from the code *before* the
matrix-table refactor (commit a9690d4, run as ``python tests/data/make_matrix_reference.py
tests/data/matrix_reference.json``); tests/llm/test_llm_init.py re-runs :func:`compute` on the
current code and requires the same numbers (weights by sha256 of their bytes)."""

import hashlib
import json
import sys

import torch

from smallinit.llm.analysis.ffn import measure_layers
from smallinit.llm.model.init import apply_init, init_table
from smallinit.llm.model.transformer import Transformer
from smallinit.llm.run_config import ModelConfig
from smallinit.llm.training.probes import measure_model

SIZES = dict(vocab_size=97, context=24, d_model=32, n_layers=2, n_heads=4, d_ff=48)
VARIANTS = {
    "default": {},
    "gpt2ish": dict(
        norm="layernorm", positions="learned", mlp="gelu", bias=True, tie_embeddings=True
    ),
    "gated": dict(gated_attention=True),
    "headwise": dict(gated_attention=True, gate_kind="headwise", d_ff=None),
}
SCHEMES = [
    "gamma:1.0",
    "gamma:0.5,qk=1.0,mlp_out=0.8,attn_gate=0.7,depth",
    "nanogpt",
    "fixed:0.05",
    "megatron:0.02",
    "mitchell",
    "mup:32",
    "xavier",
    "kaiming",
]
TABLE_KEYS = ("name", "part", "shape", "d_in", "d_out", "layer", "residual_out", "std", "gamma_eff")


def digest(model):
    return {
        n: hashlib.sha256(p.detach().contiguous().numpy().tobytes()).hexdigest()[:16]
        for n, p in model.state_dict().items()
    }


def table(model, scheme):
    return [{k: r[k] for k in TABLE_KEYS} for r in init_table(model, scheme)]


def perturbed_pair(cfg):
    """θ(0) and a copy moved by a relative perturbation (torch's global generator)."""
    m0 = Transformer(cfg, "gamma:0.5", seed=1)
    m1 = Transformer(cfg, "gamma:0.5", seed=1)
    with torch.no_grad():
        for p in m1.parameters():
            p.add_(0.05 * torch.randn_like(p) * p.abs().mean())
    return m0, m1


def compute(hf: bool = True) -> dict:
    out = {"sizes": SIZES, "models": {}}
    for vname, v in VARIANTS.items():
        for s in SCHEMES:
            m = Transformer(ModelConfig(**SIZES | v), s, seed=3)
            out["models"][f"{vname}|{s}"] = {"table": table(m, s), "weights": digest(m)}
    torch.manual_seed(0)
    for suffix, extra in (("", dict(gated_attention=True)), ("_gelu", dict(mlp="gelu", bias=True))):
        m0, m1 = perturbed_pair(ModelConfig(**SIZES | extra))
        out["measure_model" + suffix] = measure_model(m1)
        out["measure_layers" + suffix] = measure_layers(m1, m0, top_k=4, threshold=0.9)
    if hf:
        from smallinit.llm.model.hf import gpt2_from, llama_from

        out["hf"] = {}
        for name, make in (("gpt2", gpt2_from), ("llama", llama_from)):
            for s in ("gamma:1.0", "xavier", "mitchell"):
                model = apply_init(make(ModelConfig(**SIZES)), s, seed=2)
                out["hf"][f"{name}|{s}"] = {"table": table(model, s), "weights": digest(model)}
    return out


if __name__ == "__main__":
    with open(sys.argv[1], "w") as f:
        json.dump(compute(), f, indent=0, default=float)
