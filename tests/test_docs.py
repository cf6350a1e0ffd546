"""The documentation stays true to the code and to itself: the generated config reference matches the
schema, the README stays short and self-contained, and every relative link leads somewhere."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from learner.config_docs import REGENERATE, markdown

ROOT = Path(__file__).resolve().parents[1]
README_GUIDE_LINES = 250  # a user reads it in five minutes; past it, say so in review (issue 61)
README_MAX_LINES = 320  # the ceiling: past it, detail moves to docs/
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.M | re.S)


def links(path: Path) -> list[str]:
    """The targets of the markdown links and images in `path`, code blocks and code spans left out."""
    text = FENCE.sub("", path.read_text())
    text = re.sub(r"`[^`\n]*`", "", text)
    return LINK.findall(text)


def anchors(path: Path) -> set[str]:
    """GitHub's anchors for the headings of a markdown file."""
    heads = re.findall(r"^#+ (.+)$", FENCE.sub("", path.read_text()), re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in heads}


def test_configuration_doc_is_the_schema():
    written = (ROOT / "docs" / "configuration.md").read_text()
    assert written == markdown(), f"docs/configuration.md disagrees with learner/config.py: run `{REGENERATE}`"


def test_readme_is_short():
    lines = (ROOT / "README.md").read_text().count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; move detail to docs/ (at most {README_MAX_LINES})"


def test_readme_names_nothing_outside_the_repository():
    text = (ROOT / "README.md").read_text()
    assert "../" not in text, [line for line in text.splitlines() if "../" in line]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(doc):
    broken = []
    for target in links(doc):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file_part, _, fragment = target.partition("#")
        dest = (doc.parent / file_part).resolve() if file_part else doc
        if not dest.exists() or ROOT not in dest.parents:
            broken.append(f"{target}: no such file in the repository")
        elif fragment and dest.suffix == ".md" and fragment not in anchors(dest):
            broken.append(f"{target}: no heading #{fragment} in {dest.name}")
    assert not broken, f"{doc.relative_to(ROOT)}: {broken}"


def test_the_readmes_tour_names_only_what_is_there():
    """Every file and folder the README's tour names exists (a module renamed or removed takes its line along)."""
    text = (ROOT / "README.md").read_text()
    tour = text[text.index("## A tour"):]
    block = FENCE.search(tour).group(0)
    names = set(re.findall(r"\b([a-z_]+(?:\.py|/))", block))
    assert {"launch.py", "learner/", "main.py"} <= names, names
    present = {p.name for p in ROOT.rglob("*") if not {".git", ".venv", "results"} & set(p.parts)}
    missing = sorted(n for n in names if n.rstrip("/") not in present)
    assert not missing, f"the README's tour names what is not in the repository: {missing}"
