"""One project, one answer (``codemods.project``): the modules of the project a file imports are read
from disk, so a file's findings and fixes do not depend on which other files a run names."""

import os
from pathlib import Path

import pytest
from click.testing import Result
from typer.testing import CliRunner

from gradfix.cli.app import app

from gradfix.codemods import check
from gradfix.codemods.cache import ReportCache
from gradfix.codemods.check import check_file, module_exports
from gradfix.codemods.project import ModuleSummaries, ProjectModules, WrittenModule, written_modules
from gradfix.codemods.registry import all_rules
from gradfix.codemods.report import FileReport, FixMode
from gradfix.codemods import run
from gradfix.codemods.run import check_files

from .conftest import FIXTURES

SHARED = Path(__file__).resolve().parents[2] / "shared"
CASE = FIXTURES / "gf001_duplicate_backward" / "unsafe_loss_helper_in_its_own_module"
# A helper that backwards the loss it returns, and a training step that backwards it again.
HELPER = (CASE / "rdrop_loss.py").read_text()
TRAIN = (CASE / "before.py").read_text()
FIXED = (CASE / "after.py").read_text()


def gradfix(*args: str, cwd: Path, stdin: str | None = None) -> Result:
    """The command line, in this process, from ``cwd``."""
    previous = os.getcwd()
    os.chdir(cwd)
    try:
        return CliRunner().invoke(app, list(args), input=stdin)
    finally:
        os.chdir(previous)


@pytest.fixture
def tree(tmp_path):
    """A work tree holding the helper and the training script."""
    (tmp_path / ".git").mkdir()
    (tmp_path / "rdrop_loss.py").write_text(HELPER)
    (tmp_path / "train.py").write_text(TRAIN)
    return tmp_path


def test_the_helper_is_read_whether_the_run_names_it_or_not(tree):
    """The issue's repro: the file alone, the tree, stdin under the file's name and a shard of one
    all say GF001 (its fix unsafe: the helper's walk cannot tell what its graph saved)."""
    expected = "train.py:23:5: GF001"
    runs = [
        gradfix("check", "--no-cache", "train.py", cwd=tree),
        gradfix("check", "--no-cache", ".", cwd=tree),
        gradfix("check", "--no-cache", "--stdin-filename", "train.py", "-", cwd=tree, stdin=TRAIN),
        gradfix("check", "--no-cache", "--shard", "1/2", "train.py", "rdrop_loss.py", cwd=tree),
        gradfix("check", "--no-cache", "--shard", "2/2", "train.py", "rdrop_loss.py", cwd=tree),
    ]
    said = [run.stdout for run in runs]
    assert all(expected in out and "[unsafe fix]" in out for out in said[:3]), said
    assert sum(expected in out for out in said[3:]) == 1, said  # the shard that holds train.py
    assert gradfix("fix", "--no-cache", "--unsafe-fixes", "train.py", cwd=tree).exit_code == 0
    assert (tree / "train.py").read_text() == FIXED


def test_without_the_helper_on_disk_there_is_no_finding(tree):
    """The variant that hides the fact: the helper's module is not in the project (it could be an
    installed package), so its call is code gradfix did not read."""
    (tree / "rdrop_loss.py").unlink()
    assert check_file(tree / "train.py", all_rules()).findings == []


def test_a_module_outside_the_work_tree_is_not_read(tmp_path):
    (tmp_path / "rdrop_loss.py").write_text(HELPER)  # above the work tree's top
    (tmp_path / "repo" / ".git").mkdir(parents=True)
    (tmp_path / "repo" / "train.py").write_text(TRAIN)
    assert check_file(tmp_path / "repo" / "train.py", all_rules()).findings == []


def test_a_link_out_of_the_work_tree_is_not_followed(tmp_path):
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "rdrop_loss.py").write_text(HELPER)
    (tmp_path / "repo" / ".git").mkdir(parents=True)
    (tmp_path / "repo" / "train.py").write_text(TRAIN)
    (tmp_path / "repo" / "rdrop_loss.py").symlink_to(tmp_path / "elsewhere" / "rdrop_loss.py")
    assert check_file(tmp_path / "repo" / "train.py", all_rules()).findings == []


def test_a_module_that_is_no_regular_file_is_never_read(tree):
    """A FIFO would block the read for ever: it is no module."""
    (tree / "rdrop_loss.py").unlink()
    os.mkfifo(tree / "rdrop_loss.py")
    assert check_file(tree / "train.py", all_rules()).findings == []


def test_installed_packages_inside_the_tree_are_not_the_project(tree):
    (tree / "rdrop_loss.py").unlink()
    site = tree / ".venv" / "lib" / "site-packages"
    site.mkdir(parents=True)
    (site / "rdrop_loss.py").write_text(HELPER)
    (tree / "pyproject.toml").write_text('[tool.gradfix]\nsrc = [".venv/lib/site-packages"]\n')
    assert check_file(tree / "train.py", all_rules()).findings == []


def test_the_source_roots_of_the_settings_find_absolute_imports(tree):
    """``src = ["lib"]``: a script in scripts/ imports a module kept in lib/."""
    (tree / "lib").mkdir()
    (tree / "rdrop_loss.py").rename(tree / "lib" / "rdrop_loss.py")
    (tree / "scripts").mkdir()
    (tree / "train.py").rename(tree / "scripts" / "train.py")
    assert check_file(tree / "scripts" / "train.py", all_rules()).findings == []  # not on the default roots
    (tree / "pyproject.toml").write_text('[tool.gradfix]\nsrc = ["lib"]\n')
    assert [f.code for f in check_file(tree / "scripts" / "train.py", all_rules()).findings] == ["GF001"]


@pytest.mark.parametrize(
    ("files", "statement", "prefix", "module"),
    [
        ({"pkg/__init__.py": "", "pkg/steps.py": HELPER}, "from .steps import rdrop_criterion", "steps", "pkg/steps.py"),
        ({"pkg/__init__.py": "", "pkg/steps.py": HELPER}, "from . import steps", "steps", "pkg/steps.py"),
        ({"pkg/__init__.py": HELPER}, "from . import rdrop_criterion", "", "pkg/__init__.py"),
        ({"pkg/__init__.py": "", "common/steps.py": HELPER}, "from ..common.steps import rdrop_criterion", "common.steps", "common/steps.py"),
        ({"pkg/__init__.py": "", "pkg/steps.py": HELPER}, "from pkg.steps import rdrop_criterion", "pkg.steps", "pkg/steps.py"),
        ({"pkg/__init__.py": "", "pkg/steps.py": HELPER}, "import pkg.steps as steps", "pkg.steps", "pkg/steps.py"),
        (
            {"pkg/__init__.py": "", "pkg/steps/__init__.py": HELPER},
            "from pkg.steps import (\n    rdrop_criterion,\n)",
            "pkg.steps",
            "pkg/steps/__init__.py",
        ),
        (
            {"pkg/__init__.py": "", "pkg/steps.py": HELPER},
            "try:\n    from .steps import rdrop_criterion\nexcept ImportError:\n    pass",
            "steps",
            "pkg/steps.py",
        ),
    ],
)
def test_an_import_finds_the_module_python_would(tmp_path, files, statement, prefix, module):
    (tmp_path / ".git").mkdir()
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    importer = tmp_path / "pkg" / "train.py"
    importer.write_text(statement + "\n")
    found = ProjectModules(ModuleSummaries(module_exports)).imported(importer, importer.read_bytes())
    assert (prefix, tmp_path / module) in found
    summaries = ProjectModules(ModuleSummaries(module_exports)).project_for(importer, importer.read_bytes())
    assert f"{prefix}.rdrop_criterion".lstrip(".") in summaries


# A correct training step whose loss comes from a project helper that does not backward, beside a
# module of the same name whose helper does (the generator of review h62): where gradfix cannot
# tell which file Python imports, it reads neither, and the step's own backward stays.
_TRAINS = (
    "from losses import compute\nimport torch\nmodel = torch.nn.Linear(2, 1)\nloss = compute(model, torch.ones(2), torch.zeros(1))\nloss.backward()\n"
)
_KEEPS = "import torch.nn.functional as F\ndef compute(model, x, y):\n    return F.mse_loss(model(x), y)\n"
_BACKWARDS = "import torch.nn.functional as F\ndef compute(model, x, y):\n    loss = F.mse_loss(model(x), y)\n    loss.backward()\n    return loss\n"


@pytest.mark.parametrize(
    ("files", "script", "safe_drop"),
    [
        # Run as `python -m proj.train` it imports ./losses.py; as `python proj/train.py`, proj/losses.py.
        ({"losses.py": _KEEPS, "proj/__init__.py": "", "proj/losses.py": _BACKWARDS}, "proj/train.py", False),
        ({"proj/__init__.py": "", "proj/losses.py": _BACKWARDS}, "proj/train.py", True),
        # Python's finder takes the package before the module of the same name.
        ({"losses/__init__.py": _KEEPS, "losses.py": _BACKWARDS}, "train.py", False),
        ({"losses.py": _BACKWARDS}, "train.py", True),
        # An extension module before the `.py`: its code is not read.
        ({"losses.cpython-311-x86_64-linux-gnu.so": "", "losses.py": _BACKWARDS}, "train.py", False),
    ],
)
def test_a_module_is_read_only_where_it_is_the_one_python_imports(tmp_path, files, script, safe_drop):
    (tmp_path / ".git").mkdir()
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    (tmp_path / script).write_text(_TRAINS)
    report = check_file(tmp_path / script, all_rules(), FixMode.SAFE)
    assert (report.rewritten is not None) is safe_drop


@pytest.mark.parametrize("edit", ["sys.path.insert(0, 'lib')", "sys.path += ['lib']", "sys.path[:0] = ['lib']", "site.addsitedir('lib')"])
def test_a_file_that_changes_where_python_looks_reads_only_its_relative_imports(tmp_path, edit):
    (tmp_path / ".git").mkdir()
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "losses.py").write_text(_KEEPS)
    (tmp_path / "losses.py").write_text(_BACKWARDS)
    (tmp_path / "train.py").write_text(f"import site, sys\n{edit}\n" + _TRAINS)
    assert check_file(tmp_path / "train.py", all_rules(), FixMode.SAFE).rewritten is None
    # The variant: it only reads the search path; the helper beside it is the one imported.
    (tmp_path / "train.py").write_text("import sys\nprint(sys.path == ['lib'])\n" + _TRAINS)
    assert check_file(tmp_path / "train.py", all_rules(), FixMode.SAFE).rewritten is not None


def test_the_scan_reads_every_form_of_import_statement():
    code = b"import a.b as c, d\nfrom .e import (f,\n  g)\nif x:\n    from ..h import i; y = 1\nfrom . import j  # k\nprint('import')\n"
    assert set(written_modules(code)) == {
        WrittenModule(0, "a"),
        WrittenModule(0, "a.b"),
        WrittenModule(0, "d"),
        WrittenModule(1, "e"),
        WrittenModule(1, "e.f"),
        WrittenModule(1, "e.g"),
        WrittenModule(2, "h"),
        WrittenModule(2, "h.i"),
        WrittenModule(1, ""),
        WrittenModule(1, "j"),
    }


def test_a_name_two_imports_could_mean_is_left_out(tmp_path):
    (tmp_path / ".git").mkdir()
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "steps.py").write_text(HELPER)
    (tmp_path / "steps.py").write_text(HELPER.replace("    loss.backward()\n", "    loss.backward(retain_graph=True)\n"))
    importer = tmp_path / "pkg" / "train.py"
    importer.write_text("from .steps import rdrop_criterion\nfrom ..steps import rdrop_criterion\n")
    assert ProjectModules(ModuleSummaries(module_exports)).project_for(importer, importer.read_bytes()) == {}


def test_module_summaries_are_computed_once_and_kept_in_the_cache(tree, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tree / "user-cache"))
    computed = []
    module_exports = check.module_exports
    monkeypatch.setattr(check, "module_exports", lambda data: computed.append(data) or module_exports(data))
    cache = ReportCache(tree / "cache")
    files = [tree / "train.py", tree / "rdrop_loss.py"]
    first = check_files(files, all_rules(), FixMode.NONE, 1, cache)
    assert len(computed) == 1 and [f.code for f in first[0].findings] == ["GF001"]
    (tree / "train.py").write_text(TRAIN + "\n")  # the script changes, the helper does not
    assert [f.code for f in check_files(files, all_rules(), FixMode.NONE, 1, cache)[0].findings] == ["GF001"]
    assert len(computed) == 1
    # An entry edited by someone else is not trusted: the summaries are computed again.
    for entry in (tree / "cache").rglob("*"):
        if entry.is_file() and entry.name != ".gitignore":
            entry.write_bytes(entry.read_bytes()[:-1] + b" ")
    check_files(files, all_rules(), FixMode.NONE, 1, cache)
    assert len(computed) == 2


def test_a_module_that_cannot_be_analysed_exports_nothing(tree):
    (tree / "rdrop_loss.py").write_text(HELPER + "\ndef broken(:\n")
    assert check_file(tree / "train.py", all_rules()).findings == []
    assert ModuleSummaries(module_exports).of(b"def broken(:\n    x.backward()\n") == {}


def _same_answer(script: Path, together: FileReport) -> None:
    """``script`` checked alone says what ``together`` (its report in a run of more files) says:
    the same findings, left and fixed, and the same rewrite, with every fix allowed."""
    alone = check_file(script, all_rules(), FixMode.UNSAFE)
    assert (alone.findings, alone.fixed, alone.rewritten) == (together.findings, together.fixed, together.rewritten), script


FIXTURES_WITH_SIBLINGS = sorted(
    script
    for script in FIXTURES.rglob("*.py")
    if script.name in ("before.py", "ok.py", "reported.py")
    and any(p.stem not in ("before", "after", "ok", "reported") for p in script.parent.glob("*.py"))
)


def test_some_fixtures_have_sibling_modules():
    assert FIXTURES_WITH_SIBLINGS


@pytest.mark.parametrize("script", FIXTURES_WITH_SIBLINGS, ids=lambda p: p.parent.name)
def test_a_fixture_with_sibling_modules_gets_one_answer(script):
    siblings = sorted(script.parent.glob("*.py"))
    _same_answer(script, check_files(siblings, all_rules(), FixMode.UNSAFE, 1)[siblings.index(script)])


def _real_failures() -> list[Path]:
    return sorted((SHARED / "real-failures").glob("*/cases/*/before.py")) if SHARED.is_dir() else []


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared (the real failures) is not beside the repository")
def test_every_real_failure_gets_one_answer_alone_and_with_the_whole_set():
    scripts = _real_failures()
    assert len(scripts) >= 50
    every = sorted(p for script in scripts for p in script.parent.glob("*.py"))
    together = dict(zip(every, check_files(every, all_rules(), FixMode.UNSAFE)))
    for script in scripts:
        _same_answer(script, together[script])


def test_a_run_computes_a_module_s_summaries_once_for_all_that_import_it(tree, monkeypatch):
    (tree / "other.py").write_text(TRAIN)
    computed = []
    learn = ModuleSummaries.learn
    monkeypatch.setattr(ModuleSummaries, "learn", lambda self, data, exports: computed.append(data) or learn(self, data, exports))
    reports = check_files([tree / "train.py", tree / "other.py", tree / "rdrop_loss.py"], all_rules(), FixMode.NONE, 1)
    assert [[f.code for f in r.findings] for r in reports] == [["GF001"], ["GF001"], []]
    assert computed == [HELPER.encode()]


def test_a_helper_that_backwards_only_sometimes_licenses_no_fix(tree):
    """The helper's backward must run at every call for the second one to be removed: under a test
    decided at run time (a may, not a must) there is no safe fix, in the module or beside it."""
    (tree / "rdrop_loss.py").write_text(
        HELPER.replace("import torch.nn.functional as F", "import torch\nimport torch.nn.functional as F").replace(
            "    loss.backward()\n", "    if torch.rand(()) > 0.5:\n        loss.backward()\n"
        )
    )
    report = check_file(tree / "train.py", all_rules(), FixMode.UNSAFE)
    assert report.rewritten is None and not report.fixed


def _analyses_counted(monkeypatch) -> list[bool]:
    """Whether each analysis the run makes is given a project, in order."""
    made: list[bool] = []
    analyse = check.FileAnalysis.__init__
    monkeypatch.setattr(
        check.FileAnalysis,
        "__init__",
        lambda self, module, imported=None, *rest: made.append(bool(imported)) or analyse(self, module, imported, *rest),
    )
    return made


@pytest.mark.parametrize(
    "settings",
    [
        "# the training step calls loss.backward() itself\nLR = 0.1\n",
        HELPER,  # its criterion, which train.py never calls (nor names)
    ],
)
def test_a_module_the_run_checks_is_analysed_once_when_it_calls_nothing_its_imports_export(tmp_path, monkeypatch, settings):
    """train.py is a module (main.py imports it) whose own import, settings.py, must be analysed
    first; train.py calls nothing settings.py exports, so the analysis that found train.py's
    exports made its report too (the skeleton's, and LibCST's tree's for its finding)."""
    (tmp_path / ".git").mkdir()
    (tmp_path / "settings.py").write_text(settings)
    (tmp_path / "train.py").write_text(
        "import settings\n" + (FIXTURES / "gf001_duplicate_backward" / "module_level_no_loop" / "before.py").read_text()
    )
    (tmp_path / "main.py").write_text("import train\n")
    made = _analyses_counted(monkeypatch)
    reports = check_files([tmp_path / "train.py", tmp_path / "main.py", tmp_path / "settings.py"], all_rules(), FixMode.NONE, 1)
    assert [[f.code for f in r.findings] for r in reports] == [["GF001"], [], []]
    assert made == [False, False, False]


def test_a_module_the_run_checks_is_analysed_again_with_the_exports_it_imports(tree, monkeypatch):
    """The variant: train.py's finding rests on rdrop_loss.py's exports, which are computed beside
    train.py's own: its first analysis (with none) is not its report."""
    (tree / "main.py").write_text("import train\n")
    made = _analyses_counted(monkeypatch)
    reports = check_files([tree / "train.py", tree / "main.py", tree / "rdrop_loss.py"], all_rules(), FixMode.NONE, 1)
    assert [[f.code for f in r.findings] for r in reports] == [["GF001"], [], []]
    assert made == [False, False, True, True]  # rdrop_loss.py, train.py alone; train.py with rdrop_loss's exports (skeleton, LibCST's tree)


def test_a_cold_run_checks_what_cannot_backward_while_it_finds_imports(tree, monkeypatch):
    """In a cold run, a file whose own text cannot backward is checked (its syntax) before the
    project's imports are known; where it calls a helper of the project that backwards, it is
    analysed like the others."""
    (tree / "notes.py").write_text("STEPS = 3\n")
    (tree / "eval.py").write_text("from rdrop_loss import rdrop_criterion\nloss = rdrop_criterion(None, None, None)\n")
    analysed = []
    checking = run._check_files_job
    monkeypatch.setattr(run, "_check_files_job", lambda work, **kwargs: analysed.extend(path.name for path, _, _ in work) or checking(work, **kwargs))
    files = [tree / name for name in ("train.py", "notes.py", "eval.py", "rdrop_loss.py")]
    reports = check_files(files, all_rules(), FixMode.NONE, 1)
    assert [[f.code for f in r.findings] for r in reports] == [["GF001"], [], [], []]
    assert [r.prefiltered for r in reports] == [False, True, False, False]
    assert sorted(analysed) == ["eval.py", "train.py"]  # notes.py was answered before; rdrop_loss.py beside its exports
