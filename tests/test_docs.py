"""The README and docs/: links resolve, every page is reachable, files named exist."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]

# [text](target) outside code; images too. Targets with a scheme are external.
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
CODE_SPAN = re.compile(r"`[^`\n]*`")
# a repository path in backticks: a known top-level folder, then a file name
REPO_PATH = re.compile(
    r"`((?:docs|reports|scripts|benchmarks|instances|tests|nest_cp|dp|verify)/[\w./-]+"
    r"\.(?:py|md|json|csv|tex|png|toml))`")
# a script named anywhere, e.g. inside `.venv/bin/python scripts/reports/sdp.py --render`
SCRIPT = re.compile(r"\b(?:scripts|benchmarks)/[\w/]+\.py\b")


def _prose(page: Path) -> str:
    """The page without fenced code blocks and code spans, where a link is only text."""
    return CODE_SPAN.sub("", FENCE.sub("", page.read_text(encoding="utf-8")))


def _links(page: Path) -> list[str]:
    return [target for target in LINK.findall(_prose(page))
            if not re.match(r"[a-z]+:", target)]


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    return {_slug(line.lstrip("#")) for line in text.splitlines() if line.startswith("#")}


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_relative_link_resolves(page: Path):
    """Every relative markdown link names an existing file, and its #anchor a heading."""
    broken = []
    for target in _links(page):
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists():
            broken.append(target)
        elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
            broken.append(target)
    assert not broken, f"{page.relative_to(ROOT)}: broken links {broken}"


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_repository_paths_named_in_backticks_exist(page: Path):
    """A file path such as `scripts/reports/sdp.py` in the prose names a file that exists."""
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    named = set(REPO_PATH.findall(text)) | set(SCRIPT.findall(text))
    missing = sorted(path for path in named if not (ROOT / path).exists())
    assert not missing, f"{page.relative_to(ROOT)}: no such files {missing}"


def test_every_docs_page_is_reachable_from_the_readme():
    """Following relative links from README.md reaches every page of docs/."""
    seen, todo = set(), [README.resolve()]
    while todo:
        page = todo.pop()
        if page in seen or page.suffix != ".md" or not page.exists():
            continue
        seen.add(page)
        todo += [(page.parent / target.partition("#")[0]).resolve()
                 for target in _links(page) if target.partition("#")[0]]
    unreachable = [page.name for page in PAGES if page.resolve() not in seen]
    assert not unreachable, f"not linked from the README: {unreachable}"


def test_readme_is_short_and_opens_with_the_two_commands():
    """The README fits in 300 lines and starts with `make verify` and `make test`."""
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 300, f"README has {len(lines)} lines"
    opening = lines[2:6]
    assert opening[0] == "```sh"
    assert opening[1].startswith("make verify") and opening[2].startswith("make test")


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_user_docs_cite_no_internal_design_document(page: Path):
    """User documentation cites docs/cost-model.md, never the internal DESIGN document."""
    assert "DESIGN" not in page.read_text(encoding="utf-8")
