"""A report's cache entry holds no copy of the file's bytes (``ReportCache.store``): the entry's key
is made of them, and a tree's entries as large as its files made reading them back most of a warm
run. The report served still carries the bytes it was made of, which ``fix`` compares with the file
before it writes (a fix's rewritten file is still kept: it is what ``fix`` writes)."""

from gradfix.codemods import check
from gradfix.codemods.cache import ReportCache
from gradfix.codemods.registry import all_rules
from gradfix.codemods.report import FixMode
from gradfix.codemods.run import check_files

from .conftest import FIXTURES

CASE = FIXTURES / "gf002_separate_backwards" / "shared_trunk_for_loop"
SECRET = b"this user's secret on this host.".ljust(32)


def test_an_entry_holds_the_report_not_the_file(tmp_path, monkeypatch):
    script = tmp_path / "train.py"
    script.write_text((CASE / "before.py").read_text() + "".join(f"# note {i} of a long file\n" for i in range(5000)))
    cache = ReportCache(tmp_path / "cache", secret=SECRET)
    cold = check_files([script], all_rules(), FixMode.NONE, 1, cache)
    assert cold[0].findings
    entries = [path for path in (tmp_path / "cache").rglob("*") if path.is_file() and path.name != ".gitignore"]
    assert 0 < sum(entry.stat().st_size for entry in entries) < script.stat().st_size / 10
    checked = []
    monkeypatch.setattr(check, "check_source", lambda *args: checked.append(args))
    warm = check_files([script], all_rules(), FixMode.NONE, 1, cache)
    assert checked == [] and warm == cold and warm[0].original == script.read_bytes()
