"""The index of a run's cache entries (``ReportCache.for_run``): a warm run over many files opens one
entry, not one for each file, and answers as a run without the cache does whatever was done to the
index (edited, cut short, copied from another run's, written by two runs at once). Opens are
counted, not timed (speed lives in benchmarks/check_speed.py)."""

import multiprocessing
import shutil
from pathlib import Path

import pytest

from gradfix.codemods import check
from gradfix.codemods.cache import INDEXED_FILES, ReportCache
from gradfix.codemods.config import Overrides
from gradfix.codemods.run import check_paths

from .test_cache import CLEAN, DOUBLE
from .test_imports_kept import HELPER, TRAIN

SECRET = b"the secret of this user and host".ljust(32)


@pytest.fixture
def tree(tmp_path):
    """A work tree of as many files as a run needs to keep an index: scripts with a finding,
    clean ones, and a script that imports a helper of the project."""
    tree = tmp_path / "tree"
    (tree / ".git").mkdir(parents=True)
    for number in range(INDEXED_FILES):
        (tree / f"script_{number:02}.py").write_text(DOUBLE if number % 3 == 0 else CLEAN)
    (tree / "train.py").write_text(TRAIN)
    (tree / "rdrop_loss.py").write_text(HELPER)
    return tree


@pytest.fixture
def checked(monkeypatch):
    """The names of the files each run really checked (the others came from the cache)."""
    names: list[str] = []
    check_source = check.check_source
    monkeypatch.setattr(
        check, "check_source", lambda data, rules, mode, path, *rest: names.append(Path(path).name) or check_source(data, rules, mode, path, *rest)
    )
    return names


@pytest.fixture
def opened(monkeypatch, tmp_path):
    """The files of the cache folder read, by name, from now on (``opened.clear()`` to start again)."""
    names: list[str] = []
    read_bytes = Path.read_bytes
    monkeypatch.setattr(
        Path, "read_bytes", lambda path: (names.append(path.name) if tmp_path / "cache" in path.parents else None) or read_bytes(path)
    )
    return names


def answers(tree: Path, cache: ReportCache | None) -> list[tuple[str, list[tuple[str, int]]]]:
    return [(report.path, [(f.code, f.line) for f in report.findings]) for report in check_paths([tree], cache=cache, jobs=1).reports]


def entries(cache: ReportCache) -> set[Path]:
    return {path for path in cache.folder.rglob("*") if path.is_file() and path.name != ".gitignore"}


def test_a_warm_run_over_many_files_opens_one_entry_not_one_a_file(tree, tmp_path, checked, opened):
    cache = ReportCache(tmp_path / "cache", secret=SECRET)
    cold = answers(tree, cache)
    assert len(checked) == INDEXED_FILES + 2
    assert cold == answers(tree, None) and any(findings for _, findings in cold)
    checked.clear()
    opened.clear()
    assert answers(tree, cache) == cold
    assert checked == [] and len(opened) == 1


@pytest.mark.parametrize("other", [{"overrides": Overrides(select=("GF001",))}, {"fixing": True}], ids=["another selection", "fix's mode"])
def test_runs_over_the_same_files_with_other_rules_or_mode_keep_indexes_of_their_own(tree, tmp_path, checked, opened, other):
    """Each run over the files, alternated, opens its own index and only it: a run of other rules
    or of another fix mode reads other entries, and an index named by the files alone was written
    over by each run in turn, every entry then read from its own file."""
    cache = ReportCache(tmp_path / "cache", secret=SECRET)
    cold = answers(tree, cache)
    check_paths([tree], cache=cache, jobs=1, **other)
    for _ in range(2):
        opened.clear()
        assert answers(tree, cache) == cold and len(opened) == 1
        opened.clear()
        check_paths([tree], cache=cache, jobs=1, **other)
        assert len(opened) == 1
    assert checked.count("train.py") == 2  # once for each: nothing was checked again


def test_a_run_over_few_files_keeps_no_index(tree, tmp_path):
    cache = ReportCache(tmp_path / "cache", secret=SECRET)
    check_paths([tree / "train.py", tree / "script_00.py"], cache=cache, jobs=1)
    assert len(entries(cache)) == 4  # two reports, the helper's summaries, the imports found


def test_a_file_changed_since_the_index_was_kept_is_checked_again_and_the_index_kept_anew(tree, tmp_path, checked, opened):
    cache = ReportCache(tmp_path / "cache", secret=SECRET)
    answers(tree, cache)
    (tree / "script_01.py").write_text(DOUBLE)  # was clean
    (tree / "rdrop_loss.py").write_text(HELPER.replace("loss.backward()", "pass"))  # train.py's finding rests on it
    checked.clear()
    changed = answers(tree, cache)
    assert sorted(checked) == ["rdrop_loss.py", "script_01.py", "train.py"]
    assert changed == answers(tree, None)
    checked.clear()
    opened.clear()
    assert answers(tree, cache) == changed
    assert checked == [] and len(opened) == 1


def _index(cache: ReportCache, before: set[Path]) -> Path:
    """Of the entries a run over the whole tree adds to those of its files (the imports its files
    found, and its index), the index: it holds the other."""
    return max(entries(cache) - before, key=lambda entry: entry.stat().st_size)


def _entries_and_index(tree: Path, folder: Path, secret: bytes = SECRET) -> tuple[ReportCache, Path]:
    """A cache holding the entries of the tree's files (kept by runs of a file each) and the index
    a run over the whole tree kept."""
    cache = ReportCache(folder, secret=secret)
    for path in sorted(tree.glob("*.py")):
        check_paths([path], cache=cache, jobs=1)
    before = entries(cache)
    answers(tree, cache)
    return cache, _index(cache, before)


@pytest.mark.parametrize(
    "spoiled",
    [
        lambda data: data[:-1] + bytes([data[-1] ^ 1]),  # edited
        lambda data: data[: len(data) // 2],  # cut short, as a write killed midway would leave it
        lambda data: b"",
    ],
    ids=["edited", "cut short", "empty"],
)
def test_an_index_spoiled_is_not_taken_and_the_entries_are_read_one_by_one(tree, tmp_path, checked, opened, spoiled):
    cache, index = _entries_and_index(tree, tmp_path / "cache")
    cold = answers(tree, None)
    index.write_bytes(spoiled(index.read_bytes()))
    checked.clear()
    opened.clear()
    assert answers(tree, cache) == cold
    assert checked == [] and len(opened) > INDEXED_FILES  # every entry read from its own file
    opened.clear()
    assert answers(tree, cache) == cold and len(opened) == 1  # and the index kept again


def test_an_index_spoiled_with_its_entries_is_not_taken(tree, tmp_path, checked):
    cache, index = _entries_and_index(tree, tmp_path / "cache")
    cold = answers(tree, None)
    for entry in entries(cache):
        entry.write_bytes(entry.read_bytes()[:-1] + b" ")
    checked.clear()
    assert answers(tree, cache) == cold
    assert sorted(set(checked)) == sorted(path.name for path in tree.glob("*.py"))


def _another_runs_index(tree: Path, tmp_path: Path) -> Path:
    other = tmp_path / "other"
    (other / ".git").mkdir(parents=True)
    for number in range(INDEXED_FILES):
        (other / f"other_{number:02}.py").write_text(DOUBLE)
    return _entries_and_index(other, tmp_path / "other-cache")[1]


def _another_secrets_index(tree: Path, tmp_path: Path) -> Path:
    return _entries_and_index(tree, tmp_path / "foreign", SECRET[::-1])[1]


@pytest.mark.parametrize("copied", [_another_runs_index, _another_secrets_index])
def test_the_index_of_another_run_or_secret_copied_over_this_runs_is_not_taken(tree, tmp_path, checked, copied):
    """Its MAC is of its name, under the secret it was kept with."""
    cache, index = _entries_and_index(tree, tmp_path / "cache")
    cold = answers(tree, None)
    shutil.copyfile(copied(tree, tmp_path), index)
    for entry in entries(cache) - {index}:
        entry.write_bytes(b"")  # so that only the index could answer
    checked.clear()
    assert answers(tree, cache) == cold
    assert sorted(checked[: INDEXED_FILES + 2]) == sorted(path.name for path in tree.glob("*.py"))


def _run(tree: Path, folder: Path, files: int) -> None:
    check_paths(sorted(tree.glob("*.py"))[:files], cache=ReportCache(folder, secret=SECRET), jobs=1)


def test_two_runs_at_once_leave_indexes_that_answer_as_a_run_without_the_cache(tree, tmp_path, checked, opened):
    """Two runs over the tree and one over part of it, at once, sharing the folder: each index is
    written whole under a temporary name and renamed into place."""
    folder = tmp_path / "cache"
    context = multiprocessing.get_context("fork")
    runs = [context.Process(target=_run, args=(tree, folder, files)) for files in (INDEXED_FILES + 2, INDEXED_FILES + 2, INDEXED_FILES)]
    for process in runs:
        process.start()
    for process in runs:
        process.join()
    assert [process.exitcode for process in runs] == [0, 0, 0]
    cache = ReportCache(folder, secret=SECRET)
    cold = answers(tree, None)
    checked.clear()
    opened.clear()
    assert answers(tree, cache) == cold
    assert checked == [] and len(opened) == 1
    assert not [path for path in folder.rglob(".*") if path.name != ".gitignore"]  # no temporary file left
