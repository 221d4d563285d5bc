"""q and k apart on every fused or separate projection, and Phi-3 built in: the σ of every
slice, read off each model's parameters by the layout its own forward uses (not by the
family's table, which is what is tested)."""

from __future__ import annotations

import pytest
import torch

from smallinit.llm.model.init import apply_init, init_table, matrix_table, recorded_scheme
from smallinit.llm.model.transformer import Transformer
from smallinit.llm.run_config import ModelConfig

transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()

D, HEADS, FF, LAYERS = 128, 4, 256, 2
#: q, k and v at σ = d^-1, d^-1/4, d^-1/2: neighbours differ by d^1/4 ≈ 3.4× at least, so a
#: row drawn with another slice's σ is far outside the tolerance below
APART = "gamma:0.5,q=1,k=0.25"
WANT = {"q": D**-1.0, "k": D**-0.25, "v": D**-0.5}


def ours():
    return Transformer(
        ModelConfig(vocab_size=300, context=40, d_model=D, n_layers=LAYERS, n_heads=HEADS, d_ff=FF)
    )


def gpt2():
    return transformers.GPT2LMHeadModel(
        transformers.GPT2Config(
            vocab_size=300, n_positions=40, n_embd=D, n_layer=LAYERS, n_head=HEADS, n_inner=FF
        )
    )


def llama():
    return transformers.LlamaForCausalLM(
        transformers.LlamaConfig(
            vocab_size=300,
            hidden_size=D,
            intermediate_size=FF,
            num_hidden_layers=LAYERS,
            num_attention_heads=HEADS,
            num_key_value_heads=HEADS,
            bos_token_id=0,
            eos_token_id=0,
            pad_token_id=0,
        )
    )


def neox():
    return transformers.GPTNeoXForCausalLM(
        transformers.GPTNeoXConfig(
            vocab_size=300,
            hidden_size=D,
            num_hidden_layers=LAYERS,
            num_attention_heads=HEADS,
            intermediate_size=FF,
            max_position_embeddings=40,
        )
    )


def phi():
    return transformers.PhiForCausalLM(
        transformers.PhiConfig(
            vocab_size=300,
            hidden_size=D,
            num_hidden_layers=LAYERS,
            num_attention_heads=HEADS,
            intermediate_size=FF,
            max_position_embeddings=40,
        )
    )


def phi3(kv_heads=2):
    """Phi-3 with grouped-query attention: 4 query heads of 32, 2 key/value heads."""
    return transformers.Phi3ForCausalLM(
        transformers.Phi3Config(
            vocab_size=300,
            hidden_size=D,
            intermediate_size=FF,
            num_hidden_layers=LAYERS,
            num_attention_heads=HEADS,
            num_key_value_heads=kv_heads,
            max_position_embeddings=40,
            pad_token_id=0,
            bos_token_id=0,
            eos_token_id=0,
        )
    )


def q_k_v(name: str, model, layer: int) -> dict[str, torch.Tensor]:
    """q, k, v of one block as (d_out, d_in) output rows, sliced as the model's forward reads
    its parameters (the sources are in each comment)."""
    hs = D // HEADS
    if name == "ours":  # Attention.forward: qkv(x).view(B, T, 3, heads, head_dim)
        w = model.blocks[layer].attn.qkv.weight
        return dict(zip("qkv", w.view(3, D, D), strict=True))
    if name == "gpt2":  # Conv1D (in, out); GPT2Attention: c_attn(x).split(split_size, dim=2)
        w = model.transformer.h[layer].attn.c_attn.weight.T
        return dict(zip("qkv", w.split(D), strict=True))
    if name == "neox":  # view(..., heads, 3 * head_size).chunk(3, dim=-1)
        w = model.gpt_neox.layers[layer].attention.query_key_value.weight.view(HEADS, 3, hs, D)
        return {p: w[:, j].reshape(D, D) for j, p in enumerate("qkv")}
    if name == "phi3":  # qkv[..., :query_pos], [query_pos:query_pos + kv · head_dim], rest
        attn = model.model.layers[layer].self_attn
        q_pos, kv = HEADS * attn.head_dim, attn.num_key_value_heads * attn.head_dim
        w = attn.qkv_proj.weight
        return {"q": w[:q_pos], "k": w[q_pos : q_pos + kv], "v": w[q_pos + kv :]}
    attn = model.model.layers[layer].self_attn  # llama, phi: separate projections
    return {"q": attn.q_proj.weight, "k": attn.k_proj.weight, "v": attn.v_proj.weight}


BUILD = {"ours": ours, "gpt2": gpt2, "llama": llama, "neox": neox, "phi": phi, "phi3": phi3}


@pytest.mark.parametrize("name", list(BUILD))
def test_q_and_k_apart_land_on_their_own_rows(name):
    """``gamma:0.5,q=1,k=0.25``: every row of q has σ = d^-1, every row of k d^-1/4, every
    row of v d^-1/2, in the layout each model's attention reads."""
    model = apply_init(BUILD[name](), APART, seed=0)
    for layer in range(LAYERS):
        for part, rows in q_k_v(name, model, layer).items():
            rows = rows.detach().double()
            # the whole slice: ≥ 64·128 draws, sample std within 1% (1 s.e.) of σ
            assert rows.std().item() == pytest.approx(WANT[part], rel=0.05), (layer, part)
            # row by row: 128 draws, the sample std within ±6% (1 s.e.) of σ; another
            # part's σ is ≥ 3.4× away
            stds = rows.std(dim=1) / WANT[part]
            assert stds.min().item() > 0.65 and stds.max().item() < 1.35, (layer, part)
    assert recorded_scheme(model) == "gamma:0.5,q=1,k=0.25"


@pytest.mark.parametrize("name", ["ours", "neox"])
def test_qk_is_q_and_k_at_once(name):
    """``qk=1`` and ``q=1,k=1`` are one scheme: the same record and, from one seed, the
    same weights."""
    a = apply_init(BUILD[name](), "gamma:0.5,qk=1", seed=3)
    b = apply_init(BUILD[name](), "gamma:0.5,k=1,q=1", seed=3)
    assert recorded_scheme(a) == recorded_scheme(b) == "gamma:0.5,qk=1"
    for (na, pa), (nb, pb) in zip(a.named_parameters(), b.named_parameters(), strict=True):
        assert na == nb and torch.equal(pa, pb), na


def test_qk_with_q_or_k_is_refused_in_one_line():
    model = ours()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(
        ValueError,
        match=r"^override qk=1 is the shorthand for q= and k=, and "
        r"k=0\.5 is given too; give qk= alone, or q= and k=$",
    ):
        apply_init(model, "gamma:0.5,qk=1,k=0.5")
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())


def test_init_table_gives_q_and_k_their_own_sigma():
    rows = {r["name"]: r for r in init_table(phi3(), APART)}
    qkv = "model.layers.1.self_attn.qkv_proj.weight"
    for part in "qkv":
        assert rows[f"{qkv}[{part}]"]["std"] == pytest.approx(WANT[part], rel=1e-12)
    assert rows[f"{qkv}[q]"]["part"] == rows[f"{qkv}[k]"]["part"] == "qk"  # the pair of §1


# ----------------------------------------------------------------------------- Phi-3
def test_phi3_is_built_in_with_grouped_qkv_and_gate_up_blocks():
    """Phi-3's qkv_proj is q | k | v of 128, 64, 64 rows (4 query heads, 2 key/value heads of
    32) and gate_up_proj gate | up: each slice its own matrix, with its own σ and true sizes."""
    model = apply_init(phi3(), "gamma:0.5,q=1,k=0.25,mlp=0.75,mlp_out=1", seed=0)
    table = {s.name: s for s in matrix_table(model)}
    assert len(table) == 2 + LAYERS * 7  # embedding, head; q, k, v, o, gate, up, down
    qkv = "model.layers.0.self_attn.qkv_proj.weight"
    sizes = {p: (table[f"{qkv}[{p}]"].d_out, table[f"{qkv}[{p}]"].layout) for p in "qkv"}
    assert sizes == {"q": (128, "grouped"), "k": (64, "grouped"), "v": (64, "grouped")}
    for layer in range(LAYERS):
        mlp = model.model.layers[layer].mlp
        gate, up = mlp.gate_up_proj.weight.detach().double().chunk(2)  # Phi3MLP: chunk(2)
        down = mlp.down_proj.weight.detach().double()
        for name, w, want in (
            ("gate", gate, D**-0.75),
            ("up", up, D**-0.75),
            ("down", down, FF**-1.0),
        ):
            assert w.std().item() == pytest.approx(want, rel=0.05), (layer, name)
            stds = w.std(dim=1) / want
            assert stds.min().item() > 0.65 and stds.max().item() < 1.35, (layer, name)
        assert torch.equal(
            table[f"model.layers.{layer}.mlp.gate_up_proj.weight[up]"].rows_out,
            mlp.gate_up_proj.weight[FF:],
        )
    assert torch.all(model.model.norm.weight == 1)


def test_phi3_slices_are_what_its_forward_reads():
    """The family's v rows are Phi-3's values (zeroed, the attention output vanishes), and
    its gate and up rows are the MLP's: down(silu(gate x) · up x) is its output."""
    model = apply_init(phi3(), "gamma:1.0", seed=0).eval()
    table = matrix_table(model)
    x = torch.randn(2, 6, D, generator=torch.Generator().manual_seed(0))
    mlp = model.model.layers[0].mlp
    by_kind = {s.kind: s for s in table if s.layer == 0}
    gate = x @ by_kind["mlp.gate"].rows_out.T
    up = x @ by_kind["mlp.up"].rows_out.T
    want = (torch.nn.functional.silu(gate) * up) @ by_kind["mlp.down"].rows_out.T
    with torch.no_grad():
        assert torch.allclose(mlp(x), want, atol=1e-6)
        for spec in table:
            if spec.kind == "attn.v":
                spec.assign(torch.zeros(spec.shape))
    outputs = []
    model.model.layers[0].self_attn.register_forward_hook(
        lambda mod, args, out: outputs.append(out[0])
    )
    with torch.no_grad():
        model(torch.randint(0, 300, (2, 12), generator=torch.Generator().manual_seed(1)))
    assert outputs and torch.count_nonzero(outputs[0]) == 0


def test_phi3_init_table_command(capsys):
    from smallinit.cli import main

    assert (
        main(
            [
                "llm",
                "init-table",
                "--model",
                "phi3",
                "--init",
                "gamma:0.5,q=1,k=0.75",
                "model.d_model=64",
                "model.n_heads=4",
                "model.n_layers=1",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert out.startswith("init gamma:0.5,q=1,k=0.75 on phi3")
    lines = {line.split()[0]: line.split() for line in out.splitlines()[2:]}
    assert lines["model.layers.0.self_attn.qkv_proj.weight[k]"][1:4] == ["qk", "64x64", "64"]
    assert float(lines["model.layers.0.self_attn.qkv_proj.weight[k]"][-1]) == 0.75
    assert float(lines["model.layers.0.mlp.gate_up_proj.weight[up]"][-1]) == 0.5


# ----------------------------------------------------------------------------- what cannot apply
def _state(model):
    return {k: v.clone() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("name", ["ours", "llama", "phi3"])
def test_an_override_of_a_part_the_model_lacks_is_a_warning_and_not_recorded(name):
    """``attn_gate=`` on a model without gated attention acts on nothing: a warning naming
    the part, the weights those of the scheme without it, and the record without it."""
    from smallinit.llm import UnusedOverrideWarning

    with pytest.warns(UnusedOverrideWarning) as caught:
        model = apply_init(BUILD[name](), "gamma:0.5,attn_gate=2,mlp=1", seed=5)
    assert len(caught) == 1
    message = str(caught[0].message)
    assert "\n" not in message
    assert message.startswith(
        "init 'gamma:0.5,attn_gate=2,mlp=1': override attn_gate=2 acts "
        f"on no matrix of {type(model).__name__}, which has no "
        "attn_gate matrix (its parts: embedding, qk, vo, mlp, mlp_out"
    )
    assert message.endswith("it is not applied: the scheme applied is 'gamma:0.5,mlp=1'")
    assert recorded_scheme(model) == "gamma:0.5,mlp=1"
    plain = apply_init(BUILD[name](), "gamma:0.5,mlp=1", seed=5)
    assert all(torch.equal(v, _state(plain)[k]) for k, v in model.state_dict().items())


def test_a_head_override_on_a_model_without_a_head_is_a_warning():
    """A base model (no LM head) has nothing for head= to act on: a warning, not a draw."""
    from smallinit.llm import UnusedOverrideWarning

    base = transformers.LlamaModel(llama().config)
    with pytest.warns(
        UnusedOverrideWarning,
        match=r"override head=2 acts on no matrix of "
        r"LlamaModel, which has no head matrix",
    ):
        apply_init(base, "gamma:0.5,head=2", seed=0)
    assert recorded_scheme(base) == "gamma:0.5"


def test_overrides_that_apply_warn_of_nothing():
    import warnings

    gated = Transformer(
        ModelConfig(
            vocab_size=300,
            context=40,
            d_model=D,
            n_layers=LAYERS,
            n_heads=HEADS,
            d_ff=FF,
            gated_attention=True,
        )
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        apply_init(gated, "gamma:0.5,attn_gate=2,q=1,head=1", seed=0)
        apply_init(phi3(), "gamma:0.5,qk=1,mlp_out=1,head=1", seed=0)
    assert recorded_scheme(gated) == "gamma:0.5,q=1,attn_gate=2,head=1"


def test_a_tied_head_override_is_refused_by_the_init_table_command_too(capsys):
    """The contradictory request (one matrix, two σ asked of it) is an error wherever the
    scheme is applied or previewed: apply_init (tests/llm/test_bad_input_llm.py) and
    ``llm init-table``, in one line."""
    from smallinit.cli import main

    assert (
        main(
            [
                "llm",
                "init-table",
                "--model",
                "llama",
                "--init",
                "gamma:0.5,head=2",
                "model.tie_embeddings=true",
                "model.n_layers=1",
            ]
        )
        == 2
    )
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(
        "smallinit: error: init 'gamma:0.5,head=2' sets the head's "
        "γ (head=2), but the LM head of LlamaForCausalLM "
        "(lm_head.weight) is tied to the embedding "
    )
    assert len(captured.err.splitlines()) == 1


def test_a_parameter_without_elements_is_refused_in_one_line():
    """A partitioned parameter (DeepSpeed ZeRO-3 leaves each rank an empty tensor) cannot be
    drawn into: refused naming it, nothing drawn, nothing recorded."""
    model = llama()
    model.model.layers[0].self_attn.q_proj.weight.data = torch.empty(0)
    before = _state(model)
    with pytest.raises(
        ValueError,
        match=r"^parameter model\.layers\.0\.self_attn\.q_proj\."
        r"weight of LlamaForCausalLM holds no elements \("
        r"a partitioned or unallocated parameter.*gathered "
        r"parameters$",
    ):
        apply_init(model, "gamma:0.5", seed=0)
    assert recorded_scheme(model) is None
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())


def test_init_table_command_warns_of_an_unused_override_in_one_line(capsys):
    from smallinit.cli import main

    assert (
        main(
            [
                "llm",
                "init-table",
                "--model",
                "llama",
                "--init",
                "gamma:0.5,attn_gate=1",
                "model.d_model=64",
                "model.n_heads=4",
                "model.n_layers=1",
            ]
        )
        == 0
    )
    captured = capsys.readouterr()
    assert "attn_gate" not in captured.out.split("\n", 1)[1]  # no such row
    assert captured.err.splitlines() == [
        "smallinit: warning: init 'gamma:0.5,attn_gate=1': override attn_gate=1 acts on no "
        "matrix of LlamaForCausalLM, which has no attn_gate matrix (its parts: embedding, qk, "
        "vo, mlp, mlp_out, head); it is not applied: the scheme applied is 'gamma:0.5'"
    ]


def test_grouped_layout_is_checked_against_the_roles_and_the_config():
    """A grouped layout is q | k | v only, and its sizes come from the config: a config
    whose sizes do not add up to the parameter's rows is refused, naming them."""
    from smallinit.llm.model.families import make_family

    with pytest.raises(
        ValueError,
        match=r"the grouped layout of 'qkv' needs the roles attn\.q, "
        r"attn\.k, attn\.v in this order, not attn\.k, "
        r"attn\.q, attn\.v",
    ):
        make_family(
            "bad",
            lambda m: False,
            matrices={"qkv": ("attn.k", "attn.q", "attn.v")},
            layouts={"qkv": "grouped"},
        )
    model = phi3()
    model.config.num_key_value_heads = 1  # the weights hold 2 key/value heads
    with pytest.raises(
        ValueError,
        match=r"qkv_proj\.weight \(256, 128\): 256 outputs are not "
        r"q \| k \| v of 128 \+ 32 \+ 32 rows",
    ):
        matrix_table(model)
