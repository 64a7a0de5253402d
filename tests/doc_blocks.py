"""The fenced code blocks of README.md, serving/README.md and docs/*.md, and how each one is tested.

A ```python or ```bash block runs in tests/test_docs.py, page after page in `PAGE_ORDER`, unless
the HTML comment on the line before it says otherwise:

    <!-- not run: REASON -->                   it cannot run here (data or machines that exist only
                                               elsewhere), and the page shows why
    <!-- run by: tests/FILE.py::TEST_NAME -->  that test runs it on its own data and checks its result
    <!-- same as: PATH -->                      the block is the file PATH (e.g. docs/examples/*.py),
                                               which a test under tests/ runs
"""

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The walk's order: a page may use the files that the commands of the pages before it made.
PAGE_ORDER = (
    "README.md",
    "docs/checkpoints.md",
    "docs/vocabulary.md",
    "docs/pretraining.md",
    "docs/finetuning.md",
    "docs/distillation.md",
    "docs/embeddings.md",
    "docs/serving.md",
    "docs/deploy.md",
    "docs/library.md",
    "docs/benchmarks.md",
)
CODE_LANGUAGES = ("python", "bash")
# Tags that would hide code from the tests: write python or bash instead.
CODE_ALIASES = ("py", "python3", "pycon", "sh", "shell", "console", "zsh", "ipython")
FENCE = re.compile(r"^(\s*)```(\S*)\s*$")
MARKER = re.compile(r"^\s*<!--\s*(not run|run by|same as):\s*(.*?)\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    page: str  # relative to the repository root
    line: int  # the opening fence's line, from 1
    language: str
    text: str
    marker: str | None  # "not run", "run by", "same as" or None (run by the walk)
    detail: str  # the reason, the test or the file

    def __str__(self):
        return f"{self.page}:{self.line} ({self.language or 'untagged'})"

    def commands(self):
        """The command lines of a bash block (continuations joined; comments and blank lines dropped)."""
        lines = (line.split("  #")[0].strip() for line in self.text.replace("\\\n", " ").splitlines())
        return [line for line in lines if line and not line.startswith("#")]


def pages():
    """README.md, serving/README.md and every docs/*.md, in walk order (pages not in PAGE_ORDER last)."""
    found = [ROOT / "README.md", ROOT / "serving" / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    rank = {name: i for i, name in enumerate(PAGE_ORDER)}
    names = [str(path.relative_to(ROOT)) for path in found]
    return sorted(names, key=lambda name: (rank.get(name, len(rank)), name))


def page_blocks(page):
    lines = (ROOT / page).read_text(encoding="utf-8").splitlines()
    found, index = [], 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        indent, language = opening.groups()
        end = next((i for i in range(index + 1, len(lines)) if lines[i].strip() == "```"), None)
        assert end is not None, f"{page}:{index + 1}: a fence that is never closed"
        body = [line[len(indent) :] if line.startswith(indent) else line.lstrip() for line in lines[index + 1 : end]]
        before = next((lines[i] for i in range(index - 1, -1, -1) if lines[i].strip()), "")
        marker = MARKER.match(before)
        found.append(
            Block(
                page=page,
                line=index + 1,
                language=language,
                text="\n".join(body) + "\n",
                marker=marker.group(1) if marker else None,
                detail=marker.group(2) if marker else "",
            )
        )
        index = end + 1
    return found


def all_blocks():
    return [block for page in pages() for block in page_blocks(page)]


def code_blocks():
    return [block for block in all_blocks() if block.language in CODE_LANGUAGES]


def block_run_by(test):
    """The one block whose marker names `test` (`tests/FILE.py::TEST_NAME`)."""
    (block,) = [b for b in code_blocks() if b.marker == "run by" and b.detail == test]
    return block
