"""Every relative link of the repository's Markdown pages reaches a file of the checkout
and, into a Markdown page, one of that page's headings as GitHub anchors it: a reader
following "Records (commit, date, machine, command)" or a method section lands on it.
Headings are parsed and anchored by markdown-it-py and mdit-py-plugins' anchors plugin,
whose slugs follow GitHub's rule (lower case, punctuation dropped but `_` and `-` kept,
spaces to `-`, repeats numbered)."""

import functools
import glob
import os
from urllib.parse import unquote, urlsplit

import pytest
from markdown_it import MarkdownIt
from mdit_py_plugins.anchors import anchors_plugin

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MARKDOWN = MarkdownIt("commonmark").enable("table").use(anchors_plugin, max_level=6)
TARGET = {"link_open": "href", "image": "src"}  # the attribute naming a token's target


#: Where the repository keeps Markdown pages (no git here: Bazel's sandbox has none).
PAGES = ("*.md", "docs/**/*.md", "carried/*.md", "lab/*.md", "viable_tf/pretrained/**/*.md")


def pages() -> list[str]:
    """The repository's Markdown pages, relative to its root."""
    found = {
        os.path.relpath(path, REPO)
        for pattern in PAGES
        for path in glob.glob(os.path.join(REPO, pattern), recursive=True)
    }
    return sorted(found)


@functools.cache
def tokens(root: str, page: str) -> list:
    with open(os.path.join(root, page), encoding="utf-8") as f:
        flat = []
        for token in MARKDOWN.parse(f.read()):
            flat.append(token)
            flat.extend(token.children or ())
        return flat


def anchors(page: str, root: str = REPO) -> set[str]:
    return {t.attrGet("id") for t in tokens(root, page) if t.type == "heading_open"}


def targets(page: str, root: str = REPO) -> list[str]:
    """The links' and images' targets in `page` that name no scheme (http:, mailto:)."""
    found = [t.attrGet(TARGET[t.type]) for t in tokens(root, page) if t.type in TARGET]
    return [target for target in found if target and not urlsplit(target).scheme]


def broken(page: str, root: str = REPO) -> list[str]:
    wrong = []
    for target in targets(page, root):
        path, _, anchor = target.partition("#")
        resolved = os.path.normpath(os.path.join(os.path.dirname(page), unquote(path)))
        if path and not os.path.exists(os.path.join(root, resolved)):
            wrong.append(f"{target} (no file {resolved})")
            continue
        into = resolved if path else page
        if anchor and into.endswith(".md") and unquote(anchor) not in anchors(into, root):
            wrong.append(f"{target} (no heading anchored #{anchor})")
    return wrong


def test_every_page_is_found():
    assert {"README.md", "CHANGELOG.md", "docs/records.md", "carried/README.md"} <= set(pages())
    assert any(page.startswith("docs/lab/omniglot/") for page in pages())


def test_the_anchors_are_githubs():
    assert {"omniglot_images", "sine_paired"} <= anchors("docs/records.md")
    assert "11-metal-a-task-adaptive-learned-loss" in anchors("docs/method.md")


def test_a_broken_link_or_anchor_is_found(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A page\n\n## Its part_one\n")
    (tmp_path / "docs" / "b.md").write_text(
        "[ok](a.md#its-part_one) [no anchor](a.md#its-part-one) [no file](c.md) "
        "[self](#b) ![img](img.png) [web](https://example.org/x.md#y)\n\n# B\n"
    )
    assert broken("docs/b.md", str(tmp_path)) == [
        "a.md#its-part-one (no heading anchored #its-part-one)",
        "c.md (no file docs/c.md)",
        "img.png (no file docs/img.png)",
    ]


@pytest.mark.parametrize("page", pages())
def test_every_relative_link_reaches_its_file_and_heading(page):
    assert broken(page) == []
