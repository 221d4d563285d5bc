"""Hugging Face models built from a :class:`ModelConfig`'s sizes (offline: no download).

Used by ``smallinit llm init-table --model gpt2|llama|phi3`` and by the tests of
:func:`smallinit.llm.model.init.apply_init` on Hugging Face models. Needs ``transformers``
(the ``hf`` extra).
"""

from __future__ import annotations

from smallinit.core.errors import ConfigError
from smallinit.llm.run_config import ModelConfig


def _transformers():
    try:
        import transformers
    except ImportError:
        raise ConfigError(
            "this needs the transformers package: pip install 'smallinit[hf]'"
        ) from None
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()  # no "Loading weights" bar on stderr
    return transformers


def gpt2_from(cfg: ModelConfig):
    """A randomly initialized ``GPT2LMHeadModel`` with the config's sizes."""
    tf = _transformers()
    config = tf.GPT2Config(
        vocab_size=cfg.vocab_size,
        n_positions=cfg.context,
        n_embd=cfg.d_model,
        n_layer=cfg.n_layers,
        n_head=cfg.n_heads,
        n_inner=cfg.ffn_dim,
        layer_norm_epsilon=cfg.norm_eps,
        bos_token_id=0,
        eos_token_id=0,
    )
    return tf.GPT2LMHeadModel(config)


def llama_from(cfg: ModelConfig):
    """A randomly initialized ``LlamaForCausalLM`` with the config's sizes."""
    tf = _transformers()
    config = tf.LlamaConfig(
        vocab_size=cfg.vocab_size,
        hidden_size=cfg.d_model,
        intermediate_size=cfg.ffn_dim,
        num_hidden_layers=cfg.n_layers,
        num_attention_heads=cfg.n_heads,
        num_key_value_heads=cfg.n_heads,
        max_position_embeddings=cfg.context,
        rms_norm_eps=cfg.norm_eps,
        tie_word_embeddings=cfg.tie_embeddings,
        bos_token_id=0,
        eos_token_id=0,
        pad_token_id=0,
    )
    return tf.LlamaForCausalLM(config)


def phi3_from(cfg: ModelConfig, kv_heads: int | None = None):
    """A randomly initialized ``Phi3ForCausalLM`` with the config's sizes: q | k | v fused
    in ``qkv_proj``, gate | up in ``gate_up_proj``; ``kv_heads`` key/value heads
    (grouped-query attention; default ``n_heads``, as the config has no such size)."""
    tf = _transformers()
    config = tf.Phi3Config(
        vocab_size=cfg.vocab_size,
        hidden_size=cfg.d_model,
        intermediate_size=cfg.ffn_dim,
        num_hidden_layers=cfg.n_layers,
        num_attention_heads=cfg.n_heads,
        num_key_value_heads=kv_heads or cfg.n_heads,
        max_position_embeddings=cfg.context,
        rms_norm_eps=cfg.norm_eps,
        tie_word_embeddings=cfg.tie_embeddings,
        bos_token_id=0,
        eos_token_id=0,
        pad_token_id=0,
    )
    return tf.Phi3ForCausalLM(config)
