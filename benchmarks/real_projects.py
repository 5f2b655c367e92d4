"""gradfix on real projects it was not written from, against the verdicts a person gave each finding.

usage: python benchmarks/real_projects.py [PROJECTS_DIR] [--verdicts FILE]

PROJECTS_DIR (default ../projects, beside the repository, as ../shared is) holds one folder per project, named owner+name, each an export
of the commit named in tests/real_projects/verdicts.tsv. Runs ``gradfix check --hints --output-format
json-lines`` on each (a hint's rule is written ``GF004 hint``: findings and hints are counted apart) and prints, per project: files, findings, rewrites offered (safe, unsafe), how
many findings and parse errors have a verdict, the findings' verdicts (bug / false / unsure), the parse
errors, and those on files Python or Jupyter runs (errors false); then every finding without a verdict,
which is what a review has to read next. A finding has a verdict when a row names its project,
path:line and rule, so a changed line asks for a new review.
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

DEFAULT_PROJECTS = Path(__file__).resolve().parents[2] / "projects"
DEFAULT_VERDICTS = Path(__file__).resolve().parents[1] / "tests" / "real_projects" / "verdicts.tsv"
VERDICTS = ("bug", "false", "unsure")


def read_verdicts(path: Path) -> dict[tuple[str, str, str], str]:
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line and not line.startswith("#")]
    return {(row["project"], row["path:line"], row["rule"]): row["verdict"] for row in csv.DictReader(lines, delimiter="\t")}


def findings(folder: Path) -> list[dict]:
    run = subprocess.run(
        [sys.executable, "-m", "gradfix", "check", "--hints", "--output-format", "json-lines", "--no-cache", "--exit-zero", str(folder)],
        capture_output=True,
        text=True,
        check=False,
    )
    if run.returncode not in (0, 2):  # 2: some files did not parse; their errors are in the output
        raise SystemExit(f"gradfix check {folder} exited {run.returncode}: {run.stderr.strip()}")
    return [json.loads(line) for line in run.stdout.splitlines() if line.strip()]


def location(finding: dict, folder: Path) -> str:
    path = Path(finding["path"]).relative_to(folder).as_posix()
    cell = f"[cell {finding['cell']}]" if finding.get("cell") is not None else ""
    return f"{path}{cell}:{finding['line']}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("projects", nargs="?", type=Path, default=DEFAULT_PROJECTS)
    parser.add_argument("--verdicts", type=Path, default=DEFAULT_VERDICTS)
    args = parser.parse_args()
    if not args.projects.is_dir():
        print(f"skipped: no folder {args.projects} (export each project there as owner+name)")
        return 0
    verdicts = read_verdicts(args.verdicts)
    header = ("project", "files", "findings", "safe", "unsafe", "reviewed", *VERDICTS, "errors", "errors false")
    rows, unreviewed = [], []
    for folder in sorted(path for path in args.projects.iterdir() if path.is_dir()):
        project = folder.name.replace("+", "/", 1)
        found = findings(folder)
        files = sum(1 for path in folder.rglob("*") if path.suffix in (".py", ".ipynb") and path.is_file())
        counts = Counter()
        for finding in found:
            # (a hint's verdict is kept under its code and "hint": it is counted apart)
            code = finding["code"] + (" hint" if finding.get("hint") else "")
            counts["errors" if code == "error" else "findings"] += 1
            if finding.get("fix"):
                counts[finding["fix"]] += 1
            # (a verdict given before the finding became a hint still judges it)
            verdict = verdicts.get((project, location(finding, folder), code)) or verdicts.get((project, location(finding, folder), finding["code"]))
            if verdict is None:
                unreviewed.append(f"{project} {location(finding, folder)} {code} {finding['message']}")
            else:
                counts["reviewed"] += 1
                counts[verdict if code != "error" else f"errors {verdict}"] += 1
        rows.append((project, files, *(counts[key] for key in header[2:])))
    rows.append(("total", *(sum(row[i] for row in rows) for i in range(1, len(header)))))
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths)))
    print(f"\nwithout a verdict ({len(unreviewed)}):" if unreviewed else "\nevery finding has a verdict")
    for line in unreviewed:
        print("  " + line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
