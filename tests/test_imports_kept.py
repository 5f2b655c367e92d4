"""The project modules a run's files import, kept in the cache (``project.ImportsFound``): a warm run
finds them again only for a file whose bytes changed, and any change to what finding them read (a
module created, deleted or moved, the settings' ``src``, the work tree's top, where a link leads)
gives the answer a run without the cache gives."""

from pathlib import Path

import pytest

from gradfix.codemods import project
from gradfix.codemods.cache import ReportCache
from gradfix.codemods.run import check_paths

from .conftest import FIXTURES

CASE = FIXTURES / "gf001_duplicate_backward" / "unsafe_loss_helper_in_its_own_module"
# A helper that backwards the loss it returns, and a training step that backwards it again.
HELPER = (CASE / "rdrop_loss.py").read_text()
TRAIN = (CASE / "before.py").read_text()
SECRET = b"this user's secret on this host.".ljust(32)


@pytest.fixture
def repo(tmp_path):
    """A work tree holding the training script (the file each run names) and the helper."""
    (tmp_path / "repo" / ".git").mkdir(parents=True)
    (tmp_path / "repo" / "train.py").write_text(TRAIN)
    (tmp_path / "repo" / "rdrop_loss.py").write_text(HELPER)
    return tmp_path / "repo"


@pytest.fixture
def scans(monkeypatch):
    """The files whose import statements were scanned, in order."""
    scanned: list[bytes] = []
    scan = project.written_modules
    monkeypatch.setattr(project, "written_modules", lambda code: scanned.append(code) or scan(code))
    return scanned


def findings(script: Path, cache: ReportCache | None) -> list[str]:
    (report,) = check_paths([script], cache=cache, jobs=1).reports
    return [finding.code for finding in report.findings]


def warm_and_cold(script: Path, cache: ReportCache) -> tuple[list[str], list[str]]:
    """The findings of a run with the cache (and the imports the last run found), then without."""
    return findings(script, cache), findings(script, None)


def test_a_warm_run_finds_again_only_the_imports_of_a_file_that_changed(repo, tmp_path, scans):
    cache = ReportCache(tmp_path / "cache", secret=SECRET)
    files = [repo / "train.py", repo / "rdrop_loss.py"]
    cold = check_paths(files, cache=cache, jobs=1).reports
    assert [[f.code for f in report.findings] for report in cold] == [["GF001"], []]
    assert len(scans) == 2
    scans.clear()
    assert check_paths(files, cache=cache, jobs=1).reports == cold
    assert scans == []
    (repo / "train.py").write_text(TRAIN + "\n")
    assert [f.code for f in check_paths(files, cache=cache, jobs=1).reports[0].findings] == ["GF001"]
    assert scans == [(TRAIN + "\n").encode()]


def test_an_entry_someone_edited_is_not_taken(repo, tmp_path, scans):
    cache = ReportCache(tmp_path / "cache", secret=SECRET)
    findings(repo / "train.py", cache)
    for entry in (tmp_path / "cache").rglob("*"):
        if entry.is_file() and entry.name != ".gitignore":
            entry.write_bytes(entry.read_bytes().replace(b"rdrop_loss", b"rdrop_lost"))
    scans.clear()
    assert findings(repo / "train.py", cache) == ["GF001"]
    assert scans == [TRAIN.encode()]


def test_a_module_created_or_deleted_on_the_search_path(repo, tmp_path):
    cache = ReportCache(tmp_path / "cache", secret=SECRET)
    (repo / "rdrop_loss.py").unlink()
    assert warm_and_cold(repo / "train.py", cache) == ([], [])
    (repo / "rdrop_loss.py").write_text(HELPER)
    assert warm_and_cold(repo / "train.py", cache) == (["GF001"], ["GF001"])
    (repo / "rdrop_loss.py").unlink()
    assert warm_and_cold(repo / "train.py", cache) == ([], [])


def test_a_module_that_changed_is_read_again(repo, tmp_path):
    cache = ReportCache(tmp_path / "cache", secret=SECRET)
    assert warm_and_cold(repo / "train.py", cache) == (["GF001"], ["GF001"])
    (repo / "rdrop_loss.py").write_text(HELPER.replace("loss.backward()", "pass"))
    assert warm_and_cold(repo / "train.py", cache) == ([], [])


def test_a_module_moved_to_a_source_root_and_the_src_setting_changed(repo, tmp_path):
    cache = ReportCache(tmp_path / "cache", secret=SECRET)
    (repo / "pyproject.toml").write_text('[tool.gradfix]\nsrc = ["."]\n')
    (repo / "lib").mkdir()
    (repo / "rdrop_loss.py").rename(repo / "lib" / "rdrop_loss.py")
    (repo / "scripts").mkdir()
    (repo / "train.py").rename(repo / "scripts" / "train.py")
    script = repo / "scripts" / "train.py"
    assert warm_and_cold(script, cache) == ([], [])
    (repo / "pyproject.toml").write_text('[tool.gradfix]\nsrc = ["lib"]\n')  # the folders' names stay the same
    assert warm_and_cold(script, cache) == (["GF001"], ["GF001"])
    (repo / "lib" / "rdrop_loss.py").rename(repo / "rdrop_loss.py")
    assert warm_and_cold(script, cache) == ([], [])


def test_a_new_work_tree_top_above_the_file(repo, tmp_path):
    """The script's folder and the folder that holds the helper list the same names before and
    after: only the top of the script's work tree moves, and the helper is outside it."""
    cache = ReportCache(tmp_path / "cache", secret=SECRET)
    (repo / "a" / "b").mkdir(parents=True)
    (repo / "train.py").rename(repo / "a" / "b" / "train.py")
    script = repo / "a" / "b" / "train.py"
    assert warm_and_cold(script, cache) == (["GF001"], ["GF001"])
    (repo / "a" / ".git").mkdir()
    assert warm_and_cold(script, cache) == ([], [])


def test_a_link_that_now_leads_out_of_the_work_tree(repo, tmp_path):
    """The link keeps its name, and leads to a regular file both times: only where it leads moves."""
    cache = ReportCache(tmp_path / "cache", secret=SECRET)
    (repo / "kept").mkdir()
    (repo / "rdrop_loss.py").rename(repo / "kept" / "rdrop_loss.py")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "rdrop_loss.py").write_text(HELPER)
    (repo / "rdrop_loss.py").symlink_to(repo / "kept" / "rdrop_loss.py")
    assert warm_and_cold(repo / "train.py", cache) == (["GF001"], ["GF001"])
    (repo / "rdrop_loss.py").unlink()
    (repo / "rdrop_loss.py").symlink_to(tmp_path / "elsewhere" / "rdrop_loss.py")
    assert warm_and_cold(repo / "train.py", cache) == ([], [])


def test_a_run_asks_what_a_module_exports_once_however_many_files_import_it(repo, monkeypatch):
    for name in ("other.py", "third.py"):
        (repo / name).write_text(TRAIN)
    asked: list[bytes] = []
    exports_of = project.ModuleSummaries.of
    monkeypatch.setattr(project.ModuleSummaries, "of", lambda self, data, *more: asked.append(data) or exports_of(self, data, *more))
    reports = check_paths([repo / "train.py", repo / "other.py", repo / "third.py"], jobs=1).reports
    assert [[finding.code for finding in report.findings] for report in reports] == [["GF001"]] * 3
    assert asked == [HELPER.encode()]
