"""Benchmark scoring: log-likelihood choice rules on fixed logits, answer extraction and
normalization, and a tiny real model whose right answers are forced by training."""

import math

import numpy as np
import pytest
import torch

from smallinit.llm.downstream import scoring as be
from smallinit.llm.downstream.tasks import TASKS, Item

# ----------------------------------------------------------------------------- fixed logits


def test_continuation_logprobs_sum_the_scored_positions_only():
    logits = torch.tensor(
        [
            [[0.0, math.log(3.0)], [math.log(4.0), 0.0], [0.0, 0.0]],
            [[5.0, 5.0], [0.0, 0.0], [9.0, 9.0]],
        ]
    )
    targets = torch.tensor([[1, 0, 1], [0, 1, 0]])
    # row 0: length 3, score the last 2 positions: log(4/5) + log(1/2)
    # row 1: length 2 (position 2 is padding), score both: log(1/2) + log(1/2)
    got = be.continuation_logprobs(logits, targets, [(3, 2), (2, 2)])
    np.testing.assert_allclose(got, [math.log(0.8) + math.log(0.5), 2 * math.log(0.5)], rtol=1e-6)


def test_length_normalization_can_overturn_the_raw_choice():
    ll = [-10.0, -12.0]
    assert be.pick(ll) == 0
    assert be.pick(ll, [2, 6]) == 1  # -5 per char vs -2 per char
    assert be.pick([-3.0, -3.0, -1.0], [1, 1, 1]) == 2
    assert be.pick([-2.0, -2.0]) == 0  # ties go to the lowest index


def test_score_mc_records_raw_acc_and_per_character_acc_norm_as_lm_eval_names_them():
    class FixedLM:  # log-likelihoods chosen so the two rules disagree on item 0
        def loglikelihood(self, pairs, desc=""):
            table = {" a": -4.0, " bbbbbbbbb": -6.0, " yes": -1.0, " no": -2.0}
            return [{"loglik": table[c], "tokens": 1, "truncated": c == " no"} for _, c in pairs]

    items = [Item("0", "q", (" a", " bbbbbbbbb"), 1), Item("1", "q", (" yes", " no"), 1)]
    recs = be.score_mc(FixedLM(), items)
    # item 0: raw -4 > -6 picks " a" (wrong); per character -4/2 = -2 < -6/10 picks the gold
    assert [(r["pred"], r["pred_norm"], r["acc"], r["acc_norm"]) for r in recs] == [
        (0, 1, 0, 1),
        (0, 0, 0, 0),
    ]
    summary = be.summarize(recs, TASKS["arc_easy"])
    assert summary["acc"] == 0.0 and summary["acc_norm"] == 0.5
    assert summary["acc_norm_stderr"] == pytest.approx(0.5)  # s = 0.7071, n = 2
    assert summary["acc_stderr"] == 0.0
    assert summary["chance"] == 0.5 and summary["primary"] == "acc_norm"
    assert summary["truncated"] == 1 and summary["normalization"] == "characters"


def test_stderr_is_lm_evals_sample_std_over_sqrt_n():
    rng = np.random.default_rng(0)
    outcomes = (rng.random(37) < 0.4).astype(int)
    recs = [{"id": str(i), "exact_match": int(o)} for i, o in enumerate(outcomes)]
    s = be.summarize(recs, TASKS["gsm8k"])
    mu = outcomes.mean()
    lm_eval = math.sqrt(sum((x - mu) ** 2 for x in outcomes) / (len(outcomes) - 1))
    assert s["exact_match"] == pytest.approx(mu)
    assert s["exact_match_stderr"] == pytest.approx(lm_eval / math.sqrt(len(outcomes)))
    assert s["primary"] == "exact_match" and s["truncated"] == 0


def test_results_stored_under_the_old_names_read_as_lm_eval_names():
    old_mc = {
        "task": "arc_easy",
        "n": 4,
        "acc": 0.75,
        "se": 0.25,
        "acc_raw": 0.5,
        "se_raw": 0.29,
        "metric": "acc_norm",
        "truncated": 0,
        "chance": 0.25,
    }
    new = be.summary_metrics(old_mc)
    assert (new["acc"], new["acc_stderr"], new["acc_norm"], new["acc_norm_stderr"]) == (
        0.5,
        0.29,
        0.75,
        0.25,
    )
    assert new["primary"] == "acc_norm" and "se" not in new and "metric" not in new
    old_gen = {"task": "gsm8k", "n": 3, "acc": 1 / 3, "se": 0.33, "metric": "exact_match/number"}
    assert be.summary_metrics(old_gen)["exact_match"] == pytest.approx(1 / 3)
    current = be.summarize([{"id": "0", "exact_match": 1}], TASKS["gsm8k"])
    assert be.summary_metrics(current) == current
    old_rec = {"id": "x", "correct": 1, "correct_raw": 0, "chars": [2, 3]}
    assert (be.outcome(old_rec, "acc_norm"), be.outcome(old_rec, "acc")) == (1.0, 0.0)
    assert be.primary_metric([old_rec]) == "acc_norm"
    assert be.outcome({"correct": 1}, "exact_match") == 1.0


def test_standard_error_of_an_accuracy():
    mean, se = be.mean_se([1, 0, 1, 1])
    assert mean == 0.75 and se == pytest.approx(0.25)  # s = 0.5 (ddof 1), √4 = 2
    assert be.mean_se([1]) == (1.0, 0.0)


# ----------------------------------------------------------------------------- extraction
@pytest.mark.parametrize(
    "text, expected",
    [
        ("Janet sells 16 - 3 - 4 = 9 eggs. 9 * 2 = 18. So the answer is 18.", "18"),
        ("So the answer is $1,234.", "1234"),
        ("The answer is -7", "-7"),
        ("so 12 + 3 = 15\n#### 15", "15"),
        ("She pays 2.50 per cup, total 7.50", "7.5"),
        ("the answer is 18.0", "18"),
        ("First 3 apples, then 4 more. So the answer is 7. Then 99", "7"),
        ("no digits here", None),
    ],
)
def test_gsm8k_final_number(text, expected):
    assert be.extract_number(text) == expected


def test_gsm8k_judging_compares_numbers_not_strings():
    spec = TASKS["gsm8k"]
    assert be.judge(spec, " So the answer is 18.00.", ["18"]) == ("18", True)
    assert be.judge(spec, " So the answer is 1,800.", ["1800"])[1]
    assert not be.judge(spec, " So the answer is 17.", ["18"])[1]
    assert not be.judge(spec, " I don't know", ["18"])[1]


def test_qa_normalization_and_match():
    assert be.normalize_answer("The  Beatles!") == "beatles"
    assert be.normalize_answer("an Apple, a day") == "apple day"
    spec = TASKS["triviaqa"]
    assert be.judge(spec, " the Sunset Blvd.\nQuestion: next", ["Sunset Blvd", "x"]) == (
        "the Sunset Blvd.",
        True,
    )
    assert not be.judge(spec, " Sunset", ["Sunset Boulevard"])[1]
    assert not be.judge(spec, "   ", ["a"])[1]  # an empty answer never matches


def test_math_answers():
    gen = (
        "We get $x = 4$.\nFinal Answer: The final answer is $\\dfrac{1}{2}$. I hope it is correct."
    )
    assert be.extract_math(gen) == "\\dfrac{1}{2}"
    assert be.judge(TASKS["math"], gen, ["\\frac{1}{2}"])[1]
    assert be.extract_math("so $\\boxed{\\sqrt{2}+{1}}$ is it") == "\\sqrt{2}+{1}"
    assert not be.judge(TASKS["math"], "The final answer is $3$.", ["4"])[1]
    assert be.judge(TASKS["bbh"], " (B).\n", ["(b)"])[1]


def test_cut_at_the_earliest_stop_string():
    assert be.cut_at_stop("abc\n\nQuestion: x", ["Question:", "\n\n"]) == ("abc", True)
    assert be.cut_at_stop("abc", ["\n"]) == ("abc", False)


# ----------------------------------------------------------------------------- a real model
TEXT = (
    "the cat sat on the mat. Question: 2 plus 3?\nAnswer: So the answer is 5.\n\n"
    "Question: capital of France?\nAnswer: Paris\n\n"
)


@pytest.fixture(scope="module")
def memorized():
    """A 1-layer transformer trained until it reproduces TEXT: its correct choices and
    answers are forced by construction, not by any knowledge."""
    from smallinit.llm.data.tokenizer import END_OF_TEXT, train_bpe
    from smallinit.llm.model.transformer import Transformer
    from smallinit.llm.run_config import ModelConfig

    torch.manual_seed(0)
    tok = train_bpe([TEXT] * 20, 300)
    ids = tok.encode(TEXT * 8).ids
    cfg = ModelConfig(
        vocab_size=tok.get_vocab_size(), context=48, d_model=64, n_layers=1, n_heads=2
    )
    model = Transformer(cfg)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    data = torch.tensor(ids)
    starts = torch.arange(0, len(ids) - cfg.context - 1, 3)
    for _ in range(150):
        batch = starts[torch.randint(len(starts), (16,))]
        idx = batch[:, None] + torch.arange(cfg.context + 1)
        chunk = data[idx]
        _, loss = model(chunk[:, :-1], chunk[:, 1:])
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert float(loss.detach()) < 0.2
    return be.TorchLM(model.eval(), tok, batch_size=3, eot_id=tok.token_to_id(END_OF_TEXT))


def test_real_model_picks_the_memorized_choice(memorized):
    items = [
        Item("cat", "the cat sat on the", (" hat.", " mat.", " dog!"), 1),
        Item("fr", "Question: capital of France?\nAnswer:", (" Rome", " Paris"), 1),
        Item("long", TEXT * 3 + "the cat sat on the", (" mat.", " cat."), 0),
    ]
    recs = be.score_mc(memorized, items)
    assert [r["acc_norm"] for r in recs] == [1, 1, 1]
    assert [r["truncated"] for r in recs] == [False, False, True]  # left-cut context


def test_scores_do_not_depend_on_the_batch_size(memorized):
    pairs = [("the cat", " sat on"), ("Question: 2 plus", " 3?"), ("x", " the mat.")] * 2
    one = be.TorchLM(memorized.model, memorized.tok, batch_size=1, eot_id=memorized.eot_id)
    a = [r["loglik"] for r in one.loglikelihood(pairs)]
    b = [r["loglik"] for r in memorized.loglikelihood(pairs)]
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_real_model_generates_and_is_judged(memorized):
    gsm = [
        Item("g", "Question: 2 plus 3?\nAnswer:", answers=("5",)),
        Item("w", "Question: capital of France?\nAnswer:", answers=("6",)),
    ]
    recs = be.score_gen(memorized, gsm, TASKS["gsm8k"], max_new_tokens=12)
    assert recs[0]["generation"] == " So the answer is 5."  # stopped before "\n\n"
    assert [r["exact_match"] for r in recs] == [1, 0]
    assert [r["truncated"] for r in recs] == [False, False]
    qa = be.score_gen(
        memorized,
        [Item("p", "Question: capital of France?\nAnswer:", answers=("paris",))],
        TASKS["nq_open"],
        max_new_tokens=8,
    )
    assert qa[0]["extracted"] == "Paris" and qa[0]["exact_match"] == 1


def _greedy_reference(lm, prompt, max_new_tokens, stops):
    """The decoding the benchmark did before the KV cache: one full forward of the last
    ``context`` tokens per new token, one prompt at a time."""
    seq = lm.encode([prompt])[0]
    new = []
    with torch.no_grad():
        for _ in range(max_new_tokens):
            logits = lm.model(torch.tensor([seq[-lm.context :]]))
            token = int(logits[0, -1].argmax())
            if token == lm.eot_id:
                break
            seq.append(token)
            new.append(token)
            if be.cut_at_stop(lm.tok.decode(new), stops)[1]:
                break
    return be.cut_at_stop(lm.tok.decode(new), stops)[0]


def test_cached_batched_generation_equals_recomputing_each_prompt_alone(memorized):
    prompts = [
        "Question: 2 plus 3?\nAnswer:",
        "the cat",
        "Question: capital of France?",
        TEXT * 2 + "Question: 2 plus",
    ]  # the last is longer than the context (48)
    stops = TASKS["gsm8k"].stop
    got = memorized.generate(prompts, max_new_tokens=20, stops=stops)
    want = [_greedy_reference(memorized, p, 20, stops) for p in prompts]
    assert [g["text"] for g in got] == want
    assert want[0] == " So the answer is 5."
    assert [g["truncated"] for g in got] == [False, False, False, True]
    single = be.TorchLM(memorized.model, memorized.tok, batch_size=1, eot_id=memorized.eot_id)
    assert single.generate(prompts, max_new_tokens=20, stops=stops) == got
