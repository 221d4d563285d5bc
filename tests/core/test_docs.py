"""docs/science.md is the science reference the code cites.

Every "docs/science.md §n" reference in the repository's tracked Python, Markdown and TOML
files (code, docstrings, --help texts, README, configs) must name a section that exists in
docs/science.md, and no tracked file outside docs/ may point at the workspace-only
specification that a clone does not have.

The literal strings this test looks for are assembled at run time, so the test file itself
never matches them.
"""

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
SCIENCE = DOCS / "science.md"
DOC_NAME = "docs/science" + ".md"
SPEC_PATH = "../shared/" + "SPEC"
SCANNED_SUFFIXES = (".py", ".md", ".toml")
# Skipped when walking a tree without git (an unpacked sdist, a copy): not sources.
NOT_SOURCES = {
    ".git",
    ".venv",
    "build",
    "dist",
    "runs",
    "__pycache__",
    "bench-results",
    ".pytest_cache",
    ".ruff_cache",
    ".hypothesis",
    ".benchmarks",
    "out",
}

_NUM = r"\d+(?:\.\d+)?"
_SEP = r"\s*(?:,|–|-|—|and|or|to)\s*"
REFERENCE = re.compile(rf"{re.escape(DOC_NAME)}\s*§\s*({_NUM})((?:{_SEP}§\s*{_NUM})*)")
HEADING = re.compile(rf"^#{{2,3}}\s+({_NUM})[.\s]", re.MULTILINE)


def sections(text: str) -> list[str]:
    """Section numbers of a Markdown text, from headings '## 4. Title' / '### 4.1 Title'."""
    return HEADING.findall(text)


def _expand(lo: str, hi: str) -> list[str]:
    """The sections a range §lo–§hi covers (both ends when it is not a plain range)."""
    a, b = lo.split("."), hi.split(".")
    if len(a) == len(b) == 1 and int(a[0]) <= int(b[0]):
        return [str(n) for n in range(int(a[0]), int(b[0]) + 1)]
    if len(a) == len(b) == 2 and a[0] == b[0] and int(a[1]) <= int(b[1]):
        return [f"{a[0]}.{n}" for n in range(int(a[1]), int(b[1]) + 1)]
    return [lo, hi]


def cited_sections(text: str) -> set[str]:
    """Every section number cited as 'docs/science.md §n' in ``text``, lists ('§2, §5')
    and ranges ('§2–§4', '§2-§4') included."""
    out: set[str] = set()
    for match in REFERENCE.finditer(text):
        numbers = [match.group(1)]
        tail = match.group(2)
        pieces = re.findall(rf"({_SEP})§\s*({_NUM})", tail)
        for sep, num in pieces:
            if sep.strip() in ("–", "-", "—", "to"):
                out.update(_expand(numbers[-1], num))
            numbers.append(num)
        out.update(numbers)
    return out


def _tracked_files() -> list[Path]:
    """Tracked files (git), else every file under the root outside non-source folders."""
    try:
        names = (
            subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True)
            .stdout.decode()
            .split("\0")
        )
        files = [ROOT / n for n in names if n]
    except (OSError, subprocess.CalledProcessError):
        files = [
            p
            for p in ROOT.rglob("*")
            if p.is_file()
            and not any(
                part in NOT_SOURCES or part.endswith(".egg-info")
                for part in p.relative_to(ROOT).parts
            )
        ]
    return [f for f in files if f.is_file()]


def _read(path: Path) -> str:
    return path.read_bytes().decode("utf-8", errors="replace")


# ----------------------------------------------------------------------------- the parser
def test_reference_parser_reads_lists_ranges_and_subsections():
    text = (
        f"see {DOC_NAME} §2–§4, §7.3 and §9; also ({DOC_NAME} §1) and "
        f"{DOC_NAME} §7.1-§7.3, but not §12 after a full stop. SPEC §11"
    )
    assert cited_sections(text) == {"1", "2", "3", "4", "7.1", "7.2", "7.3", "9"}


def test_heading_parser():
    text = "# Title\n## 1. Rule\ntext §2\n### 4.1 Sub\n## 12. Sources\n#### 5.5.5 deep\n"
    assert sections(text) == ["1", "4.1", "12"]


def test_a_missing_section_is_detected():
    present = set(sections("## 1. A\n## 2. B\n"))
    cited = cited_sections(f"{DOC_NAME} §1, §2 and {DOC_NAME} §3")
    assert sorted(cited - present) == ["3"]


# ----------------------------------------------------------------------------- the document
def test_science_document_has_the_numbered_sections():
    found = sections(_read(SCIENCE))
    top = [s for s in found if "." not in s]
    # §1–§7 keep the numbering the code has always cited; §8 onwards: what the code adds
    assert top == [str(n) for n in range(1, len(top) + 1)] and len(top) >= 11
    assert len(found) == len(set(found)), "a section number is used twice"


def test_every_figure_has_its_subsection_of_section_7():
    from smallinit.study.figs import FIGURES

    found = set(sections(_read(SCIENCE)))
    missing = [n for n in FIGURES if f"7.{n}" not in found]
    assert not missing, f"figures without a §7.n subsection in docs/science.md: {missing}"


def test_every_reference_names_an_existing_section():
    present = set(sections(_read(SCIENCE)))
    bad = []
    for path in _tracked_files():
        if path.suffix not in SCANNED_SUFFIXES:
            continue
        for num in sorted(cited_sections(_read(path))):
            if num not in present:
                bad.append(f"{path.relative_to(ROOT)}: §{num}")
    assert not bad, f"references to sections {DOC_NAME} does not have: {bad}"


def test_no_file_outside_docs_points_at_the_workspace_spec():
    bad = [
        str(p.relative_to(ROOT))
        for p in _tracked_files()
        if DOCS not in p.parents and SPEC_PATH.encode() in p.read_bytes()
    ]
    assert not bad, (
        f"{bad} still point at {SPEC_PATH}.md, which a clone does not have; cite {DOC_NAME} instead"
    )


# ----------------------------------------------------------------------------- the doc set
# The README says what the project answers, how to install it and the claims at a glance;
# docs/*.md hold the rest. Their relative links and anchors must resolve, and the commands
# they show must parse with the CLI's own parser, in every file of the set alike.
README = ROOT / "README.md"
README_MAX_LINES = 200
FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.MULTILINE | re.DOTALL)
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"!?\[(?:[^\]\n]|\][^(\n])*?\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
ATX = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t#]*$", re.MULTILINE)


def doc_set() -> list[Path]:
    """The README and every Markdown file of docs/."""
    return [README, *sorted(DOCS.glob("*.md"))]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup dropped, lower case, every character that is
    not a letter, digit, space, hyphen or underscore removed, spaces turned into hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = text.replace("`", "").replace("*", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every heading's anchor in a Markdown text, repeats numbered as GitHub does (-1, -2)."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    for heading in ATX.findall(FENCE.sub("", text)):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(text: str) -> list[str]:
    """The targets of a Markdown text's links and images, outside code."""
    return LINK.findall(INLINE_CODE.sub("", FENCE.sub("", text)))


def broken_links(path: Path) -> list[str]:
    """Each relative link of ``path`` whose file does not exist or whose anchor is not a
    heading of that file, as 'target: why'."""
    bad = []
    for target in links(_read(path)):
        if re.match(r"[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):  # https:, mailto:
            continue
        name, _, fragment = target.partition("#")
        dest = (path.parent / name).resolve() if name else path
        if not dest.exists():
            bad.append(f"{target}: no such file")
        elif fragment and (dest.suffix != ".md" or fragment not in anchors(_read(dest))):
            bad.append(f"{target}: no heading #{fragment} in {dest.name}")
    return bad


def shown_commands(text: str, program: str) -> list[list[str]]:
    """The command lines of ``program`` in a Markdown text's ```bash blocks, as argv after
    the program's name: continuation lines joined, comments dropped, leading VAR=value
    assignments skipped, `torchrun ... -m smallinit` and `python -m smallinit` read as the
    program; lines that need the shell's own expansion ($(...)) are left out."""
    import shlex

    out = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            if "$(" in line:
                continue
            argv = shlex.split(line, comments=True)
            while argv and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", argv[0]):
                argv = argv[1:]
            if argv[:1] in (["torchrun"], ["python"], ["python3"]) and "-m" in argv:
                argv = argv[argv.index("-m") + 1 :]
            if argv[:1] == [program]:
                out.append(argv[1:])
    return out


def test_readme_is_short():
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, (
        f"README.md has {lines} lines (at most {README_MAX_LINES}): move the details to docs/"
    )


def test_slug_and_link_parsers():
    text = (
        "# smallinit\n## 13. The study's claims\n### 7.1 Phase diagram\n"
        "## Reading `smallinit compare` (toy → transformer)\n## The `h200` profile\n"
        "## A, B\n## A, B\n```bash\n# not a heading\n```\n"
    )
    assert anchors(text) == {
        "smallinit",
        "13-the-studys-claims",
        "71-phase-diagram",
        "reading-smallinit-compare-toy--transformer",
        "the-h200-profile",
        "a-b",
        "a-b-1",
    }
    body = (
        "see [a](usage.md#x), ![img](img/a.png) and [web](https://x.org); "
        "`[not](a link)`\n```\n[nor](this.md)\n```\n"
    )
    assert links(body) == ["usage.md#x", "img/a.png", "https://x.org"]


def test_a_broken_link_or_anchor_is_detected(tmp_path):
    (tmp_path / "a.md").write_text(
        "# A\n## Here it is\n[ok](b.md#there) [self](#here-it-is)\n"
        "[gone](c.md) [no anchor](b.md#elsewhere) [x](#nowhere)\n"
    )
    (tmp_path / "b.md").write_text("## There\n")
    assert broken_links(tmp_path / "a.md") == [
        "c.md: no such file",
        "b.md#elsewhere: no heading #elsewhere in b.md",
        "#nowhere: no heading #nowhere in a.md",
    ]


def test_every_link_and_anchor_of_the_docs_resolves():
    bad = [f"{path.relative_to(ROOT)}: {b}" for path in doc_set() for b in broken_links(path)]
    assert not bad, f"broken links: {bad}"


def test_the_readme_links_every_doc():
    linked = {(README.parent / t.partition("#")[0]).resolve() for t in links(_read(README))}
    missing = [p.name for p in DOCS.glob("*.md") if p.name != "README.md" and p not in linked]
    assert not missing, f"docs the README does not link: {missing}"


def test_every_smallinit_command_the_docs_show_parses():
    """Each `smallinit ...` line of a bash block in the README or docs/*.md parses with the
    CLI's own parser: its group, command and options exist (the tests named in the docs run
    the lines whose output they state)."""
    import contextlib
    import io

    from smallinit.cli import build_parser, parse

    parser = build_parser()
    bad, count = [], 0
    for path in doc_set():
        for argv in shown_commands(_read(path), "smallinit"):
            count += 1
            said = io.StringIO()
            try:
                with contextlib.redirect_stdout(said), contextlib.redirect_stderr(said):
                    parse(parser, argv)
            except SystemExit as stop:  # --help exits 0; a refusal exits 2
                if stop.code != 0:
                    bad.append(
                        f"{path.relative_to(ROOT)}: smallinit {' '.join(argv)}: "
                        f"{said.getvalue().strip().splitlines()[-1]}"
                    )
    assert count >= 40 and not bad, f"commands the CLI does not accept: {bad}"


def test_every_make_target_the_docs_show_exists():
    targets = set(
        re.findall(r"^([A-Za-z][\w.-]*)\s*:(?!=)", _read(ROOT / "Makefile"), re.MULTILINE)
    )
    bad = [
        f"{path.relative_to(ROOT)}: make {argv[0]}"
        for path in doc_set()
        for argv in shown_commands(_read(path), "make")
        if argv
        and not argv[0].startswith("-")
        and argv[0].split("=")[0] not in targets
        and "=" not in argv[0]
    ]
    assert {"figs", "test", "bench"} <= targets and not bad, f"unknown make targets: {bad}"


def test_the_readme_shows_install_claims_python_and_where_to_go():
    """What the README holds, each in its section: the two commands, one claims table with a
    row per claim the study judges, the tested Python, and a figure under docs/img/."""
    from smallinit.study.claims import CLAIMS

    text = _read(README)
    heads = [h.strip() for h in ATX.findall(FENCE.sub("", text))]
    assert {"Install and run", "The claims at a glance", "From Python", "Where to go next"} <= set(
        heads
    )
    install = text[text.index("## Install and run") : text.index("## The claims at a glance")]
    assert "make figs" in install and "make test" in install
    claims = text[text.index("## The claims at a glance") : text.index("## From Python")]
    rows = re.findall(r"^\| \[`([\w-]+)`\]", claims, re.MULTILINE)
    ids = list(CLAIMS)
    assert sorted(rows) == sorted(set(rows)) and set(rows) == set(ids), set(rows) ^ set(ids)
    images = [t for t in links(text) if t.endswith(".png")]
    assert len(images) == 1 and images[0].startswith("docs/img/")


def _shown_as(shown: float, value: float, text: str) -> bool:
    """``value`` printed at the decimals ``shown`` has in ``text``."""
    decimals = len(text.split(".")[1])
    return abs(shown - value) <= 0.5 * 10**-decimals + 1e-12


def _decisive_cell(cid: str, cell: str, rec: dict) -> None:
    """A README cell under §13.2, ``0.098 (≥ 0.061), p 0.0013, **holds**``, is the record
    ``rec``: its verdict, its Holm-adjusted p (and, when contradicted, the Holm-adjusted p
    of the test against the claim, ``p 1; against it p 0.00016``) and its effect (the mean
    of the deciding series and its one-sided bound at Holm's level where one series decides,
    else the headline effect), each at the decimals printed."""
    import statistics

    if rec["effect"] is None:
        assert cell == "not run", (cid, cell)
        return
    effect, p_text, verdict = (c.strip() for c in cell.lstrip("ᴰᴿ").rsplit(",", 2))
    assert verdict.replace("*", "") == rec["verdict"], (cid, cell)
    p_text, _, against = p_text.partition("; against it p ")
    assert float(p_text.removeprefix("p ")) == float(f"{rec['p_holm']:.2g}"), (cid, p_text)
    if rec["verdict"] == "contradicted":  # the test that decides it: the opposite's
        assert float(against) == float(f"{rec['p_opposite_holm']:.2g}"), (cid, cell)
    else:
        assert not against, (cid, cell)
    conditions = rec["conditions"]["conditions"]
    if len(conditions) == 1:
        mean = statistics.fmean(rec["values"][conditions[0]["series"]].values())
        values = [mean, rec["bound_holm"]]
    else:
        values = [rec["effect"]]
    strings = re.findall(r"[−-]?\d+\.\d+", effect)
    assert len(strings) == len(values), (cid, effect)
    for s, v in zip(strings, values, strict=True):
        assert _shown_as(float(s.replace("−", "-")), v, s), (cid, s, v)


def test_the_readme_claims_table_is_the_committed_records():
    """The medium and best-CPU columns are the committed §13.2 records
    (bench-results/claims/medium.json; fair.json, decisive.json for the cells marked ᴰ and
    fair-reasoning.json for those marked ᴿ), each cell as :func:`_decisive_cell` reads it:
    nothing typed by hand, nothing rounded differently. The best-CPU cell comes from
    decisive exactly when decisive measures the claim (its 20 seeds and tuning seeds), else
    from fair where fair judges it, else from fair-reasoning. No H200 record is committed,
    so that column says `not run` in every row."""
    import json

    claims_dir = ROOT / "bench-results" / "claims"

    def records(name: str) -> dict[str, dict]:
        return {r["id"]: r for r in json.loads(_read(claims_dir / f"{name}.json"))}

    medium, fair, probe = records("medium"), records("fair"), records("fair-reasoning")
    decisive = records("decisive")
    assert not (claims_dir / "h200.json").exists()  # else the H200 column must show it
    text = _read(README)
    table = text[text.index("## The claims at a glance") : text.index("## From Python")]
    checked = 0
    for line in re.findall(r"^\| \[`[\w-]+`\].*$", table, re.MULTILINE):
        cells = [c.strip() for c in line.strip("|").split("|")]
        cid = re.match(r"\[`([\w-]+)`\]", cells[0]).group(1)
        from_decisive = decisive[cid]["effect"] is not None
        from_probe = not from_decisive and fair[cid]["verdict"] == "not run"
        from_probe = from_probe and probe[cid]["verdict"] != "not run"
        assert cells[3].startswith("ᴰ") == from_decisive, (cid, cells[3])
        assert cells[3].startswith("ᴿ") == from_probe, (cid, cells[3])
        best = decisive if from_decisive else probe if from_probe else fair
        _decisive_cell(cid, cells[2], medium[cid])
        _decisive_cell(cid, cells[3], best[cid])
        assert cells[4] == "not run", (cid, cells[4])
        checked += 1
    assert checked == 13


@pytest.mark.slow  # the quick toy scan behind figure 1 (JAX): 161 s here on 2 shared cores
def test_the_readme_figure_is_figure_1_as_the_quick_profile_draws_it(tmp_path):
    """The README's one image is paper_figs/fig01_phase_diagram.py's PNG at the quick
    profile, byte for byte (figures have stable bytes): made by the code, not by hand."""
    from smallinit.core.store import RunStore
    from smallinit.study.figs import make_figures

    (image,) = [t for t in links(_read(README)) if t.endswith(".png")]
    drawn = make_figures(
        only=[1], profile="quick", out_dir=tmp_path / "out", store=RunStore(tmp_path / "runs")
    )
    png = next(p for p in drawn[1] if p.suffix == ".png")
    assert png.name == "fig01_phase_diagram.png"
    assert png.read_bytes() == (ROOT / image).read_bytes()


def test_usage_lists_every_environment_variable_the_code_reads():
    """docs/usage.md's table names each SMALLINIT_* variable of the tracked Python files
    once, and no other."""
    pattern = "SMALLINIT" + r"_[A-Z_]+"
    in_code = {
        name
        for path in _tracked_files()
        if path.suffix == ".py"
        for name in re.findall(pattern, _read(path))
    }
    text = _read(DOCS / "usage.md")
    table = text[text.index("## Environment variables") :]
    rows = re.findall(rf"^\| `({pattern})` \|", table, re.MULTILINE)
    assert len(rows) == len(set(rows)), "a variable is listed twice"
    assert set(rows) == in_code, (sorted(in_code - set(rows)), sorted(set(rows) - in_code))
