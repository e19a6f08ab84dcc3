"""The documentation stays true to the repository.

- docs/options.md is what ``python -m fairseq_plugins --markdown`` writes now
  (the configs change; the file is regenerated, never edited);
- every relative link in README.md and docs/ points to a file that exists, and
  every ``#anchor`` to a heading of the target (GitHub's slug rules);
- README.md stays a landing page (at most 250 lines);
- no page names a path outside the repository.
"""

import os
import re
import subprocess
import sys
import unicodedata

import pytest

from helpers import ROOT

REGENERATE = "python -m fairseq_plugins --markdown docs/options.md"


def _pages():
    pages = [os.path.join(ROOT, "README.md")]
    for folder, _, files in os.walk(os.path.join(ROOT, "docs")):
        pages += [os.path.join(folder, f) for f in sorted(files) if f.endswith(".md")]
    return sorted(pages)


def _rel(path):
    return os.path.relpath(path, ROOT)


def _without_code(text):
    """Markdown text with fenced code blocks and inline code spans blanked
    (links inside them are not links)."""
    out, fenced = [], False
    for line in text.split("\n"):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            out.append("")
        elif fenced:
            out.append("")
        else:
            out.append(re.sub(r"`[^`]*`", "", line))
    return "\n".join(out)


def github_slug(heading):
    """The anchor GitHub gives a heading: lower case, punctuation removed
    (letters, marks, digits, connector punctuation, spaces and hyphens kept),
    spaces turned into hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # [text](url) -> text
    text = text.replace("`", "").strip().lower()
    kept = "".join(c for c in text if c in " -" or unicodedata.category(c)[0] in "LMN"
                   or unicodedata.category(c) == "Pc")
    return kept.replace(" ", "-")


def anchors(path):
    """Anchors of the headings of a Markdown file, with GitHub's -1, -2, ...
    suffixes for repeated headings."""
    seen, result = {}, set()
    fenced = False
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.lstrip().startswith("```"):
                fenced = not fenced
            m = None if fenced else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
            if m:
                slug = github_slug(m.group(1))
                n = seen.get(slug, 0)
                seen[slug] = n + 1
                result.add(slug if n == 0 else f"{slug}-{n}")
    return result


LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def links(path):
    with open(path, encoding="utf-8") as f:
        text = _without_code(f.read())
    return LINK.findall(text)


@pytest.mark.full
def test_options_reference_is_current(tmp_path):
    fresh = tmp_path / "options.md"
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-m", "fairseq_plugins", "--markdown", str(fresh)],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    with open(os.path.join(ROOT, "docs", "options.md"), encoding="utf-8") as f:
        committed = f.read()
    if fresh.read_text(encoding="utf-8") != committed:
        pytest.fail(f"docs/options.md is stale: run `{REGENERATE}` and commit it", pytrace=False)


def test_option_reference_has_every_component():
    from fairseq_plugins.__main__ import components
    names = anchors(os.path.join(ROOT, "docs", "options.md"))
    for title, _ in components():
        assert github_slug(title.partition(" (")[0]) in names, title


@pytest.mark.parametrize("page", _pages(), ids=_rel)
def test_relative_links_resolve(page):
    broken = []
    for target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
        if not os.path.exists(file):
            broken.append(f"{target} (no file {_rel(file)})")
        elif anchor and file.endswith(".md") and anchor not in anchors(file):
            broken.append(f"{target} (no heading #{anchor} in {_rel(file)})")
    assert not broken, f"{_rel(page)}: broken links: " + "; ".join(broken)


def test_readme_is_a_landing_page():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        n = len(f.read().splitlines())
    assert n <= 250, f"README.md has {n} lines (at most 250): move detail into docs/"


@pytest.mark.parametrize("page", _pages(), ids=_rel)
def test_no_paths_outside_the_repository(page):
    with open(page, encoding="utf-8") as f:
        text = f.read()
    # the machine-local prefixes the design notes used to live under (spelled in
    # pieces so that this file does not contain them itself)
    outside = sorted(set(re.findall("/" + "work/" + r"\S*|\.\./" + r"shared\S*", text)))
    assert not outside, f"{_rel(page)} names paths outside the repository: {outside}"


def test_github_slug():
    assert github_slug("Faults and resuming") == "faults-and-resuming"
    assert github_slug("model infinite_former_lm") == "model-infinite_former_lm"
    assert github_slug("§3 Unbounded memory") == "3-unbounded-memory"
    assert github_slug("How the ∞-former is built") == "how-the--former-is-built"
    assert github_slug("`--arch` names") == "--arch-names"


def test_readme_quick_start_table_marks_the_rows_the_default_run_does_not_print():
    """The rows of the README's result table without ``--arms`` are exactly the arms the default
    quick start trains and prints (the arms registry), in its order."""
    from fairseq_plugins.lab.common import arms

    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    table = text.split("| arm | test ppl (fairseq-eval-lm)", 1)[1].split("\n\n", 1)[0]
    rows = [line.split("|")[1].strip() for line in table.splitlines()[2:] if line.startswith("|")]
    assert rows, table
    assert [row for row in rows if "--arms" not in row] == arms.names("lm", default_only=True), rows


def test_summarization_decoding_lengths_are_documented_as_the_script_derives_them():
    """generate-summaries.sh derives MIN_LEN/MAX_LEN_B from the training targets
    (fairseq-longmem summarize decoding-lengths); the fixed 80 / 300 are only its fallback without stats.json."""
    text = open(os.path.join(ROOT, "docs", "summarization.md"), encoding="utf-8").read()
    section = text.split("### Decoding", 1)[1].split("\n#", 1)[0]
    assert "`fairseq-longmem summarize decoding-lengths`" in section
    paragraph = section.split("\n\n")[1] if section.startswith("\n\n") else section.split("\n\n")[0]
    fixed = paragraph.index("MIN_LEN=80")
    assert "stats.json" in paragraph[:fixed] and "fall back" in paragraph[:fixed], paragraph


def test_aclsum_table_states_the_decoding_its_command_uses():
    """The ACLSum table's rows were decoded with min 80 / max 300 pieces, which the comparison
    script does not derive from ACLSum (85 / 297): its command must set them; and plain
    fairseq-generate with --user-dir needs no TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD (the plugin
    allow-lists fairseq's own checkpoints)."""
    text = open(os.path.join(ROOT, "docs", "results", "aclsum.md"), encoding="utf-8").read()
    section = text.split("## The result", 1)[1].split("\n## ", 1)[0]
    assert "min 80 / max 300" in section and "85 / 297" in section
    command = "MIN_LEN=80 MAX_LEN_B=300 bash scripts/summarization-comparison.sh --rouge-tokenizer rouge-score"
    assert " ".join(section.split()).count(command) >= 2  # the table's caption and its exact commands
    summarization = open(os.path.join(ROOT, "docs", "summarization.md"), encoding="utf-8").read()
    assert "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD" not in summarization
