"""Our :class:`~smallinit.llm.model.transformer.Transformer` as a Hugging Face causal LM.

Two families of ours have an exact Hugging Face counterpart (same function, weights only
renamed, split or transposed):

* **Llama** (``norm=rmsnorm``, ``positions=rope``, ``mlp=swiglu``; the default model) →
  ``LlamaForCausalLM`` (Touvron et al. 2023). ``tok_emb`` → ``model.embed_tokens``; block i's
  ``norm1``/``norm2`` → ``input_layernorm``/``post_attention_layernorm``; the fused
  ``attn.qkv`` rows [0, d), [d, 2d), [2d, 3d) → ``q_proj``, ``k_proj``, ``v_proj``
  (``attention_bias`` when ``bias``); ``attn.proj`` → ``o_proj``; the fused ``mlp.up`` rows
  [0, d_ff), [d_ff, 2 d_ff) → ``gate_proj``, ``up_proj`` and ``mlp.down`` → ``down_proj``
  (``mlp_bias`` when ``bias``); ``norm_f`` → ``model.norm``; ``head`` → ``lm_head`` (left out
  when tied: ``tie_word_embeddings``). Both RMSNorms compute g ⊙ x / √(mean(x²) + ε). RoPE
  is the same convention on both sides: HF's ``rotate_half`` rotates the pairs
  (x_i, x_{i+h/2}) of each head by θ_{t,i} = t · base^(−2i/h) exactly as
  :func:`~smallinit.llm.model.layers.apply_rope` does, and the heads are the same
  contiguous slices of d, so q and k need no permutation (checked numerically by the tests
  and by every export). Attention scale 1/√(d/n_heads) on both sides, no dropout.
* **GPT-2** (``norm=layernorm``, ``positions=learned``, ``mlp=gelu``) → ``GPT2LMHeadModel``
  (Radford et al. 2019), with ``activation_function="gelu"`` (the erf form of
  ``F.gelu``; GPT-2's default ``gelu_new`` is the tanh approximation and would not be exact).
  GPT-2's ``Conv1D`` stores weights as (in, out), the transpose of ``nn.Linear``; its
  layers always have biases, so a model of ours without them (``bias=false``) is exported
  with zero biases, which computes the same function.

Everything else is refused with a :class:`~smallinit.core.errors.ConfigError` naming the feature:
gated attention (Qiu et al. 2025; no Hugging Face class multiplies head outputs by a
learned sigmoid gate) and mixed families (e.g. RMSNorm with learned positions).

Needs ``transformers`` (the ``hf`` extra) for the config classes; the weights are written
with ``safetensors`` (a dependency of ``transformers``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from smallinit.core.atomic import write_failure
from smallinit.core.errors import ConfigError, SmallinitError
from smallinit.llm.data.tokenizer import END_OF_TEXT
from smallinit.llm.model.hf import _transformers
from smallinit.llm.model.init import RECORD_ATTR, init_record
from smallinit.llm.model.transformer import Transformer
from smallinit.llm.run_config import ModelConfig
from smallinit.llm.training.trained import load_trained, resolve_run, run_config, run_tokenizer

LLAMA = {"norm": "rmsnorm", "positions": "rope", "mlp": "swiglu"}
GPT2 = {"norm": "layernorm", "positions": "learned", "mlp": "gelu"}
WEIGHTS = "model.safetensors"
ARCHITECTURES = {"llama": "LlamaForCausalLM", "gpt2": "GPT2LMHeadModel"}


def hf_family(cfg: ModelConfig) -> str:
    """``"llama"`` or ``"gpt2"``: the Hugging Face class that computes exactly what a model
    of ``cfg`` computes; a :class:`ConfigError` naming the feature when none does."""
    if cfg.gated_attention:
        raise ConfigError(
            f"model.gated_attention=true (gate_kind={cfg.gate_kind}) has no "
            "Hugging Face equivalent (LlamaForCausalLM and GPT2LMHeadModel have "
            "no attention output gate); such a model cannot be exported"
        )
    unmatched = [
        f"model.{k}={getattr(cfg, k)}"
        for k, odd in (
            ("norm_position", cfg.norm_position == "post"),
            ("attn_dim", cfg.attn_width != cfg.d_model),
            ("head_bias", cfg.head_bias),
            ("norm_bias", cfg.layernorm_bias != cfg.bias),
        )
        if odd
    ]
    if unmatched:
        raise ConfigError(
            f"{', '.join(unmatched)} has no Hugging Face equivalent in the "
            "Llama and GPT-2 families (pre-norm, attention as wide as the "
            "model, no logit bias, norm biases as the layers'); such a model "
            "cannot be exported"
        )
    for name, family in (("llama", LLAMA), ("gpt2", GPT2)):
        if all(getattr(cfg, k) == v for k, v in family.items()):
            return name
    odd = min(
        (
            [f"model.{k}={getattr(cfg, k)}" for k, v in family.items() if getattr(cfg, k) != v]
            for family in (LLAMA, GPT2)
        ),
        key=len,
    )
    raise ConfigError(
        f"{', '.join(odd)} mixes the Llama (rmsnorm, rope, swiglu) and GPT-2 "
        "(layernorm, learned, gelu) families; no Hugging Face class computes "
        "this model exactly, so it cannot be exported"
    )


def hf_config(
    cfg: ModelConfig, *, eos_token_id: int | None = None, extra: dict[str, Any] | None = None
):
    """The ``transformers`` config (``LlamaConfig`` or ``GPT2Config``) of a model of ``cfg``;
    ``extra`` is stored in it as the ``smallinit`` entry, the one record of the init scheme
    that :func:`~smallinit.llm.model.init.apply_init` writes too (:func:`~smallinit.llm.
    model.init.init_record`: init, run, seed)."""
    tf = _transformers()
    family = hf_family(cfg)
    eos = 0 if eos_token_id is None else int(eos_token_id)
    common: dict[str, Any] = {
        "vocab_size": cfg.vocab_size,
        "tie_word_embeddings": cfg.tie_embeddings,
        "bos_token_id": eos,
        "eos_token_id": eos,
        "pad_token_id": eos,
        "architectures": [ARCHITECTURES[family]],
    }
    if extra:
        common[RECORD_ATTR] = extra
    if family == "llama":
        return tf.LlamaConfig(
            hidden_size=cfg.d_model,
            intermediate_size=cfg.ffn_dim,
            num_hidden_layers=cfg.n_layers,
            num_attention_heads=cfg.n_heads,
            num_key_value_heads=cfg.n_heads,
            head_dim=cfg.head_dim,
            max_position_embeddings=cfg.context,
            rms_norm_eps=cfg.norm_eps,
            rope_theta=cfg.rope_base,
            hidden_act="silu",
            attention_bias=cfg.bias,
            mlp_bias=cfg.bias,
            attention_dropout=0.0,
            **common,
        )
    return tf.GPT2Config(
        n_embd=cfg.d_model,
        n_layer=cfg.n_layers,
        n_head=cfg.n_heads,
        n_inner=cfg.ffn_dim,
        n_positions=cfg.context,
        layer_norm_epsilon=cfg.norm_eps,
        activation_function="gelu",
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        scale_attn_weights=True,
        scale_attn_by_inverse_layer_idx=False,
        reorder_and_upcast_attn=False,
        **common,
    )


def hf_state_dict(model: Transformer) -> dict[str, torch.Tensor]:
    """The weights of ``model`` under the Hugging Face names of its family (module doc),
    as new contiguous float tensors on the CPU (a tied head is left out)."""
    cfg = model.cfg
    family = hf_family(cfg)
    sd = {k: v.detach().to("cpu", torch.float32) for k, v in model.state_dict().items()}
    d, ff = cfg.d_model, cfg.ffn_dim
    out: dict[str, torch.Tensor] = {}
    if family == "llama":
        out["model.embed_tokens.weight"] = sd["tok_emb.weight"]
        for i in range(cfg.n_layers):
            ours, theirs = f"blocks.{i}.", f"model.layers.{i}."
            out[theirs + "input_layernorm.weight"] = sd[ours + "norm1.weight"]
            out[theirs + "post_attention_layernorm.weight"] = sd[ours + "norm2.weight"]
            for suffix in ("weight", "bias") if cfg.bias else ("weight",):
                qkv = sd[f"{ours}attn.qkv.{suffix}"]
                for j, name in enumerate(("q_proj", "k_proj", "v_proj")):
                    out[f"{theirs}self_attn.{name}.{suffix}"] = qkv[j * d : (j + 1) * d]
                out[f"{theirs}self_attn.o_proj.{suffix}"] = sd[f"{ours}attn.proj.{suffix}"]
                up = sd[f"{ours}mlp.up.{suffix}"]
                out[f"{theirs}mlp.gate_proj.{suffix}"] = up[:ff]
                out[f"{theirs}mlp.up_proj.{suffix}"] = up[ff:]
                out[f"{theirs}mlp.down_proj.{suffix}"] = sd[f"{ours}mlp.down.{suffix}"]
        out["model.norm.weight"] = sd["norm_f.weight"]
        if not cfg.tie_embeddings:
            out["lm_head.weight"] = sd["head.weight"]
    else:

        def bias(name: str, size: int) -> torch.Tensor:
            return sd[name] if cfg.bias else torch.zeros(size)

        out["transformer.wte.weight"] = sd["tok_emb.weight"]
        out["transformer.wpe.weight"] = sd["pos_emb.weight"]
        for i in range(cfg.n_layers):
            ours, theirs = f"blocks.{i}.", f"transformer.h.{i}."
            for a, b in (("norm1", "ln_1"), ("norm2", "ln_2")):
                out[f"{theirs}{b}.weight"] = sd[f"{ours}{a}.weight"]
                out[f"{theirs}{b}.bias"] = bias(f"{ours}{a}.bias", d)
            for a, b, n_out in (
                ("attn.qkv", "attn.c_attn", 3 * d),
                ("attn.proj", "attn.c_proj", d),
                ("mlp.up", "mlp.c_fc", ff),
                ("mlp.down", "mlp.c_proj", d),
            ):
                out[f"{theirs}{b}.weight"] = sd[f"{ours}{a}.weight"].t()  # Conv1D: (in, out)
                out[f"{theirs}{b}.bias"] = bias(f"{ours}{a}.bias", n_out)
        out["transformer.ln_f.weight"] = sd["norm_f.weight"]
        out["transformer.ln_f.bias"] = bias("norm_f.bias", d)
        if not cfg.tie_embeddings:
            out["lm_head.weight"] = sd["head.weight"]
    return {k: v.contiguous().clone() for k, v in out.items()}


def to_hf(model: Transformer, *, eos_token_id: int | None = None):
    """A Hugging Face model (eval mode, float32, CPU) computing what ``model`` computes."""
    tf = _transformers()
    config = hf_config(model.cfg, eos_token_id=eos_token_id)
    cls = tf.LlamaForCausalLM if hf_family(model.cfg) == "llama" else tf.GPT2LMHeadModel
    hf_model = cls(config)
    missing, unexpected = hf_model.load_state_dict(hf_state_dict(model), strict=False)
    missing = [m for m in missing if not (model.cfg.tie_embeddings and m == "lm_head.weight")]
    if missing or unexpected:  # a mapping bug, never a user error
        raise RuntimeError(f"HF state dict mismatch: missing {missing}, unexpected {unexpected}")
    if model.cfg.tie_embeddings:
        hf_model.tie_weights()
    return hf_model.eval()


def hf_tokenizer(tokenizer, eot: str, context: int):
    """A ``PreTrainedTokenizerFast`` around our ``tokenizers.Tokenizer`` (byte-level BPE),
    with ``eot`` as its end-of-text (and padding) token and ``context`` its longest input."""
    tf = _transformers()
    return tf.PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token=eot,
        bos_token=eot,
        unk_token=eot,
        pad_token=eot,
        model_max_length=context,
        clean_up_tokenization_spaces=False,
    )


def _save_tokenizer(tokenizer, eot: str, context: int, folder: Path) -> None:
    """The tokenizer files, with ``tokenizer_class`` the name both transformers 4 and 5
    resolve (5 writes its own new class name, which 4 does not know)."""
    hf_tokenizer(tokenizer, eot, context).save_pretrained(folder)
    path = folder / "tokenizer_config.json"
    meta = json.loads(path.read_text())
    meta["tokenizer_class"] = "PreTrainedTokenizerFast"
    path.write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")


def max_logit_difference(
    model: Transformer, hf_model, *, n_tokens: int | None = None, seed: int = 0
) -> float:
    """max |logits ours − logits HF| on a random token sequence (the full context by default,
    at most 64 tokens), both in float32 on the CPU."""
    cfg = model.cfg
    n = min(cfg.context, 64) if n_tokens is None else n_tokens
    gen = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, cfg.vocab_size, (2, n), generator=gen)
    with torch.no_grad():
        ours = model.float().eval()(idx)
        theirs = hf_model.float().eval()(input_ids=idx).logits
    return float((ours - theirs).abs().max())


def write_hf_folder(
    model: Transformer,
    tokenizer,
    out: str | Path,
    *,
    eot: str,
    force: bool = False,
    extra: dict[str, Any] | None = None,
    tolerance: float = 1e-4,
) -> float:
    """Write ``model`` and ``tokenizer`` as a Hugging Face folder at ``out``:
    ``config.json``, ``model.safetensors`` and the tokenizer files
    (``tokenizer.json``, ``tokenizer_config.json``, ...).

    The folder is built in a temporary sibling, loaded back with ``from_pretrained`` and its
    logits checked against ``model`` (max abs difference ≤ ``tolerance``) before it is moved
    into place, so ``out`` never holds a partial or wrong export. An existing non-empty
    ``out`` is refused unless ``force``; then the files written here replace their
    namesakes (other files in it are left alone). Returns the max abs logit difference."""
    tf = _transformers()
    out = Path(out)
    family = hf_family(model.cfg)  # refuse before touching the disk
    if out.exists() and not out.is_dir():
        raise ConfigError(f"OUT {out} is a file; give a folder (new or empty)")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise ConfigError(
            f"OUT {out} exists and is not empty; give a new folder or pass "
            "--force to overwrite the exported files in it"
        )
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError(f"OUT {out}: cannot create its parent folder ({err.strerror})") from None
    eos_id = tokenizer.token_to_id(eot)
    config = hf_config(model.cfg, eos_token_id=eos_id, extra=extra)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        state = hf_state_dict(model)
        try:  # transformers, safetensors and tokenizers each report a failed write their way
            config.save_pretrained(tmp)
            with contextlib.suppress(Exception):  # optional file; generation defaults
                tf.GenerationConfig(
                    bos_token_id=eos_id, eos_token_id=eos_id, pad_token_id=eos_id
                ).save_pretrained(tmp)
            save_file(state, str(tmp / WEIGHTS), metadata={"format": "pt"})
            _save_tokenizer(tokenizer, eot, model.cfg.context, tmp)
        except SmallinitError:
            raise
        except Exception as err:  # named by OUT (the files are moved there once checked)
            failure = write_failure(out, err)
            if failure is None:
                raise
            raise failure from None
        cls = tf.LlamaForCausalLM if family == "llama" else tf.GPT2LMHeadModel
        loaded = cls.from_pretrained(tmp, trust_remote_code=False)
        diff = max_logit_difference(model, loaded)
        if not diff <= tolerance:
            raise ConfigError(
                f"the exported {cls.__name__} differs from the model (max "
                f"|Δlogit| = {diff:.3g} > {tolerance:g}); not written to {out}"
            )
        out.mkdir(exist_ok=True)
        for path in sorted(tmp.iterdir()):
            os.replace(path, out / path.name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return diff


def export_run(
    ref: str,
    out: str | Path,
    *,
    runs_dir: str | Path | None = None,
    force: bool = False,
    trust_data: bool = False,
) -> tuple[Path, dict[str, Any]]:
    """Export the finished ``llm-train`` run ``ref`` (a RUN reference, see
    :func:`~smallinit.llm.training.trained.resolve_run`) to the Hugging Face folder ``out``
    with the tokenizer it was trained with (:func:`~smallinit.llm.training.trained.run_tokenizer`).
    The folder's ``config.json`` records the init scheme, the run and its seed under
    ``smallinit`` (the record :func:`~smallinit.llm.model.init.apply_init` writes, so
    ``recorded_scheme(from_pretrained(out))`` is the run's scheme). Returns ``out`` and a
    summary of what was written."""
    run = resolve_run(ref, runs_dir)
    hf_family(run_config(run.path).model)  # refuse before loading anything
    cfg, model = load_trained(run.path)
    family = hf_family(cfg.model)
    tok = run_tokenizer(run, cfg, trust_data=trust_data)
    extra = init_record(cfg.init, run=run.name, seed=cfg.seed)
    diff = write_hf_folder(model, tok, out, eot=END_OF_TEXT, force=force, extra=extra)
    info = {
        "run": run.name,
        "out": str(out),
        "architecture": ARCHITECTURES[family],
        "max_abs_logit_diff": diff,
        "init": extra["init"],
        "files": sorted(p.name for p in Path(out).iterdir()),
    }
    return Path(out), info


__all__ = [
    "hf_family",
    "hf_config",
    "hf_state_dict",
    "to_hf",
    "hf_tokenizer",
    "max_logit_difference",
    "write_hf_folder",
    "export_run",
]
