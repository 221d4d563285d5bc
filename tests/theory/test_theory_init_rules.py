"""σ per matrix under every init scheme (docs/science.md §1)."""

import math

import pytest

from smallinit.theory.init_rules import (
    PARTS,
    SCHEMES,
    InitScheme,
    canonical_scheme,
    effective_gamma,
    matrix_std,
    number_text,
    parse_scheme,
    truncation,
)


def std(scheme, part, d_in, d_out=64, **kw):
    kw.setdefault("n_layers", 4)
    return matrix_std(scheme, part, d_in, d_out, **kw)


def test_gamma_rule_is_fan_in_power():
    s = InitScheme("gamma", gamma=1.0)
    assert std(s, "mlp", 256) == pytest.approx(1 / 256)
    assert std(s, "mlp_out", 1024) == pytest.approx(1 / 1024)  # d_in is d_ff for the down proj
    half = InitScheme("gamma", gamma=0.5)
    assert std(half, "qk", 400) == pytest.approx(1 / 20)


def test_gamma_overrides_and_depth_scaling():
    s = InitScheme("gamma", gamma=0.5, overrides=(("qk", 1.0),), depth_scaling=True)
    assert std(s, "qk", 100) == pytest.approx(0.01)
    assert std(s, "vo", 100) == pytest.approx(0.1)
    # depth scaling only touches the residual outputs: 1/sqrt(2 L)
    assert std(s, "vo", 100, residual_out=True, n_layers=8) == pytest.approx(0.1 / 4)
    assert std(InitScheme("gamma", gamma=0.5), "vo", 100, residual_out=True) == pytest.approx(0.1)


def test_effective_gamma_inverts_the_rule_and_spec_examples():
    for g in (0.3, 0.5, 1.0, 1.3):
        for d in (64, 768, 4096):
            assert effective_gamma(d ** (-g), d) == pytest.approx(g)
    # docs/science.md §1: std 0.02 is γ_eff ≈ 0.59 at d = 768 and ≈ 0.81 at d = 128
    assert effective_gamma(0.02, 768) == pytest.approx(0.59, abs=0.005)
    assert effective_gamma(0.02, 128) == pytest.approx(0.81, abs=0.005)


def test_named_baselines():
    L = 6
    nano = InitScheme("nanogpt")
    assert std(nano, "mlp", 512, n_layers=L) == 0.02
    assert std(nano, "mlp_out", 2048, n_layers=L, residual_out=True) == pytest.approx(
        0.02 / math.sqrt(12)
    )
    assert std(InitScheme("fixed", std=0.05), "mlp_out", 2048, residual_out=True) == 0.05
    mega = InitScheme("megatron")
    expected = 0.02 / math.sqrt(12)
    assert std(mega, "vo", 512, n_layers=L, residual_out=True) == pytest.approx(expected)
    mitchell = InitScheme("mitchell")
    assert std(mitchell, "qk", 512) == pytest.approx(512**-0.5)
    assert std(mitchell, "vo", 512, residual_out=True, layer=2) == pytest.approx(
        1 / math.sqrt(2 * 512 * 3)
    )
    assert std(mitchell, "mlp_out", 2048, residual_out=True, layer=0) == pytest.approx(
        1 / math.sqrt(2 * 2048)
    )
    assert truncation(mitchell) == 3.0 and truncation(nano) is None
    assert std(InitScheme("xavier"), "mlp", 256, 1024) == pytest.approx(math.sqrt(2 / 1280))
    assert std(InitScheme("kaiming"), "mlp", 200) == pytest.approx(0.1)


def test_mup_is_width_relative():
    mup = InitScheme("mup", base_width=128)
    # embeddings constant in width, hidden 1/sqrt(fan-in), head 1/fan-in
    assert std(mup, "embedding", 256) == std(mup, "embedding", 1024) == pytest.approx(128**-0.5)
    assert std(mup, "mlp", 1024) == pytest.approx(1024**-0.5)
    ratio = std(mup, "head", 256) / std(mup, "head", 1024)
    assert ratio == pytest.approx(4.0)
    assert std(mup, "head", 128) == pytest.approx(128**-0.5)  # equals SP at the base width


@pytest.mark.parametrize(
    "text,expected",
    [
        ("gamma:1.0", InitScheme("gamma", gamma=1.0)),
        ("gamma:0.5,qk=1.0,depth", InitScheme("gamma", 0.5, (("qk", 1.0),), True)),
        ("fixed:0.02", InitScheme("fixed", std=0.02)),
        ("nanogpt", InitScheme("nanogpt")),
        ("mitchell", InitScheme("mitchell")),
        ("mup:256", InitScheme("mup", base_width=256)),
    ],
)
def test_parse_scheme_round_trip(text, expected):
    parsed = parse_scheme(text)
    assert parsed == expected
    assert parse_scheme(parsed.describe()) == parsed


@pytest.mark.parametrize(
    "text,fragment",
    [
        ("gama:1", "not known"),
        ("gamma:abc", "not a number"),
        ("gamma:0.5,qq=1", "qq=1"),
        ("fixed:-1", "positive"),
        ("nanogpt,qk=1", "only the gamma scheme"),
        ("gamma:nan", "finite"),
        ("gamma", "has no γ"),
        ("gamma:,qk=1", "has no γ"),
        ("gamma:1,qk=1,qk=0.5", "given twice"),
        ("gamma:1,q=1,q=0.5", "given twice"),
        (
            "gamma:1,qk=1,q=0.5",
            r"^override qk=1 is the shorthand for q= and k=, and q=0.5 "
            r"is given too; give qk= alone, or q= and k=$",
        ),
        ("gamma:1,k=2,qk=1", "k=2 is given too"),
    ],
)
def test_parse_scheme_errors_are_one_line(text, fragment):
    with pytest.raises(ValueError, match=fragment) as err:
        parse_scheme(text)
    assert "\n" not in str(err.value)


def test_q_and_k_are_parts_of_their_own_and_qk_their_shorthand():
    """``q=`` and ``k=`` set the query and key matrices apart; ``qk=`` is both at once, and
    ``q=G,k=G`` is the same scheme as ``qk=G`` (one spelling, ``qk=G``)."""
    apart = parse_scheme("gamma:0.5,k=0.25,q=1")
    assert apart.describe() == "gamma:0.5,q=1,k=0.25"
    assert std(apart, "q", 256) == pytest.approx(256**-1)
    assert std(apart, "k", 256) == pytest.approx(256**-0.25)
    assert std(apart, "vo", 256) == pytest.approx(256**-0.5)
    with pytest.raises(ValueError, match="sets q and k apart, so the qk part has no one γ"):
        std(apart, "qk", 256)
    one = parse_scheme("gamma:0.5,q=1")  # k keeps the global γ
    assert (std(one, "q", 256), std(one, "k", 256)) == pytest.approx((256**-1, 256**-0.5))
    both = parse_scheme("gamma:0.5,q=0.75,k=0.75,mlp=1")
    assert both == parse_scheme("gamma:0.5,qk=0.75,mlp=1")
    assert canonical_scheme("gamma:0.5,k=0.75,q=0.75") == "gamma:0.5,qk=0.75"
    shorthand = parse_scheme("gamma:0.5,qk=0.75")
    for part in ("qk", "q", "k"):
        assert std(shorthand, part, 256) == pytest.approx(256**-0.75)
    for name in SCHEMES:  # the other schemes treat q and k as the qk part
        scheme = InitScheme(name)
        assert std(scheme, "q", 96) == std(scheme, "k", 96) == std(scheme, "qk", 96)


def test_theory_table_gives_q_and_k_their_own_sigma():
    from smallinit.theory.transformer import TransformerShape, matrices

    rows = {
        r["kind"]: r
        for r in matrices(
            TransformerShape(d_model=64, n_layers=2), parse_scheme("gamma:0.5,q=1,k=0.75")
        )
    }
    assert rows["attn.q"]["sigma"] == pytest.approx(64**-1) and rows["attn.q"]["part"] == "qk"
    assert rows["attn.k"]["gamma_eff"] == pytest.approx(0.75)
    assert rows["attn.v"]["gamma_eff"] == pytest.approx(0.5)


def test_bad_dimensions_rejected():
    s = InitScheme()
    with pytest.raises(ValueError, match="d_in=0"):
        matrix_std(s, "mlp", 0, 4, n_layers=2)
    with pytest.raises(ValueError, match="part 'ffn'"):
        matrix_std(s, "ffn", 4, 4, n_layers=2)
    with pytest.raises(ValueError, match="layer=3"):
        matrix_std(s, "mlp", 4, 4, n_layers=2, layer=3)


def test_every_scheme_gives_positive_finite_std_for_every_part():
    for name in SCHEMES:
        scheme = InitScheme(name)
        for part in PARTS:
            value = matrix_std(
                scheme, part, 96, 384, n_layers=3, layer=2, residual_out=part in ("vo", "mlp_out")
            )
            assert math.isfinite(value) and value > 0


def test_number_text_is_exact_and_shortest():
    assert [number_text(v) for v in (1.0, 0.5, 0.75, 100.0, -0.0, 1e-7, 2.5e16)] == [
        "1",
        "0.5",
        "0.75",
        "100",
        "0",
        "1e-07",
        "2.5e+16",
    ]
    for v in (0.1234567, 1 / 3, 1.0000000000000002, 0.02, 123456789.125):
        assert float(number_text(v)) == v  # round trip, where :g would round
    assert f"{0.1234567:g}" != number_text(0.1234567)


@pytest.mark.parametrize(
    "texts,canonical",
    [
        (("gamma:1", "gamma:1.0", "gamma:1.00", "gamma:1e0", "GAMMA: 1"), "gamma:1"),
        (("gamma:0.5", "gamma:.5", "gamma:5e-1"), "gamma:0.5"),
        (("gamma:0.75",), "gamma:0.75"),
        (
            ("gamma:0.5,mlp=1.0,qk=1,depth", "gamma:0.5, depth, qk=1.00, mlp=1"),
            "gamma:0.5,qk=1,mlp=1,depth",
        ),
        (("fixed", "fixed:0.02", "fixed:2e-2"), "fixed:0.02"),
        (("mup", "mup:128"), "mup:128"),
        (("nanogpt", " NanoGPT "), "nanogpt"),
    ],
)
def test_canonical_scheme_one_spelling_per_scheme(texts, canonical):
    assert {canonical_scheme(t) for t in texts} == {canonical}
    assert canonical_scheme(canonical) == canonical  # a fixed point
    assert parse_scheme(canonical) == parse_scheme(texts[0])


def test_canonical_scheme_keeps_different_schemes_apart():
    texts = [
        "gamma:1",
        "gamma:1.0000001",
        "gamma:1,depth",
        "gamma:1,qk=0.5",
        "fixed:0.02",
        "megatron:0.02",
        "mup:256",
        "xavier",
        "kaiming",
        "mitchell",
    ]
    assert len({canonical_scheme(t) for t in texts}) == len(texts)
