"""Every relative link in README.md and docs/ resolves: the file (or folder) exists, and an anchor
names a heading of the target page as GitHub renders it. External links (http, https, mailto) are
not fetched. Links inside code blocks and inline code are not links and are left alone. And no
documented Hydra override starts its value with ``~`` (it would not run)."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

_FENCE = re.compile(r"^ {0,3}(```|~~~)")
_INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")
#: [text](target) and ![alt](target); the target ends at the first space or closing parenthesis.
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)")
_HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_HTML_ANCHOR = re.compile(r"<a\s+[^>]*(?:name|id)\s*=\s*[\"']([^\"']+)[\"']", re.IGNORECASE)


def _prose_lines(text: str) -> list[tuple[int, str, str]]:
    """(line number, line, line with inline code blanked out) outside fenced code blocks."""
    out, fence = [], None
    for number, line in enumerate(text.splitlines(), start=1):
        opened = _FENCE.match(line)
        if fence is not None:
            if opened and opened[1] == fence:
                fence = None
            continue
        if opened:
            fence = opened[1]
            continue
        out.append((number, line, _INLINE_CODE.sub(lambda m: " " * len(m[0]), line)))
    return out


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: markup and punctuation dropped (``-`` and ``_`` kept),
    lower case, spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text stays
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").lower()
    kept = "".join(
        c for c in text if c in "-_ " or unicodedata.category(c)[0] in "LN" or unicodedata.category(c) == "Mn"
    )
    return kept.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every anchor of ``page``: its headings' (duplicates numbered -1, -2, ... as on GitHub) and
    explicit ``<a name=...>`` / ``<a id=...>``."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    for _, line, _prose in _prose_lines(page.read_text(encoding="utf-8")):
        heading = _HEADING.match(line)
        if heading:
            slug = github_anchor(heading[2])
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            found.add(slug if count == 0 else f"{slug}-{count}")
        found.update(_HTML_ANCHOR.findall(line))
    return found


def links(page: Path) -> list[tuple[int, str]]:
    """(line number, target) of every link of ``page``: inline, and reference definitions (which
    start a paragraph: ``[6, 2]: ...`` inside one is text)."""
    out = []
    previous = ""
    for number, _line, prose in _prose_lines(page.read_text(encoding="utf-8")):
        out += [(number, target) for target in _LINK.findall(prose)]
        reference = _REFERENCE.match(prose)
        if reference and not previous.strip():
            out.append((number, reference[1]))
        previous = prose
    return out


def broken_links(page: Path, root: Path = ROOT) -> list[str]:
    """``page:line: target (why)`` for each relative link of ``page`` (under ``root``) not resolving."""
    problems = []
    for number, target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):  # http:, https:, mailto:, ...
            continue
        path_part, _, anchor = target.partition("#")
        resolved = (page.parent / unquote(path_part)).resolve() if path_part else page
        where = f"{page.relative_to(root)}:{number}: {target}"
        if not resolved.exists():
            problems.append(f"{where} (no such file)")
        elif not resolved.is_relative_to(root):
            problems.append(f"{where} (outside the repository)")
        elif anchor and resolved.suffix == ".md" and unquote(anchor) not in anchors(resolved):
            problems.append(f"{where} (no heading with that anchor)")
    return problems


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_relative_link_resolves_to_a_file_and_heading(page: Path) -> None:
    assert broken_links(page) == []


def test_anchors_follow_githubs_rule() -> None:
    assert github_anchor("Quick start (CPU)") == "quick-start-cpu"
    assert github_anchor("Group weight (`coba.group_weight`)") == "group-weight-cobagroup_weight"
    assert github_anchor("Result on `hard`, and the rule") == "result-on-hard-and-the-rule"
    assert (
        github_anchor("veRL's real pipeline on CPU: the tiny recipe")
        == "verls-real-pipeline-on-cpu-the-tiny-recipe"
    )
    assert github_anchor("Use with [veRL](https://x)") == "use-with-verl"


def test_the_checker_finds_a_missing_file_and_a_missing_anchor(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Title\n\n## Same\n\n## Same\n", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](other.md#same-1) [ok](#here) [ok](https://example.com/#nothing)\n"
        "## Here\n`[not a link](nowhere.md)`\n```\n[not a link](nowhere.md)\n```\n"
        "[gone](missing.md) [bad](other.md#nowhere)\ntext\n[6, 2]: not a reference\n",
        encoding="utf-8",
    )
    assert [p.split(" (")[1] for p in broken_links(page, tmp_path)] == [
        "no such file)",
        "no heading with that anchor)",
    ]


#: ``key=~/...``: Hydra's override lexer refuses ``~``, and the shell expands it only after ``NAME=``
#: of an environment variable (upper case), not after ``a.b=``.
_TILDE_OVERRIDE = re.compile(r"(?<![\w.-])([a-z_][\w]*(?:\.[\w]+)*)=~")


def test_no_documented_override_starts_its_value_with_a_tilde() -> None:
    sources = [*PAGES, *sorted((ROOT / "recipes").glob("*/run.sh")), ROOT / "scripts" / "quickstart.sh"]
    found = [
        f"{path.relative_to(ROOT)}:{number}: {match[0]}=~"
        for path in sources
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        for match in _TILDE_OVERRIDE.finditer(line)
    ]
    assert found == [], "use $HOME: " + "; ".join(found)
