"""A run answered by the cache does each file's share of the work once: the exclusions compiled once
and matched on strings, settings looked up once a folder, an entry's types read once, each file's
bytes hashed once. Each test counts the work the slow way repeated for every file or value (no
timing: speed lives in benchmarks/check_speed.py), and checks the answers are those of the slow way."""

import fnmatch
import functools
import hashlib
import hmac
import json
import os
import subprocess
import typing
from pathlib import Path

import pytest

from gradfix.codemods import cache as cache_module, project, run as run_module, typed_json
from gradfix.codemods.cache import INDEXED_FILES, ReportCache
from gradfix.codemods.config import Config, Overrides, Settings
from gradfix.codemods.files import collect_files
from gradfix.codemods.report import FileReport, Finding, FixKind
from gradfix.codemods.run import check_paths, excluded_by

from .test_cache import CLEAN, DOUBLE
from .test_imports_kept import HELPER, SECRET, TRAIN


def _spied(monkeypatch, module, name: str) -> list[tuple]:
    """The arguments of each call of ``module.name`` from now on."""
    calls: list[tuple] = []
    real = getattr(module, name)
    monkeypatch.setattr(module, name, lambda *arguments, **keywords: calls.append(arguments) or real(*arguments, **keywords))
    return calls


def _matches(pattern: str, path: str, root: str) -> bool:
    """The documented reading of one pattern (config's docstring), pattern by pattern."""
    pattern = pattern.removeprefix("./").rstrip("/")
    if "/" not in pattern:
        return fnmatch.fnmatchcase(os.path.basename(path), pattern)
    if not (path + "/").startswith(root + "/"):
        return False
    relative = os.path.relpath(path, root)
    return fnmatch.fnmatchcase(relative, pattern) or fnmatch.fnmatchcase(relative, pattern + "/*")


PATTERNS = ("build", "*.egg-info", "./generated/", "experiments/*.py", "docs/*", "a*b/c", "[st]mp")


def test_exclusions_answer_as_each_pattern_would(tmp_path):
    config = Config(exclude=PATTERNS, root=tmp_path)
    root = str(tmp_path)
    paths = [
        *(os.path.join(root, name) for name in ("build", "builder", "x.egg-info", "generated", "tmp", "smp", "ump")),
        *(os.path.join(root, "src", name) for name in ("build", "generated", "run.py")),
        os.path.join(root, "experiments", "one.py"),
        os.path.join(root, "experiments", "deep", "two.py"),
        os.path.join(root, "src", "experiments", "one.py"),
        os.path.join(root, "docs", "conf.py"),
        os.path.join(root, "axxb", "c"),
        os.path.join(root, "axxb", "c", "d.py"),
        os.path.join(os.path.dirname(root), "elsewhere", "docs", "x.py"),
        root,
    ]
    for path in paths:
        expected = any(_matches(pattern, path, root) for pattern in PATTERNS)
        assert config.excludes(path) == expected == config.excludes(Path(path)), path
        if path != root:
            assert config.excludes_in(os.path.dirname(path))(os.path.basename(path)) == expected, path


def test_a_walk_matches_the_exclusions_as_compiled_expressions_not_pattern_by_pattern(tmp_path, monkeypatch):
    for folder in ("pkg", "pkg/sub", "build", "pkg/node_modules", "pkg/x.egg-info", "experiments"):
        (tmp_path / folder).mkdir()
    for file in ("pkg/a.py", "pkg/sub/b.py", "build/c.py", "pkg/node_modules/d.py", "pkg/x.egg-info/e.py", "experiments/f.py", "g.py"):
        (tmp_path / file).write_text("x = 1\n")
    excluded = Config(extend_exclude=("experiments/*",), root=tmp_path).excludes
    matched = _spied(monkeypatch, fnmatch, "fnmatchcase")
    found = collect_files([tmp_path], excluded).files
    assert sorted(path.relative_to(tmp_path).as_posix() for path in found) == ["g.py", "pkg/a.py", "pkg/sub/b.py"]
    assert matched == []


def test_an_entry_is_decoded_without_reading_its_type_hints_again(monkeypatch):
    finding = Finding("GF001", 3, 4, "backward twice", FixKind.SAFE, (7,), "train.py")
    reports = [FileReport("train.py"), FileReport("train.py", findings=[finding], prefiltered=True)]
    entries = [typed_json.dumps(report, FileReport) for report in reports]
    assert [typed_json.loads(entry, FileReport) for entry in entries] == reports
    hints_read = _spied(monkeypatch, typing, "get_origin")
    assert [typed_json.loads(entry, FileReport) for entry in entries] == reports
    assert hints_read == []


def _checked_once(tmp_path):
    """A work tree of a training script and the helper it imports, checked once into a cache:
    the tree, the cache and the cold run's reports."""
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "train.py").write_text(TRAIN)
    (repo / "rdrop_loss.py").write_text(HELPER)
    cache = ReportCache(tmp_path / "cache", secret=SECRET)
    return repo, cache, check_paths([repo / "train.py"], cache=cache, jobs=1).reports


def test_a_warm_run_hashes_each_file_once(tmp_path, monkeypatch):
    """Its recalled imports and its report's key are both made of one digest of its bytes."""
    repo, cache, cold = _checked_once(tmp_path)
    assert [finding.code for finding in cold[0].findings] == ["GF001"]
    hashes = [_spied(monkeypatch, hashlib, "sha256"), _spied(monkeypatch, hashlib, "blake2b"), _spied(monkeypatch, hmac.HMAC, "update")]
    keys_made_piecewise = _spied(monkeypatch, hmac, "new")
    assert check_paths([repo / "train.py"], cache=cache, jobs=1).reports == cold
    script = (repo / "train.py").read_bytes()
    assert len([arguments for calls in hashes for arguments in calls if script in arguments]) == 1
    assert keys_made_piecewise == []  # (a key is one HMAC of its parts)


def _package_of_modules(tmp_path, count: int) -> Path:
    """A work tree whose script imports ``count`` modules of one package, and the script."""
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "pkg").mkdir()
    (repo / "pkg" / "__init__.py").write_text("")
    (repo / "pkg" / "rdrop_loss.py").write_text(HELPER)
    for number in range(count):
        (repo / "pkg" / f"m{number}.py").write_text(f"def f{number}(x):\n    return x\n")
    imports = "".join(f"from pkg.m{number} import f{number}\n" for number in range(count))
    (repo / "train.py").write_text(imports + TRAIN.replace("from rdrop_loss import", "from pkg.rdrop_loss import"))
    return repo


def test_a_warm_run_looks_at_each_folder_once_not_at_each_file(tmp_path, monkeypatch):
    """The settings of each file of a folder, the real path and the work tree of each module
    file the recalled imports name: asked of the folder, once."""
    repo = _package_of_modules(tmp_path, 30)
    cache = ReportCache(tmp_path / "cache", secret=SECRET)
    cold = check_paths([repo], cache=cache, jobs=1).reports
    assert {Path(report.path).name: [f.code for f in report.findings] for report in cold}["train.py"] == ["GF001"]
    settings_asked = _spied(monkeypatch, Settings, "for_path")
    resolved = _spied(monkeypatch, os.path, "realpath")
    matched = _spied(monkeypatch, fnmatch, "fnmatchcase")
    assert check_paths([repo], cache=cache, jobs=1).reports == cold
    assert len(settings_asked) <= 3  # (the folders whose imports are found: the repository's and the package's)
    assert len(resolved) <= 4
    assert matched == []  # (a module file's folders are matched against the default exclusions compiled)


def test_a_module_the_run_checks_is_read_once(tmp_path, monkeypatch):
    repo = _package_of_modules(tmp_path, 3)
    read = []
    monkeypatch.setattr(project, "open", lambda file, *rest: read.append(file) or open(file, *rest), raising=False)
    reports = check_paths([repo], jobs=1).reports
    assert {Path(report.path).name: [f.code for f in report.findings] for report in reports}["train.py"] == ["GF001"]
    assert read == []


@pytest.mark.parametrize(
    "changed, message",
    [
        (lambda entry: entry.update(findings=[{"x": 1}]), "$.findings[0]: not the fields of Finding"),
        (lambda entry: entry.update(errors=["a", 3]), "$.errors[1]: not a str"),
        (lambda entry: entry.update(prefiltered=1), "$.prefiltered: not a bool"),
        (lambda entry: entry.pop("fixed"), "$: not the fields of FileReport"),
    ],
)
def test_a_misfit_entry_is_said_where_it_misfits(changed, message):
    entry = json.loads(typed_json.dumps(FileReport("train.py"), FileReport))
    changed(entry)
    with pytest.raises(typed_json.UnexpectedData) as raised:
        typed_json.loads(json.dumps(entry).encode(), FileReport)
    assert str(raised.value) == message


def test_an_entry_is_decoded_by_decoders_made_once_not_looked_up_for_each_value(monkeypatch):
    """Each list, tuple and dict of an entry is decoded by the decoder of its items made with its
    own, not looked up (by hashing its hint) for each value: once an entry's types are known, a
    load asks for one decoder, its own."""
    finding = Finding("GF001", 3, 4, "backward twice", FixKind.SAFE, (7,), "train.py")
    reports = [FileReport("train.py", findings=[finding, finding], errors=["a", "b"]), FileReport("other.py")]
    entries = [typed_json.dumps(report, FileReport) for report in reports]
    assert [typed_json.loads(entry, FileReport) for entry in entries] == reports
    looked_up = _spied(monkeypatch, typed_json, "_decoder")
    assert [typed_json.loads(entry, FileReport) for entry in entries] == reports
    assert looked_up == [(FileReport,), (FileReport,)]


def test_a_warm_run_makes_each_files_absolute_path_once(tmp_path, monkeypatch):
    """Its imports, the imports found and the index are asked of by that path (a run of 2,000
    files made 16,000 absolute paths)."""
    repo, cache, cold = _checked_once(tmp_path)
    made = _spied(monkeypatch, os.path, "abspath")
    assert check_paths([repo / "train.py"], cache=cache, jobs=1).reports == cold
    assert len([arguments for arguments in made if os.fspath(arguments[0]).endswith("train.py")]) <= 2  # (the run's, and the project's of it)


def test_gradfix_s_code_is_hashed_by_blake2b_once_a_run(tmp_path, monkeypatch):
    """Its digest names the entries' folder (every run reads and hashes the 1 MB of it)."""
    monkeypatch.setattr(cache_module, "_code_digest", functools.lru_cache(maxsize=None)(cache_module._code_digest.__wrapped__))
    by_sha256, by_blake2b = _spied(monkeypatch, hashlib, "sha256"), _spied(monkeypatch, hashlib, "blake2b")
    script = tmp_path / "train.py"
    script.write_text("x = 1\n")
    for _ in range(2):
        check_paths([script], cache=ReportCache(tmp_path / "cache", secret=SECRET), jobs=1)
    assert by_sha256 == [] and len(by_blake2b) == 1 + 2  # (and the script's bytes, at each run)


def test_a_warm_walk_makes_each_files_absolute_path_once(tmp_path, monkeypatch):
    """A folder's walk, under the default exclusions (none has a ``/``: a name is matched, not
    the path), in a git work tree (git is asked which files it ignores, by absolute path): each
    file found is made absolute twice: for git, and for the run (its imports and keys share it).
    A package's ``__init__.py`` names its folder when the settings of the folder's imports are
    looked up, once."""
    repo = _package_of_modules(tmp_path, 3)
    (repo / ".git").rmdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    cache = ReportCache(tmp_path / "cache", secret=SECRET)
    cold = check_paths([repo], cache=cache, jobs=1).reports
    made = _spied(monkeypatch, os.path, "abspath")
    assert check_paths([repo], cache=cache, jobs=1).reports == cold
    for report in cold:
        asked_for_settings = Path(report.path).name == "__init__.py"
        assert len([arguments for arguments in made if os.fspath(arguments[0]) == report.path]) <= 2 + asked_for_settings, report.path


def test_a_warm_run_decodes_only_the_entries_of_files_with_something_found(tmp_path, monkeypatch):
    """An entry of a file with nothing found (parsed, or ruled out by its text) is told by its
    bytes, not decoded field by field; the file with a finding is decoded. The run answers as the
    cold run did, and as a run without the cache does."""
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    for number in range(INDEXED_FILES):
        (repo / f"clean_{number:02}.py").write_text(CLEAN if number % 2 else "x = 1\n")
    (repo / "double.py").write_text(DOUBLE)
    cache = ReportCache(tmp_path / "cache", secret=SECRET)
    cold = check_paths([repo], cache=cache, jobs=1).reports
    assert {report.prefiltered for report in cold} == {False, True}
    assert [Path(report.path).name for report in cold if report.findings] == ["double.py"]
    decoded = _spied(monkeypatch, typed_json, "loads")
    assert check_paths([repo], cache=cache, jobs=1).reports == cold == check_paths([repo], jobs=1).reports
    assert [hint for _, hint in decoded if hint is FileReport] == [FileReport]


def test_a_walk_asks_the_kind_of_each_file_it_finds_once(tmp_path, monkeypatch):
    """A folder's listing says which names are folders, regular files and links: a file found is
    looked at once more, for its identity (two names of one file are checked once), not also
    for its kind and for whether it is a link, nor a folder for whether it is a link. Links,
    dangling ones and what else a walk meets are still told apart."""
    for folder in ("pkg", "pkg/sub", "other"):
        (tmp_path / folder).mkdir()
    plain = [tmp_path / name for name in ("a.py", "pkg/b.py", "pkg/sub/c.py", "pkg/sub/d.py", "other/e.py")]
    for path in plain:
        path.write_text("x = 1\n")
    (tmp_path / "notes.txt").write_text("x = 2\n")
    (tmp_path / "other" / "link.py").symlink_to(tmp_path / "notes.txt")
    (tmp_path / "other" / "dangling.py").symlink_to(tmp_path / "missing.py")
    (tmp_path / "linked").symlink_to(tmp_path / "pkg")
    os.mkfifo(tmp_path / "pkg" / "fifo.py")
    stats, lstats = _spied(monkeypatch, os, "stat"), _spied(monkeypatch, os, "lstat")
    found = collect_files([tmp_path])
    assert sorted(found.files) == sorted([*plain, tmp_path / "other" / "link.py"])
    assert [notice.split(":")[0] for notice in found.notices] == [str(tmp_path / "other" / "dangling.py")]
    looked_at = [os.fspath(arguments[0]) for arguments in (*stats, *lstats)]
    assert [looked_at.count(str(path)) for path in plain] == [1] * len(plain)
    assert looked_at.count(str(tmp_path / "linked")) == 0


def test_a_walk_places_each_folder_below_the_settings_root_once_not_each_file(tmp_path, monkeypatch):
    """Where patterns with a / apply, a file's path relative to their root is its folder's and its
    name: the folder's is made once (each file is made absolute once, for git's question)."""
    (tmp_path / "pyproject.toml").write_text('[tool.gradfix]\nextend-exclude = ["experiments/*.py"]\n')
    for folder in ("experiments", "pkg"):
        (tmp_path / folder).mkdir()
    kept = [tmp_path / "pkg" / f"m{number}.py" for number in range(5)]
    for path in [*kept, *(tmp_path / "experiments" / f"e{number}.py" for number in range(5))]:
        path.write_text("x = 1\n")
    monkeypatch.chdir(tmp_path)
    made = _spied(monkeypatch, os.path, "abspath")
    assert collect_files(["."], excluded_by(Settings(), Overrides())).files == [path.relative_to(tmp_path) for path in kept]
    absolute = [os.path.abspath(arguments[0]) for arguments in list(made)]
    assert [absolute.count(str(path)) for path in kept] == [1] * len(kept)


def test_a_warm_run_resolves_each_module_file_once_whichever_folders_import_it(tmp_path, monkeypatch):
    """Outside a work tree each folder is its own project, so a module imported from several
    folders is placed in each of their projects; where its links lead is read once, and each
    folder above it once (a realpath reads them all again)."""
    tree = tmp_path / "tree"
    for folder in ("pkg", "a", "b", "c"):
        (tree / folder).mkdir(parents=True)
    (tree / "pkg" / "__init__.py").write_text("")
    (tree / "pkg" / "rdrop_loss.py").write_text(HELPER)
    (tree / "train.py").write_text(TRAIN.replace("from rdrop_loss import", "from pkg.rdrop_loss import"))
    for folder in ("a", "b", "c"):
        (tree / folder / "train.py").write_text(TRAIN.replace("from rdrop_loss import", "from ..pkg.rdrop_loss import"))
    cache = ReportCache(tmp_path / "cache", secret=SECRET)
    cold = check_paths([tree], cache=cache, jobs=1).reports
    assert {os.path.relpath(report.path, tree): [f.code for f in report.findings] for report in cold}["train.py"] == ["GF001"]
    looked_at = _spied(monkeypatch, os, "lstat")
    assert check_paths([tree], cache=cache, jobs=1).reports == cold
    module = str(tree / "pkg" / "rdrop_loss.py")
    assert [os.fspath(arguments[0]) for arguments in looked_at].count(module) == 1
    assert [os.fspath(arguments[0]) for arguments in looked_at].count(str(tmp_path)) <= 1


def test_the_rules_of_a_folder_s_files_are_chosen_once_unless_per_file_ignores_choose_them(tmp_path, monkeypatch):
    """Settings without per-file-ignores give all their files the same rules: chosen once, not for
    each file; a table with per-file-ignores still chooses them for each of its files."""
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "ignoring").mkdir()
    for number in range(10):
        (repo / f"script_{number}.py").write_text(DOUBLE)
    code = check_paths([repo / "script_0.py"], jobs=1).reports[0].findings[0].code
    (repo / "ignoring" / "pyproject.toml").write_text(f'[tool.gradfix.per-file-ignores]\n"x*.py" = ["{code}"]\n')
    for name in ("x.py", "y.py"):
        (repo / "ignoring" / name).write_text(DOUBLE)
    chosen = _spied(monkeypatch, run_module, "configured_rules_and_mode")
    reports = check_paths([repo], jobs=1).reports
    assert {os.path.relpath(report.path, repo): [f.code for f in report.findings] for report in reports} == {
        **{f"script_{number}.py": [code] for number in range(10)},
        "ignoring/x.py": [],
        "ignoring/y.py": [code],
    }
    assert len(chosen) == 1 + 2


def test_a_run_looks_up_the_settings_of_each_folder_once_not_of_each_file(tmp_path, monkeypatch):
    """A folder's settings are looked up (its path made absolute) once by each part of the run that
    asks, not once for each of its files."""
    repo = _package_of_modules(tmp_path, 5)
    cache = ReportCache(tmp_path / "cache", secret=SECRET)
    cold = check_paths([repo], cache=cache, jobs=1).reports
    looked_up = _spied(monkeypatch, Settings, "in_folder")
    assert check_paths([repo], cache=cache, jobs=1).reports == cold
    asked = [os.path.relpath(os.path.abspath(arguments[1]), repo) for arguments in looked_up]
    assert {folder: asked.count(folder) for folder in asked} == {".": 3, "pkg": 3}  # (by the walk, the run and the imports' roots)
