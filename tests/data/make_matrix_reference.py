"""Record reference values from the OLD code (before the matrix-table refactor)."""
import hashlib, json, sys
import numpy as np, torch
from smallinit.llm.config import ModelConfig
from smallinit.llm.model.init import init_table, apply_init
from smallinit.llm.model.transformer import Transformer
from smallinit.llm.training.dynamics import measure_model
from smallinit.llm.analysis.ffn import measure_layers

SIZES = dict(vocab_size=97, context=24, d_model=32, n_layers=2, n_heads=4, d_ff=48)
VARIANTS = {
    "default": {},
    "gpt2ish": dict(norm="layernorm", positions="learned", mlp="gelu", bias=True, tie_embeddings=True),
    "gated": dict(gated_attention=True),
    "headwise": dict(gated_attention=True, gate_kind="headwise", d_ff=None),
}
SCHEMES = ["gamma:1.0", "gamma:0.5,qk=1.0,mlp_out=0.8,attn_gate=0.7,depth", "nanogpt",
           "fixed:0.05", "megatron:0.02", "mitchell", "mup:32", "xavier", "kaiming"]

def digest(model):
    return {n: hashlib.sha256(p.detach().contiguous().numpy().tobytes()).hexdigest()[:16]
            for n, p in model.state_dict().items()}

out = {"sizes": SIZES, "models": {}}
for vname, v in VARIANTS.items():
    for s in SCHEMES:
        m = Transformer(ModelConfig(**SIZES | v), s, seed=3)
        out["models"][f"{vname}|{s}"] = {"table": init_table(m, s), "weights": digest(m)}

# measurements on a perturbed model
torch.manual_seed(0)
cfg = ModelConfig(**SIZES | dict(gated_attention=True))
m0 = Transformer(cfg, "gamma:0.5", seed=1)
m1 = Transformer(cfg, "gamma:0.5", seed=1)
with torch.no_grad():
    for p in m1.parameters():
        p.add_(0.05 * torch.randn_like(p) * p.abs().mean())
out["measure_model"] = measure_model(m1)
out["measure_layers"] = measure_layers(m1, m0, top_k=4, threshold=0.9)
cfg = ModelConfig(**SIZES | dict(mlp="gelu", bias=True))
m0 = Transformer(cfg, "gamma:0.5", seed=1)
m1 = Transformer(cfg, "gamma:0.5", seed=1)
with torch.no_grad():
    for p in m1.parameters():
        p.add_(0.05 * torch.randn_like(p) * p.abs().mean())
out["measure_model_gelu"] = measure_model(m1)
out["measure_layers_gelu"] = measure_layers(m1, m0, top_k=4, threshold=0.9)

try:
    from smallinit.llm.model.hf import gpt2_from, llama_from
    hf = {}
    for name, make in (("gpt2", gpt2_from), ("llama", llama_from)):
        for s in ("gamma:1.0", "xavier", "mitchell"):
            model = apply_init(make(ModelConfig(**SIZES)), s, seed=2)
            hf[f"{name}|{s}"] = {"table": init_table(model, s), "weights": digest(model)}
    out["hf"] = hf
except Exception as e:
    print("no hf", e)
json.dump(out, open(sys.argv[1], "w"), indent=0, default=float)
