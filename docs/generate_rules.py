"""Write the rules' documentation from the rules themselves: the table in README.md and docs/rules.md.

Each rule declares its code and name (its module's name), summary, kind of fix and what the fix
keeps, its documentation's sections (its docstring) and a before/after example, which `gradfix rules`
and `gradfix explain` print; this script lays the same text out as Markdown, so the pages cannot
drift from the rules. tests/test_docs.py fails when a page is not what this script writes.

Usage: python docs/generate_rules.py
"""

from __future__ import annotations

import sys
from pathlib import Path

from gradfix.codemods.analysis.closed_world import OBLIGATIONS, constructs_against
from gradfix.codemods.registry import all_rules, rule_anchor
from gradfix.codemods.rule import FIX_SAFETY, Rule

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
RULES_PAGE = ROOT / "docs" / "rules.md"
TABLE_START = "<!-- rules table: written by docs/generate_rules.py from the rules -->\n"
TABLE_END = "<!-- end of the rules table -->\n"


def fix_kind(rule: type[Rule]) -> str:
    return rule.FIX.value if rule.FIX else "report"


def anchor(rule: type[Rule]) -> str:
    return rule_anchor(rule.CODE)


def readme_table() -> str:
    rows = [f"| {rule.CODE} | [`{rule.NAME}`](docs/rules.md#{anchor(rule)}) | {fix_kind(rule)} | {rule.SUMMARY} |" for rule in all_rules()]
    return "| code | name | fix | the bug |\n|------|------|-----|---------|\n" + "\n".join(rows) + "\n"


def rules_page() -> str:
    sections = [
        "# Rules\n\n"
        "Written by `docs/generate_rules.py` from each rule's own documentation, which `gradfix explain CODE`\n"
        "prints; `gradfix rules` lists them. *safe*: `gradfix fix` applies the fix; *unsafe*: the fix changes\n"
        "what the program computes and needs `--unsafe-fixes`; *report*: gradfix reports and leaves the fix to\n"
        "you (`gradfix diagnose --fix` searches for one by running the script). A rule whose fix is safe still\n"
        "only reports where it cannot prove the rewrite keeps the program's meaning.\n"
    ]
    for rule in all_rules():
        documented = {
            title: text + (f"\n\n{proof_obligations(rule)}" if title == FIX_SAFETY and rule.OBLIGATIONS else "")
            for title, text in rule.sections().items()
        }
        sections.append(
            f"## {rule.CODE} {rule.NAME}\n\n"
            f"*{rule.SUMMARY}* (fix: {fix_kind(rule)}).\n\n"
            + "".join(f"### {title}\n\n{text}\n\n" for title, text in documented.items())
            + f"### Example\n\nBefore:\n\n```python\n{rule.EXAMPLE_BEFORE}```\n\n"
            f"After:\n\n```python\n{rule.EXAMPLE_AFTER}```\n"
        )
    return "\n".join(sections)


def proof_obligations(rule: type[Rule]) -> str:
    """What the rule's safe fix must prove beyond the bug, and what leaves each unknown."""
    rows = [
        f"- {OBLIGATIONS[name]} (`{name}`); unknown or refuted by: " + ", ".join(c.kind for c in constructs_against(name)) + "."
        for name in rule.OBLIGATIONS
    ]
    return (
        "A safe fix is offered only when gradfix proves, on the fix's path:\n\n"
        + "\n".join(rows)
        + "\n\nOtherwise the fix is unsafe, and says which construct at which line."
    )


def readme_with_table(readme: str) -> str:
    """``readme`` with the text between its table markers replaced by the rules' table."""
    before, start, rest = readme.partition(TABLE_START)
    _, end, after = rest.partition(TABLE_END)
    if not start or not end:
        raise ValueError(f"README.md has no rules table markers ({TABLE_START.strip()} … {TABLE_END.strip()})")
    return before + TABLE_START + readme_table() + TABLE_END + after


def main() -> None:
    README.write_text(readme_with_table(README.read_text(encoding="utf-8")), encoding="utf-8")
    RULES_PAGE.write_text(rules_page(), encoding="utf-8")
    print(f"wrote the rules table of {README.name} and {RULES_PAGE.relative_to(ROOT)}", file=sys.stderr)


if __name__ == "__main__":
    main()
