"""``smallinit llm sample RUN --prompt ...``: text from a trained run.

:func:`register_sample_command` adds the command to the ``llm`` group's command subparsers;
the handler imports torch lazily so ``--help`` stays fast.
"""

from __future__ import annotations

import argparse
import sys

from smallinit.cli.llm_downstream import add_trust_option
from smallinit.cli.util import (
    add_command,
    add_json_option,
    finite_float,
    integer,
    path_arg,
    positive_int,
    print_json,
    run_arg,
)

# The limits of smallinit.llm.training.sample (MAX_NEW_TOKENS, MAX_SAMPLES) and of
# Transformer.generate (MIN_TEMPERATURE, MAX_TEMPERATURE), repeated here so that --help
# does not import torch; tests/llm/test_bad_input_llm.py checks that they agree.
MAX_NEW_TOKENS, MAX_SAMPLES = 10_000, 1_000
MIN_TEMPERATURE, MAX_TEMPERATURE = 1e-3, 1e3


def temperature(text: str) -> float:
    """0 (greedy) or a number in [MIN_TEMPERATURE, MAX_TEMPERATURE]."""
    value = finite_float(text)
    if not (value == 0 or MIN_TEMPERATURE <= value <= MAX_TEMPERATURE):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not allowed; use 0 (greedy) or a number in [{MIN_TEMPERATURE:g}, "
            f"{MAX_TEMPERATURE:g}]"
        )
    return value


def count_up_to(high: int):
    """An integer option in 1..high."""

    def parse(text: str) -> int:
        value = integer(text)
        if not 1 <= value <= high:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not allowed; give an integer in 1..{high}"
            )
        return value

    return parse


def utf8_text(text: str) -> str:
    """Text that is valid UTF-8 (argv bytes that are not arrive as lone surrogates)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        code = ord(text[err.start])
        what = f"byte 0x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"{chr(code)!r}"
        raise argparse.ArgumentTypeError(
            f"the text is not UTF-8: {what} at character {err.start}; give UTF-8 text"
        ) from None
    return text


def seed_int(text: str) -> int:
    """A generator seed: an integer in [0, 2**63)."""
    value = integer(text)
    if not 0 <= value < 2**63:
        raise argparse.ArgumentTypeError(f"{text!r} must be an integer in [0, 2**63)")
    return value


def cmd_sample(args: argparse.Namespace) -> int:
    from smallinit.llm.downstream.run import check_device, load_trained
    from smallinit.llm.training.sample import sample_texts
    from smallinit.llm.training.trained import resolve_run

    check_device(args.device)
    run = resolve_run(args.run, args.runs_dir)
    model, tok, cfg, eot = load_trained(run, args.device, trust_data=args.trust_run_data)
    out = sample_texts(
        model,
        tok,
        args.prompt,
        max_new_tokens=args.max_new_tokens,
        temperature=args.temperature,
        top_k=args.top_k,
        num_samples=args.num_samples,
        seed=args.seed,
        eot_id=eot,
        device=args.device,
    )
    context = cfg.model.context
    if out["prompt_tokens"] + args.max_new_tokens - 1 > context:
        print(
            f"note: the prompt ({out['prompt_tokens']} tokens) plus --max-new-tokens "
            f"{args.max_new_tokens} exceed the model's context of {context} tokens; later "
            f"steps see the last {context} tokens only (sliding window)",
            file=sys.stderr,
        )
    if args.json:
        print_json(
            {
                "run": run.name,
                "prompt": args.prompt,
                "seed": args.seed,
                "temperature": args.temperature,
                "top_k": args.top_k,
                "max_new_tokens": args.max_new_tokens,
                **out,
            }
        )
        return 0
    for j, sample in enumerate(out["samples"]):
        if j:
            print("---")
        print(sample["text"])
    return 0


def register_sample_command(commands) -> None:
    """Add ``sample`` to the ``llm`` group."""
    p = add_command(
        commands,
        "sample",
        cmd_sample,
        help="continue a prompt with a trained run's model (KV-cache generation)",
        description="Print the continuation of --prompt by a trained run's model, decoded "
        "with the run's tokenizer. Each token is drawn from softmax(logits / temperature) "
        "over the top-k logits (nanoGPT's sample.py rule; --temperature 0 is greedy) with a "
        "generator seeded by --seed, so a run, prompt and seed give the same text on CPU. A "
        "sample ends at the end-of-text token or after --max-new-tokens; a prompt longer "
        "than the model's context is read through a sliding window of its last `context` "
        "tokens.\n\nexample: smallinit llm sample llm-train/<key> --prompt $'Question: "
        "2 plus 3?\\nAnswer:' --temperature 0",
    )
    p.add_argument(
        "run",
        type=run_arg,
        metavar="RUN",
        help="trained run: llm-train/<key> or a key prefix under RUNS_DIR, or a run directory",
    )
    p.add_argument(
        "--prompt",
        type=utf8_text,
        default="",
        metavar="TEXT",
        help="text to continue (default: empty, start from the end-of-text token)",
    )
    p.add_argument(
        "--max-new-tokens",
        type=count_up_to(MAX_NEW_TOKENS),
        default=64,
        metavar="N",
        help=f"tokens to generate at most, 1..{MAX_NEW_TOKENS} (a "
        "progress bar, or a log line every 10 s, shows a long sample)",
    )
    p.add_argument(
        "--temperature",
        type=temperature,
        default=0.8,
        metavar="T",
        help=f"softmax temperature: 0 picks the most likely token (greedy), else "
        f"{MIN_TEMPERATURE:g}..{MAX_TEMPERATURE:g} (below, a draw is greedy in all "
        "but name and float32 logits / T overflow; above, uniform over the top-k)",
    )
    p.add_argument(
        "--top-k",
        type=positive_int,
        default=200,
        metavar="K",
        help="sample among the K most likely tokens only",
    )
    p.add_argument(
        "--num-samples",
        type=count_up_to(MAX_SAMPLES),
        default=1,
        metavar="N",
        help=f"independent samples, 1..{MAX_SAMPLES}, generated as one batch "
        "(printed between '---' lines)",
    )
    p.add_argument("--seed", type=seed_int, default=0, help="seed of the sampling generator")
    p.add_argument("--device", default="cpu", help="torch device, e.g. cpu or cuda")
    add_json_option(p, help="print the samples and settings as JSON")
    add_trust_option(p)
    p.add_argument(
        "--runs-dir",
        type=path_arg,
        default=None,
        metavar="DIR",
        help="run store root (default: $SMALLINIT_RUNS or ./runs)",
    )


__all__ = ["register_sample_command"]
