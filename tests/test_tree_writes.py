"""Where a fix may write, and what a write leaves: no write through a link out of the folder walked
or out of the project, none over a read-only file, no temporary file left by a write that was
stopped, and one a killed run left is removed by the next; the Action's list of changed files is
unambiguous whatever the names."""

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gradfix.cli.app import app
from gradfix.codemods import files
from gradfix.codemods.files import FileChanged, OutsideRoot, sweep_stale_temporaries, write_atomically, write_fix

from .conftest import FIXTURES
from .test_pull_request import read_step_outputs

NOBODY = 65534
PAIR = FIXTURES / "gf002_separate_backwards" / "shared_trunk_for_loop"
BEFORE, AFTER = (PAIR / "before.py").read_bytes(), (PAIR / "after.py").read_bytes()


def cli(*args, env=None):
    return CliRunner().invoke(app, [*map(str, args[:1]), "--no-cache", *map(str, args[1:])], env=env)


def error_lines(result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("error: ")]


@pytest.fixture
def victim(tmp_path):
    """A file outside the tree that a link of the tree points to."""
    outside = tmp_path / "outside" / "victim.py"
    outside.parent.mkdir()
    outside.write_bytes(BEFORE)
    return outside


# links ----------------------------------------------------------------------------------------
def test_a_walk_skips_a_link_out_of_the_folder_named_and_says_so(tmp_path, victim, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tree").mkdir()
    (tmp_path / "tree" / "train.py").write_bytes(BEFORE)
    (tmp_path / "tree" / "model.py").symlink_to("../outside/victim.py")
    notice = f"warning: tree/model.py: a symbolic link out of tree (to {victim}): skipped"
    checked = cli("check", "tree")
    assert checked.exit_code == 1, checked.output
    assert {line.split(":")[0] for line in checked.stdout.splitlines()} == {"tree/train.py"}
    assert notice in checked.stderr
    fixed = cli("fix", "tree")
    assert fixed.exit_code == 0, fixed.output
    assert notice in fixed.stderr
    assert victim.read_bytes() == BEFORE and (tmp_path / "tree" / "train.py").read_bytes() == AFTER
    assert (tmp_path / "tree" / "model.py").is_symlink()


def test_a_walk_still_follows_a_link_that_stays_in_the_folder_named(tmp_path):
    (tmp_path / "tree" / "kept").mkdir(parents=True)
    (tmp_path / "tree" / "kept" / "train.md").write_bytes(BEFORE)  # not walked itself: not a .py
    (tmp_path / "tree" / "train.py").symlink_to("kept/train.md")
    result = cli("fix", tmp_path / "tree")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "tree" / "kept" / "train.md").read_bytes() == AFTER and "warning" not in result.stderr


def test_a_link_named_on_the_command_line_is_read_but_not_written_through_out_of_the_project(tmp_path, victim):
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    (project / "train.py").write_bytes(BEFORE)
    (project / "model.py").symlink_to("../outside/victim.py")
    checked = cli("check", project / "model.py")
    assert checked.exit_code == 1 and f"{project / 'model.py'}:" in checked.stdout, checked.output
    fixed = cli("fix", project / "model.py", project / "train.py")
    assert fixed.exit_code == 2, fixed.output
    assert error_lines(fixed) == [f"error: {project / 'model.py'}: a symbolic link out of {project} (to {victim}); not written"]
    assert f"{project / 'model.py'}:" in fixed.stdout  # its finding is still there
    assert victim.read_bytes() == BEFORE and (project / "train.py").read_bytes() == AFTER


def test_a_link_named_on_the_command_line_into_its_own_project_is_fixed(tmp_path):
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    (project / "src").mkdir()
    (project / "src" / "real.py").write_bytes(BEFORE)
    (project / "scripts").mkdir()
    (project / "scripts" / "train.py").symlink_to("../src/real.py")
    result = cli("fix", project / "scripts" / "train.py")
    assert result.exit_code == 0, result.output
    assert (project / "src" / "real.py").read_bytes() == AFTER and (project / "scripts" / "train.py").is_symlink()


def test_a_fix_is_not_written_through_a_link_out_of_its_root(tmp_path, victim):
    (tmp_path / "tree").mkdir()
    link = tmp_path / "tree" / "model.py"
    link.symlink_to(victim)
    with pytest.raises(OutsideRoot, match="a symbolic link out of"):
        write_fix(link, AFTER, BEFORE, tmp_path / "tree")
    assert victim.read_bytes() == BEFORE
    write_fix(link, AFTER, BEFORE, tmp_path)
    assert victim.read_bytes() == AFTER


# read-only files ------------------------------------------------------------------------------
@contextlib.contextmanager
def without_root():
    """The user a fix runs as, if not root: root may write any file (black and ruff write it
    too), so a test run as root checks and fixes as nobody, its imports made first."""
    if os.geteuid() != 0:
        yield
        return
    os.seteuid(NOBODY)
    try:
        yield
    finally:
        os.seteuid(0)


def test_a_file_the_user_may_not_write_is_an_error_of_its_own_and_the_others_are_fixed():
    folder = Path(tempfile.mkdtemp(prefix="gradfix-read-only-"))  # pytest's own is root's alone
    try:
        folder.chmod(0o777)
        writable, locked = folder / "train.py", folder / "locked.py"
        for script, mode in ((writable, 0o666), (locked, 0o444)):
            script.write_bytes(BEFORE)
            script.chmod(mode)
        assert cli("check", folder).exit_code == 1  # the imports a fix needs, made as root
        with without_root():
            result = cli("fix", folder)
        assert result.exit_code == 2, result.output
        assert error_lines(result) == [f"error: {locked}: read-only (no permission to write it); not written"]
        assert f"{locked}:" in result.stdout and "GF002" in result.stdout  # its finding is still there
        assert locked.read_bytes() == BEFORE and (locked.stat().st_mode & 0o777) == 0o444
        assert writable.read_bytes() == AFTER
        assert sorted(p.name for p in folder.iterdir()) == ["locked.py", "train.py"]
    finally:
        shutil.rmtree(folder)


# temporaries ----------------------------------------------------------------------------------
@pytest.fixture
def pids():
    """The pid of a process that has ended and that of one still running."""
    ended = subprocess.Popen([sys.executable, "-c", ""])
    ended.wait()
    running = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    yield ended.pid, running.pid
    running.stdin.close()
    running.wait()


def test_the_next_run_removes_the_temporaries_of_a_killed_write_and_only_those(tmp_path, pids):
    ended, running = pids
    (tmp_path / "train.py").write_bytes(BEFORE)
    stale = tmp_path / f".train.py.{ended}.k3x_9qaz.gradfix"
    under_way = tmp_path / f".train.py.{running}.p0m1n2b3.gradfix"
    older_kind = tmp_path / ".train.py.k3x_9qaz.gradfix"  # no pid: whose it is cannot be told
    link = tmp_path / f".helper.py.{ended}.aaaaaaaa.gradfix"
    folder = tmp_path / f".data.py.{ended}.bbbbbbbb.gradfix"
    # Where a link checked points is not a folder the run walks: what is there is not its to remove.
    elsewhere = tmp_path / "linked" / f".real.py.{ended}.cccccccc.gradfix"
    for path in (stale, under_way, older_kind, elsewhere):
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(b"half a fix")
    link.symlink_to(tmp_path / "train.py")
    folder.mkdir()
    (tmp_path / "linked" / "real.py").write_bytes(BEFORE)
    (tmp_path / "alias.py").symlink_to("linked/real.py")
    result = cli("fix", tmp_path / "train.py", tmp_path / "alias.py")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "train.py").read_bytes() == AFTER == (tmp_path / "linked" / "real.py").read_bytes()
    assert not stale.exists()
    assert all(p.exists() for p in (under_way, older_kind, link, folder, elsewhere))


def test_the_temporary_of_a_write_under_way_is_named_by_its_writer_and_never_swept(tmp_path, monkeypatch):
    target = tmp_path / "train.py"
    target.write_bytes(BEFORE)
    replace, seen = os.replace, []

    def sweep_then_replace(source, destination):
        sweep_stale_temporaries([target])  # another run, in the same folder, while this one writes
        seen.append(os.path.basename(source))
        replace(source, destination)

    monkeypatch.setattr(files.os, "replace", sweep_then_replace)
    write_atomically(target, AFTER)
    [name] = seen
    assert name.startswith(f".train.py.{os.getpid()}.") and name.endswith(".gradfix")
    assert target.read_bytes() == AFTER and [p.name for p in tmp_path.iterdir()] == ["train.py"]


def _interrupted_inside_mkstemp(monkeypatch):
    """A signal that arrives in mkstemp after it made the file, before its name is returned."""
    made = tempfile.mkstemp

    def mkstemp(*args, **kwargs):
        descriptor, _ = made(*args, **kwargs)
        os.close(descriptor)
        raise KeyboardInterrupt

    monkeypatch.setattr(files.tempfile, "mkstemp", mkstemp)


def _failing(owner, name, error):
    """``owner.name`` raising ``error``."""

    def install(monkeypatch):
        def fail(*args, **kwargs):
            raise error

        monkeypatch.setattr(owner, name, fail)

    return install


@pytest.mark.parametrize(
    ("stop", "raised", "hard_linked"),
    [
        (_interrupted_inside_mkstemp, KeyboardInterrupt, False),
        (_failing(files.os, "fsync", OSError(5, "Input/output error")), OSError, False),
        (_failing(files.os, "chown", OSError(5, "Input/output error")), OSError, False),
        (_failing(files, "_copy_extended_attributes", KeyboardInterrupt()), KeyboardInterrupt, False),
        (_failing(files.os, "chmod", OSError(28, "No space left on device")), OSError, False),
        (_failing(files.os, "replace", KeyboardInterrupt()), KeyboardInterrupt, False),
        (_failing(files, "_overwrite_in_place", OSError(28, "No space left on device")), OSError, True),
        (lambda monkeypatch: None, FileChanged, False),  # the file was edited since it was read
    ],
    ids=["inside-mkstemp", "fsync", "chown", "xattrs", "chmod", "replace", "in-place", "changed"],
)
def test_a_write_stopped_anywhere_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch, stop, raised, hard_linked):
    target = tmp_path / "train.py"
    target.write_bytes(BEFORE)
    if hard_linked:
        os.link(target, tmp_path / "copy.py")
    stop(monkeypatch)
    with pytest.raises(raised):
        write_atomically(target, AFTER, expected=BEFORE if raised is not FileChanged else b"as read\n")
    assert target.read_bytes() == BEFORE
    assert sorted(p.name for p in tmp_path.iterdir()) == (["copy.py", "train.py"] if hard_linked else ["train.py"])


# the Action's changed-files output --------------------------------------------------------------
def test_changed_files_quotes_a_name_that_holds_a_newline_as_git_does(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in ("a\nb.py", 'say "hi".py', "train.py"):
        (tmp_path / name).write_bytes(BEFORE)
    outputs = tmp_path / "github_output"
    outputs.write_text("")
    result = cli("fix", "--output-format", "github", ".", env={"GITHUB_OUTPUT": str(outputs), "GITHUB_STEP_SUMMARY": None})
    assert result.exit_code == 0, result.output
    assert read_step_outputs(outputs.read_text())["changed-files"].split("\n") == ['"a\\nb.py"', '"say \\"hi\\".py"', "train.py"]


def test_path_lines_writes_every_name_unambiguously():
    names = ["train.py", "a\nb.py", "tab\there.py", "back\\slash.py", "é.py", os.fsdecode(b"latin\xe9.py"), "bell\x07.py", "del\x7f.py"]
    assert files.path_lines(names).split("\n") == [
        "train.py",
        '"a\\nb.py"',
        '"tab\\there.py"',
        '"back\\\\slash.py"',
        "é.py",
        '"latin\\351.py"',
        '"bell\\a.py"',
        '"del\\177.py"',
    ]
