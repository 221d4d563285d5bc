"""``smallinit claims``: the study's claims table from stored runs (:mod:`smallinit.study.claims`).

It never trains: runs are looked up in the store read-only, and a claim whose runs are
missing at a profile says ``not run`` (the table's notes list which runs)."""

from __future__ import annotations

import argparse
import json
import math

from smallinit.cli.util import (
    HelpFormatter,
    add_json_option,
    add_overlay_options,
    overlaid_profile,
    path_arg,
    print_json,
    profile_arg,
)
from smallinit.core.errors import ConfigError
from smallinit.study.rules import DEFAULT_RULES, RULES

DEFAULT_PROFILES = ("quick", "medium", "fair", "fair-reasoning")


def _number(x: float, digits: int = 3) -> str:
    return "—" if not math.isfinite(x) else f"{x:.{digits}f}"


def _p(x: float) -> str:
    return "—" if not math.isfinite(x) else ("<1e-4" if x < 1e-4 else f"{x:.2g}")


def _bound(r) -> str:
    """The §13.2 one-sided bound at Holm's level, with its side (≥ lower, ≤ upper)."""
    d = r.decision
    if d is None or not math.isfinite(d.bound_holm):
        return "—"
    return f"{r.bound_side}{_number(d.bound_holm)}"


def format_table(records) -> str:
    """One line per claim and profile (with the profiles where the claim is decided), then
    notes: each record's detail and missing runs. ``p``: the deciding p of the rules in
    force; ``p Holm``, ``bound``: §13.2's Holm-adjusted p and one-sided bound at Holm's
    level (docs/science.md §13.2, 3 and 4)."""
    w = max([8, *(len(r.profile) for r in records)])
    d = max([10, *(len(", ".join(r.decided_at)) for r in records)])
    head = (
        f"{'id':<32} {'profile':<{w}} {'effect':>8} {'95% CI':>19} {'p':>7} "
        f"{'p Holm':>7} {'bound':>8} {'n':>3}  {'decided at':<{d}}  verdict"
    )
    lines = [head, "-" * len(head)]
    notes = []
    for r in records:
        e = r.judgement.estimate
        ci = f"[{_number(e.ci_low)}, {_number(e.ci_high)}]"
        holm = _p(r.decision.p_holm) if r.decision is not None else "—"
        mark = ""
        if r.detail or r.missing:
            notes.append((r, len(notes) + 1))
            mark = f" [{len(notes)}]"
        lines.append(
            f"{r.id:<32} {r.profile:<{w}} {_number(e.effect):>8} {ci:>19} "
            f"{_p(r.p_value):>7} {holm:>7} {_bound(r):>8} {e.n if e.n else '—':>3}  "
            f"{', '.join(r.decided_at):<{d}}  {r.verdict}{mark}"
        )
    if notes:
        lines.append("")
    for r in records:
        for name, j in r.arms.items():
            e = j.estimate
            lines.append(
                f"  beside {r.id} at {r.profile}, arm {name}: effect "
                f"{_number(e.effect)} [{_number(e.ci_low)}, {_number(e.ci_high)}], "
                f"p {_p(e.p_value)}, n {e.n}, {j.verdict}"
            )
    for r, i in notes:
        lines.append(f"[{i}] {r.id} at {r.profile}: {r.detail}")
        shown = r.missing[:5]
        lines += [f"      missing {m}" for m in shown]
        if len(r.missing) > len(shown):
            lines.append(f"      ... and {len(r.missing) - len(shown)} more")
    return "\n".join(lines)


def _profile_or_assignment(text: str) -> str:
    """A packaged profile, or a ``key=value`` override that followed ``--profile P``."""
    return text if "=" in text else profile_arg(text)


def _chosen(args: argparse.Namespace) -> list[str]:
    """The profiles to judge: those of ``--profile`` (default: :data:`DEFAULT_PROFILES`),
    or the one ``--profile`` with ``--config`` and the ``key=value`` overrides laid over it."""
    from smallinit.core import profiles

    given = [p for p in args.profile or [] if "=" not in p]
    overrides = [p for p in args.profile or [] if "=" in p] + args.overrides
    if args.config is None and not overrides:
        return list(dict.fromkeys(given or [p for p in DEFAULT_PROFILES if p in profiles.names()]))
    if len(set(given)) != 1:
        raise ConfigError(
            f"claims --config and KEY=VALUE lay over one profile; give one "
            f"--profile P (given: {', '.join(given) or 'none'})"
        )
    return [overlaid_profile(args, given[0], overrides)]


def _hosts(runs, runs_dir) -> list[dict]:
    """The distinct host records (processor, vector extensions, library versions, the GPU
    where one was used) in the ``status.json`` of a record's runs, so that a committed claims
    file says which machines computed its numbers."""
    from smallinit.core.errors import StoreError
    from smallinit.core.runs import read_store_json
    from smallinit.core.store import RunStore

    root = RunStore(runs_dir).root
    seen: dict[str, dict] = {}
    for ref in runs:
        try:
            status = read_store_json(root / ref / "status.json")
        except (OSError, ValueError, StoreError):  # gone or damaged since it was judged
            continue
        host = status.get("host") if isinstance(status, dict) else None
        if isinstance(host, dict):
            seen.setdefault(json.dumps(host, sort_keys=True), host)
    return list(seen.values())


def _cmd_claims(args: argparse.Namespace) -> int:
    from smallinit.core.store import RunStore
    from smallinit.study.claims import table

    chosen = _chosen(args)
    records = table(chosen, RunStore(args.runs_dir), rules=args.rules)
    if args.json:
        print_json([{**r.as_json(), "hosts": _hosts(r.runs, args.runs_dir)} for r in records])
    else:
        print(format_table(records))
    return 0


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "claims",
        help="the study's claims table (docs/science.md §13) from stored runs",
        description=(
            "Judge the study's claims by the verdict rules of docs/science.md §13.2 on "
            "the runs already in the store (made by `smallinit figs --profile P` or `make "
            "figs PROFILE=P`). Nothing is trained: a claim whose runs are missing at a "
            "profile is `not run`, and the notes list the missing runs. Verdicts under "
            "§13.2: holds, contradicted, not at this scale (equivalence within the claim's "
            "effect of interest), undecided, not run; under --rules 13.1 (§13's earlier "
            "rules): holds, partial, not at this scale, contradicted, not run. The table "
            "shows the raw p, §13.2's Holm-adjusted p and one-sided bound.\n"
            "A profile with an overlay (one --profile, --config FILE and KEY=VALUE, as "
            "smallinit figs took them) judges the runs figs made at it, e.g.\n"
            "  smallinit claims --profile quick llm-sweeps.plan.seeds=[0]"
        ),
        formatter_class=HelpFormatter,
    )
    parser.add_argument(
        "--profile",
        type=_profile_or_assignment,
        nargs="+",
        action="extend",
        default=None,
        metavar="P",
        help="profiles to judge, e.g. --profile quick medium full (default: "
        "quick, medium, fair and fair-reasoning)",
    )
    add_overlay_options(parser, "llm-sweeps.plan.seeds=[0] (with one --profile)")
    parser.add_argument(
        "--rules",
        choices=RULES,
        default=DEFAULT_RULES,
        help="the verdict rules: 13.2 (docs/science.md §13.2: Holm over the profile's "
        "claims, exact tests at sd 0, equivalence for `not at this scale`, else "
        "`undecided`) or 13.1 (§13 and §13.1, the earlier rules, which the files in "
        "bench-results/claims/rules-13.1/ hold); the records carry §13.2's numbers under "
        "either (default: %(default)s)",
    )
    parser.add_argument(
        "--runs-dir",
        type=path_arg,
        default=None,
        metavar="DIR",
        help="run store root (default: $SMALLINIT_RUNS or ./runs)",
    )
    add_json_option(
        parser,
        help="print a JSON list of records (id, claim, profile, effect, "
        "ci_low, ci_high, p_value, n_seeds, verdict, detail, arms, runs: the "
        "kind/key of every run behind it; rules, values: the per-seed values, "
        "conditions, effect_of_interest, test, p_raw, p_holm and the other "
        "§13.2 numbers) instead of the table",
    )
    parser.set_defaults(func=_cmd_claims)
