"""gradfix as users install it. The wheel, built offline from the files the build reads, holds the
command, the licence and the Python API's types, and runs from a fresh environment. The oldest
versions of the dependencies pyproject.toml declares run the commands as the versions the tests
run with do (``python -m pytest -m network``: they come from the package registry)."""

import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

import gradfix

from .conftest import FIXTURES

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
DOUBLE = FIXTURES / "gf002_separate_backwards" / "shared_trunk_for_loop"
# A run over this many files draws a progress bar in a terminal (cli.options._PROGRESS_MIN_FILES).
MANY_FILES = 25


def environment(folder: Path, *options: str) -> Path:
    """A new virtual environment; its Python."""
    subprocess.run([sys.executable, "-m", "venv", *options, str(folder)], check=True)
    return folder / "bin" / "python"


@pytest.fixture(scope="module")
def fresh(tmp_path_factory) -> Path:
    """A fresh environment that sees the interpreter's own packages (the dependencies, pip and
    setuptools: nothing is downloaded) and none of its own but gradfix. Its Python."""
    return environment(tmp_path_factory.mktemp("fresh") / "venv", "--system-site-packages", "--without-pip")


@pytest.fixture(scope="module")
def wheel(fresh, tmp_path_factory) -> Path:
    """gradfix's wheel, built as pip builds it from a copy of what the build reads (the tree is left
    as it was), by the setuptools the interpreter has, offline."""
    sources = tmp_path_factory.mktemp("sources")
    for name in ("pyproject.toml", "README.md", *PYPROJECT["project"]["license-files"]):
        shutil.copy(ROOT / name, sources / name)
    for folder in {Path(path).parts[0] for path in PYPROJECT["tool"]["setuptools"]["package-dir"].values()}:
        shutil.copytree(ROOT / folder, sources / folder, ignore=shutil.ignore_patterns("__pycache__"))
    built = tmp_path_factory.mktemp("wheel")
    pip = [str(fresh), "-m", "pip", "--disable-pip-version-check"]
    subprocess.run([*pip, "wheel", "--quiet", "--no-deps", "--no-index", "--no-build-isolation", "-w", built, sources], check=True)
    [found] = built.glob("gradfix-*.whl")
    return found


def test_the_wheel_holds_the_licence_the_types_and_the_version(wheel):
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        info = f"gradfix-{gradfix.__version__}.dist-info"
        metadata = archive.read(f"{info}/METADATA").decode()
        licence = archive.read(f"{info}/licenses/LICENSE").decode()
    assert "gradfix/py.typed" in names
    assert f"\nVersion: {gradfix.__version__}\n" in metadata
    assert f"\nLicense-Expression: {PYPROJECT['project']['license']}\n" in metadata
    assert licence == (ROOT / "LICENSE").read_text(encoding="utf-8") and licence.startswith("MIT License\n")


def test_the_command_and_the_typed_api_work_from_the_wheel_in_a_fresh_environment(wheel, fresh, tmp_path):
    pip = [str(fresh), "-m", "pip", "--disable-pip-version-check"]
    subprocess.run([*pip, "install", "--quiet", "--no-deps", "--no-index", wheel], check=True)
    command = fresh.parent / "gradfix"
    (tmp_path / "train.py").write_text((DOUBLE / "before.py").read_text())
    imported = subprocess.run([fresh, "-c", "import gradfix; print(gradfix.__file__)"], capture_output=True, text=True, cwd=tmp_path)
    assert Path(imported.stdout.strip()).is_relative_to(fresh.parents[1]), "gradfix was not imported from the wheel"

    version = subprocess.run([command, "--version"], capture_output=True, text=True, cwd=tmp_path)
    assert (version.returncode, version.stdout) == (0, f"gradfix {gradfix.__version__}\n")
    checked = subprocess.run([command, "check", "train.py"], capture_output=True, text=True, cwd=tmp_path)
    assert checked.returncode == 1 and checked.stdout.startswith("train.py:19:5: GF002 "), checked.stderr

    # A type checker reads the API's annotations (py.typed), through the names imported on first use.
    (tmp_path / "user.py").write_text("import gradfix\n\nresult = gradfix.check(b'x = 1\\n')\nreveal_type(result)\ngradfix.fix(1)\n")
    typed = subprocess.run([fresh, "-m", "mypy", "user.py"], capture_output=True, text=True, cwd=tmp_path)
    assert 'user.py:4: note: Revealed type is "gradfix.codemods.api.Result[bytes]"' in typed.stdout, typed.stdout
    assert 'user.py:5: error: Value of type variable "Source" of "fix" cannot be "int"' in typed.stdout, typed.stdout


def test_the_version_names_the_release_it_is_or_leads_to():
    """The version of a released commit is its release's; after it, while the changelog gathers
    unreleased changes, a development release of the next one (``0.2.0.dev0``)."""
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    sections = re.split(r"^## \[([^\]]+)\].*\n", changelog, flags=re.MULTILINE)
    headings, bodies = sections[1::2], sections[2::2]
    assert headings[0] == "Unreleased"
    version, released = Version(gradfix.__version__), Version(headings[1])
    if bodies[0].strip():
        assert version.is_devrelease and Version(version.base_version) > released
    else:
        assert version == released


def _floors() -> list[Requirement]:
    """The runtime dependencies at the lowest versions pyproject.toml accepts."""
    floors = []
    for declared in PYPROJECT["project"]["dependencies"]:
        requirement = Requirement(declared)
        [lowest] = [spec.version for spec in requirement.specifier if spec.operator == ">="]
        floors.append(Requirement(f"{requirement.name}=={lowest}"))
    return floors


def _in_a_terminal(command: list, cwd: Path) -> tuple[int, str]:
    """The exit code and output (ANSI styles left out) of a command whose stdout and stderr are a
    terminal, as a user's are: a long run's progress bar and coloured diffs are drawn."""
    leader, follower = os.openpty()
    process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=follower, stderr=follower, cwd=cwd, env={**os.environ, "COLUMNS": "200"})
    os.close(follower)
    output = bytearray()
    while True:
        try:
            chunk = os.read(leader, 1 << 16)
        except OSError:  # EIO: the command's end closed the terminal's last follower
            break
        if not chunk:
            break
        output += chunk
    os.close(leader)
    return process.wait(), re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", output.decode()).replace("\r\n", "\n")


@pytest.mark.network
def test_the_lowest_declared_dependencies_run_the_commands_as_the_tested_ones_do(wheel, tmp_path):
    floors = _floors()
    python = environment(tmp_path / "venv")  # nothing of the interpreter's: the registry's packages only
    subprocess.run([python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", wheel, *map(str, floors)], check=True)
    listed = subprocess.run(
        [python, "-c", "import sys, importlib.metadata as m; print(*map(m.version, sys.argv[1:]))", *(floor.name for floor in floors)],
        capture_output=True,
        text=True,
        check=True,
    )
    installed = listed.stdout.split()
    assert all(floor.specifier.contains(version) for floor, version in zip(floors, installed, strict=True)), installed

    work = tmp_path / "work"
    (work / "many").mkdir(parents=True)
    (work / "train.py").write_text((DOUBLE / "before.py").read_text())
    for n in range(MANY_FILES):
        (work / "many" / f"train_{n:02}.py").write_text((DOUBLE / "before.py").read_text())
    lowest, tested = [python.parent / "gradfix"], [sys.executable, "-m", "gradfix"]
    for arguments in (["--version"], ["check", "train.py"], ["fix", "--diff", "train.py"], ["explain", "GF001"], ["rules"], ["check", "nowhere.py"]):
        old, new = (subprocess.run([*command, *arguments], capture_output=True, text=True, cwd=work) for command in (lowest, tested))
        assert (old.returncode, old.stdout, old.stderr) == (new.returncode, new.stdout, new.stderr), arguments
    assert (work / "train.py").read_text() == (DOUBLE / "before.py").read_text()

    checked_status, checked = _in_a_terminal([*lowest, "check", "many"], work)
    assert checked_status == 1 and checked.count(": GF002 ") == MANY_FILES, checked
    diff_status, diff = _in_a_terminal([*lowest, "fix", "--diff", "train.py"], work)
    assert diff_status == 1 and "+    (loss_reg + loss_cls).backward()\n" in diff, diff
