"""No module of the library (``codemods/``) or of the command line (``cli/``) is longer than 800
lines: a module a reader can hold in mind holds one concern. One that grows past it is split along
the seams of what it holds (each new module saying in its docstring what it holds, and why apart),
not cut in two."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("codemods", "cli")
MAX_LINES = 800


def _lines_over_the_limit() -> dict[str, int]:
    counted = {path: len(path.read_text(encoding="utf-8").splitlines()) for folder in FOLDERS for path in sorted((ROOT / folder).rglob("*.py"))}
    return {str(path.relative_to(ROOT)): lines for path, lines in counted.items() if lines > MAX_LINES}


def test_no_module_of_the_library_or_the_command_line_is_longer_than_800_lines():
    too_long = ", ".join(f"{path} ({lines} lines)" for path, lines in _lines_over_the_limit().items())
    assert not too_long, f"over {MAX_LINES} lines (split along its seams): {too_long}"
