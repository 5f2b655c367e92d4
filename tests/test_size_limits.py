"""Files too large to check (their memory grows with them: benchmarks/file_size_memory.py) are
refused before anything parses them, or decodes a notebook's JSON: an error for that file, the
others still checked and fixed, exit 2 as for any file that cannot be checked."""

import json

import pytest
from typer.testing import CliRunner

from gradfix.cli.app import app
from gradfix.codemods.check import check_source
from gradfix.codemods.notebook import MAX_NOTEBOOK_BYTES, MAX_NOTEBOOK_VALUES
from gradfix.codemods.registry import all_rules
from gradfix.codemods.source import MAX_LINES, MAX_WORDS_AND_SYMBOLS

from .conftest import FIXTURES

HOISTED = FIXTURES / "gf003_forward_outside_loop" / "loss_hoisted"
SPLIT = "(split the file, or exclude it)"
CLEAR = "(clear its outputs, or exclude it)"


def notebook(code: str, metadata: dict | None = None) -> bytes:
    cell = {"cell_type": "code", "execution_count": 1, "metadata": {}, "outputs": [], "source": code.splitlines(keepends=True)}
    return json.dumps({"cells": [cell], "metadata": metadata or {}, "nbformat": 4, "nbformat_minor": 5}).encode()


LONG = "import torch\n" + "x = 1\n" * MAX_LINES + "loss.backward()\n"
TOO_LARGE = {
    "words and symbols": (
        "big.py",
        ("import torch\nx = [" + "1, " * (MAX_WORDS_AND_SYMBOLS // 2) + "]\nloss.backward()\n").encode(),
        f"more words and symbols than gradfix's limit of {MAX_WORDS_AND_SYMBOLS:,} {SPLIT}",
    ),
    "lines": ("big.py", LONG.encode(), f"{MAX_LINES + 2:,} lines, over gradfix's limit of {MAX_LINES:,} {SPLIT}"),
    "lines ended by a carriage return alone": (
        "big.py",
        LONG.replace("\n", "\r").encode(),
        f"{MAX_LINES + 2:,} lines, over gradfix's limit of {MAX_LINES:,} {SPLIT}",
    ),
    "lines of a notebook's code": ("big.ipynb", notebook(LONG), f"{MAX_LINES + 2:,} lines, over gradfix's limit of {MAX_LINES:,} {SPLIT}"),
    # Not even JSON: refused before it is decoded.
    "bytes of a notebook": (
        "big.ipynb",
        b"{" + b" " * MAX_NOTEBOOK_BYTES,
        f"{MAX_NOTEBOOK_BYTES + 1:,} bytes, over gradfix's limit of {MAX_NOTEBOOK_BYTES:,} for a notebook {CLEAR}",
    ),
    "values of a notebook": (
        "big.ipynb",
        notebook("loss.backward()\n", {"widths": [0] * MAX_NOTEBOOK_VALUES}),
        # and the 14 brackets and commas of the notebook around them
        f"about {MAX_NOTEBOOK_VALUES + 14:,} JSON values, over gradfix's limit of {MAX_NOTEBOOK_VALUES:,} for a notebook {CLEAR}",
    ),
}


@pytest.mark.parametrize("name, data, why", TOO_LARGE.values(), ids=TOO_LARGE.keys())
def test_a_file_too_large_is_an_error_of_its_own_and_the_other_files_are_fixed(tmp_path, name, data, why):
    (tmp_path / name).write_bytes(data)
    (tmp_path / "train.py").write_text(HOISTED.joinpath("before.py").read_text())
    result = CliRunner().invoke(app, ["fix", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert f"error: {tmp_path / name}: too large to check: {why}\n" in result.stderr
    assert (tmp_path / "train.py").read_text() == HOISTED.joinpath("after.py").read_text()
    assert (tmp_path / name).read_bytes() == data


@pytest.mark.parametrize(
    "code",
    ["x = 1\n" * MAX_LINES, "x = [" + "1, " * (MAX_WORDS_AND_SYMBOLS // 2 - 2) + "]\n"],
    ids=["lines", "words and symbols"],
)
def test_code_at_the_limits_is_checked(code):
    assert check_source(code.encode(), all_rules(), path="at_the_limit.py").errors == []
    assert check_source((code + "x\n").encode(), all_rules(), path="over_the_limit.py").errors != []
