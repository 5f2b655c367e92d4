"""ruff's lint rules and formatting (pyproject.toml's [tool.ruff]) hold for the project's own code, and
mypy's strict checks ([tool.mypy]) for its plain layer, its analysis and its rules, but for the modules
listed as not strict yet, a list that only shrinks."""

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).parents[1]
MYPY = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mypy"]
NOT_YET_STRICT = [pattern for override in MYPY.get("overrides", []) if override.get("ignore_errors") for pattern in override["module"]]


def test_ruff_finds_nothing():
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "codemods", "cli", "tests", "benchmarks", "docs"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format_leaves_the_code_as_it_is():
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--check", "--no-cache", "codemods", "cli", "tests", "benchmarks", "docs", "gradfix"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def _files(pattern: str) -> set[str]:
    """The files of the modules a mypy pattern names, as mypy names them from the repository's root
    (``codemods.analysis.*``: every module under ``codemods/analysis/``)."""
    if pattern.endswith(".*"):
        return {str(path.relative_to(ROOT)) for path in (ROOT / pattern[:-2].replace(".", "/")).rglob("*.py")}
    return {pattern.replace(".", "/") + ".py"}


def test_mypy_strict_passes_on_the_plain_layer_the_analysis_and_the_rules():
    from .test_layers import PACKAGES, PLAIN_LAYER

    plain = {str(PACKAGES["gradfix.codemods"].relative_to(ROOT) / f"{module.rpartition('.')[2]}.py") for module in PLAIN_LAYER}
    files = plain | _files("codemods.analysis.*") | _files("codemods.rules.*") | {file for pattern in NOT_YET_STRICT for file in _files(pattern)}
    result = subprocess.run([sys.executable, "-m", "mypy", *sorted(files)], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_module_listed_as_not_strict_yet_fails_strict(tmp_path):
    config = tmp_path / "mypy.ini"
    config.write_text("[mypy]\n" + "".join(f"{key} = {value}\n" for key, value in MYPY.items() if key != "overrides"))
    listed = {pattern: _files(pattern) for pattern in NOT_YET_STRICT}
    command = [sys.executable, "-m", "mypy", "--config-file", str(config), "--cache-dir", str(tmp_path / "cache")]
    result = subprocess.run([*command, *sorted(set().union(*listed.values()))], cwd=ROOT, capture_output=True, text=True)
    failing = {line.partition(":")[0] for line in result.stdout.splitlines() if ": error:" in line}
    strict_already = [pattern for pattern, files in listed.items() if not files & failing]
    assert not strict_already, f"strict already: take {strict_already} off [[tool.mypy.overrides]] in pyproject.toml"
