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

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
SCIENCE = DOCS / "science.md"
DOC_NAME = "docs/science" + ".md"
SPEC_PATH = "../shared/" + "SPEC"
SCANNED_SUFFIXES = (".py", ".md", ".toml")
# Skipped when walking a tree without git (an unpacked sdist, a copy): not sources.
NOT_SOURCES = {".git", ".venv", "build", "dist", "runs", "__pycache__", "bench-results",
               ".pytest_cache", ".ruff_cache", ".hypothesis", ".benchmarks", "out"}

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
        names = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                               check=True).stdout.decode().split("\0")
        files = [ROOT / n for n in names if n]
    except (OSError, subprocess.CalledProcessError):
        files = [p for p in ROOT.rglob("*") if p.is_file()
                 and not any(part in NOT_SOURCES or part.endswith(".egg-info")
                             for part in p.relative_to(ROOT).parts)]
    return [f for f in files if f.is_file()]


def _read(path: Path) -> str:
    return path.read_bytes().decode("utf-8", errors="replace")


# ----------------------------------------------------------------------------- the parser
def test_reference_parser_reads_lists_ranges_and_subsections():
    text = (f"see {DOC_NAME} §2–§4, §7.3 and §9; also ({DOC_NAME} §1) and "
            f"{DOC_NAME} §7.1-§7.3, but not §12 after a full stop. SPEC §11")
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
    bad = [str(p.relative_to(ROOT)) for p in _tracked_files()
           if DOCS not in p.parents and SPEC_PATH.encode() in p.read_bytes()]
    assert not bad, (f"{bad} still point at {SPEC_PATH}.md, which a clone does not have; "
                     f"cite {DOC_NAME} instead")
