"""The docs' references hold: every relative link in README.md, docs/*.md and docs/results/**/*.md
leads to a file (and to a heading, where it names one), every path into docs/results that the docs
name in code exists, and docs/results/README.md indexes every data set there, each with its
function in run.sh. Reads files only: no training, no network."""

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "results"
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *RESULTS.rglob("*.md")])

LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
CODE = re.compile(r"(`+)(.+?)\1", re.S)


def _prose(text: str) -> str:
    """The text without fenced blocks and code spans, where a link is no link."""
    return CODE.sub("", FENCE.sub("", text))


def _slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces to hyphens."""
    text = CODE.sub(lambda m: m.group(2), heading.strip().lower())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link in a heading keeps its text
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    """The headings' anchors of a markdown file, and the ids of its HTML anchors (<a id="...">)."""
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    seen: dict[str, int] = {}
    out = set(re.findall(r"<a\s+(?:id|name)=\"([^\"]+)\"", text))
    for line in text.splitlines():
        if m := re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line):
            slug = _slug(m.group(1))
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def _dead_links(doc: Path) -> list[str]:
    dead = []
    for target in LINK.findall(_prose(doc.read_text(encoding="utf-8"))):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...
            continue
        path, _, anchor = target.partition("#")
        dest = (doc.parent / path).resolve() if path else doc
        if not dest.exists():
            dead.append(f"{target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            dead.append(f"{target} (no such heading in {dest.name})")
    return dead


def test_every_relative_link_in_the_docs_leads_somewhere():
    dead = {str(d.relative_to(ROOT)): bad for d in DOCS if (bad := _dead_links(d))}
    assert dead == {}


def test_the_link_check_finds_a_dead_file_and_a_dead_heading(tmp_path):
    (tmp_path / "there.md").write_text('# A heading, with `code`\n\n## Twice\n\n## Twice\n\n- <a id="item"></a>an item\n')
    doc = tmp_path / "doc.md"
    doc.write_text("[ok](there.md#a-heading-with-code) [ok](there.md#twice-1) [ok](there.md#item) [ok](#own) "
                   "`[not a link](gone.md)` [web](https://example.com/x)\n\n# Own\n\n"
                   "[file](gone.md) [heading](there.md#gone)\n```\n[fenced](gone2.md)\n```\n")
    assert _dead_links(doc) == ["gone.md (no such file)", "there.md#gone (no such heading in there.md)"]


def _missing_results_paths(doc: Path) -> list[str]:
    """The paths into docs/results that ``doc`` names in code (`results/NAME/...`,
    `docs/results/...`) and that are not there (a pattern with * or … is no path)."""
    missing = []
    for _, span in CODE.findall(FENCE.sub("", doc.read_text(encoding="utf-8"))):
        for word in span.split():
            m = re.match(r"(?:docs/)?results/([^\s`'\"),;]+)", word)
            if m and not re.search(r"[*…{}]", word) and not (RESULTS / m.group(1)).exists():
                missing.append(word)
    return missing


def test_every_path_into_docs_results_the_docs_name_exists():
    """The folders that left the tree are named without the prefix, as history."""
    missing = {str(d.relative_to(ROOT)): bad for d in DOCS if (bad := _missing_results_paths(d))}
    assert missing == {}


def test_the_path_check_finds_a_path_that_is_not_there(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text("`bash docs/results/run.sh OUT gpu_tests` `results/gone.sh` `results/*/x.gz` results/prose.sh\n")
    assert _missing_results_paths(doc) == ["results/gone.sh"]


def _tracked(path: Path) -> bool:
    """Whether git tracks something at ``path`` (a file being written there counts once added);
    without git, everything there counts."""
    try:
        out = subprocess.run(["git", "ls-files", "--", str(path)], cwd=ROOT, capture_output=True, text=True,
                             timeout=30)
    except (OSError, subprocess.SubprocessError):
        return True
    return out.returncode != 0 or bool(out.stdout.strip())


def test_the_results_index_names_every_data_set_and_its_function_in_run_sh():
    index = (RESULTS / "README.md").read_text(encoding="utf-8")
    rows = [line for line in index.splitlines() if line.startswith("| [")]
    linked = {re.match(r"\| \[([^\]]+)\]", row).group(1).rstrip("/") for row in rows}
    present = {p.name for p in RESULTS.iterdir() if _tracked(p)} - {"README.md", "run.sh"}
    assert present - linked == set(), "a data set in docs/results/ without its line in docs/results/README.md"
    functions = set(re.findall(r"^([\w.-]+)\(\) \{", (RESULTS / "run.sh").read_text(encoding="utf-8"), re.M))
    named = {name for row in rows for name in re.findall(r"`([\w.-]+)`", row.rsplit("|", 2)[-2])}
    assert named - functions == set(), "the index names a run.sh data set that run.sh does not have"
