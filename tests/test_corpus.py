"""Real code that trains correctly (../shared/corpus): gradfix checks every file, proposes no
rewrite there, even with unsafe fixes (so every file stays byte-identical and fixing is trivially
idempotent), has no internal error, and reports only the reviewed findings and hints. The corpus takes about
a minute: this is its only pass."""

from pathlib import Path

import pytest

from gradfix.codemods.files import collect_files
from gradfix.codemods.report import FixMode
from gradfix.codemods.run import check_files
from gradfix.codemods.registry import all_rules

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus"
REVIEWED = Path(__file__).parent / "corpus_findings.txt"

pytestmark = pytest.mark.skipif(not CORPUS.is_dir(), reason=f"the real-code corpus is not at {CORPUS}")


@pytest.fixture(scope="module")
def reports():
    files = collect_files([CORPUS]).files
    assert files, "the corpus has no Python files"
    return list(check_files(files, all_rules(), FixMode.UNSAFE))


def test_every_file_is_checked_and_left_byte_identical(reports):
    """Every file is parsed and analysed (a file that could not be would be skipped, and leaving it
    alone would prove nothing), none is rewritten, so each stays byte for byte what it was, and
    fixing again has nothing to change."""
    assert [e for r in reports for e in r.errors] == []
    assert [r.path for r in reports if r.changed] == []
    assert [e for r in reports for e in r.internal_errors] == []


def test_findings_are_the_reviewed_ones(reports):
    found = sorted(f"{Path(r.path).relative_to(CORPUS)}:{f.line}: {f.code}{' hint' if f.hint else ''}" for r in reports for f in r.findings)
    reviewed = sorted(line for line in REVIEWED.read_text().splitlines() if line.strip() and not line.startswith("#"))
    assert found == reviewed
