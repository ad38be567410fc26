"""The README is a guide: short, linking nothing outside the repository, and every file it or a
docs/ page names exists (a renamed experiment, bench or doc would leave a dead pointer)."""
import glob
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
PAGES = ["README.md", *sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "*.md")))]
# A path into the repository: a top-level folder of it, then a file with an extension.
PATH = re.compile(r"(?<![\w./-])((?:bench|docs|emulator|examples|experiment|experiments|controller|dtnet|badinput|"
                  r"flowsim|scripts|tests|topologies|traffic)/[\w./-]*\.(?:py|md|yaml|sh))\b")


def _text(page):
    with open(os.path.join(ROOT, page)) as f:
        return f.read()


def test_the_readme_is_short():
    assert _text("README.md").count("\n") < 500


@pytest.mark.parametrize("page", PAGES)
def test_a_page_links_nothing_outside_the_repository(page):
    text = _text(page)
    assert [t for t in re.findall(r"\]\(([^)]*)\)", text) if t.startswith(("http", "/", ".."))] == []
    assert not re.search(r"(?<!\.)\.\./", text) and "http://" not in text and "https://" not in text


@pytest.mark.parametrize("page", PAGES)
def test_every_file_a_page_names_exists(page):
    missing = sorted({p for p in PATH.findall(_text(page)) if "<" not in p and "*" not in p
                      and not os.path.exists(os.path.join(ROOT, p))})
    assert missing == []
