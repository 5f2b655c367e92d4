"""What a command imports is what it needs: a check answered from the cache (pre-commit on a staged file
checked before, an editor saving a file) reads no file gradfix must parse, so it loads neither LibCST nor
what only other commands use (the process pool of a run over many files, the HTTP client of ``pr``,
the package metadata a rule page's link reads). Start-up
time is measured in benchmarks/check_speed.py; this holds which modules it is spent on."""

import json
import os
import subprocess
import sys

NOT_FOR_A_CACHED_CHECK = [
    "libcst",  # no file is parsed
    "concurrent.futures.process",  # one file is checked in the process
    "multiprocessing",
    "ctypes",
    "gradfix.cli.github_http",  # the pr command's HTTP client: urllib.request brings http.client and ssl
    "urllib.request",
    "http.client",
    "ssl",
    "importlib.metadata",  # brings email and zipfile
    "subprocess",  # git is asked only by a folder's walk
    "tomllib",  # no pyproject.toml to read
    "secrets",  # the cache's secret is made by the first run alone
    "pydantic",  # typer 0.29 builds a pydantic validator for every option
    "rich._emoji_codes",  # gradfix prints no emoji codes
    "rich.table",  # for the commands that print a table
    "gradfix.cli.pr_command",  # another command's module: read only when that command runs
    "gradfix.cli.run_commands",
    "gradfix.cli.rule_commands",
    "gradfix.cli.server_command",
    "gradfix.codemods.execution",  # the runner, whose options are verify's and diagnose's
    "gradfix.cli.pull_request",
]

_MODULES_AFTER = (
    "import json, sys\n"
    "sys.argv = ['gradfix', *sys.argv[1:]]\n"
    "from gradfix.cli import main\n"
    "try:\n    main()\nexcept SystemExit as exit_:\n    code = exit_.code\n"
    "print(json.dumps({'exit': code, 'modules': sorted(sys.modules)}))\n"
)


def _modules_loaded_by(tmp_path, *arguments: str) -> tuple[int, set[str]]:
    cached = {key: value for key, value in os.environ.items() if key != "GRADFIX_NO_CACHE"}  # conftest's
    run = subprocess.run([sys.executable, "-c", _MODULES_AFTER, *arguments], cwd=tmp_path, env=cached, capture_output=True, text=True, check=True)
    shown = json.loads(run.stdout.splitlines()[-1])
    return shown["exit"], set(shown["modules"])


def test_a_check_answered_from_the_cache_imports_only_what_it_needs(tmp_path):
    (tmp_path / "train.py").write_text("import torch\n\nloss = torch.ones(2, requires_grad=True).sum()\nloss.backward()\n")
    first_exit, first = _modules_loaded_by(tmp_path, "check", "train.py")
    assert first_exit == 0 and "libcst" in first  # the first check parses the file and fills the cache
    cached_exit, cached = _modules_loaded_by(tmp_path, "check", "train.py")
    assert cached_exit == 0
    assert [module for module in NOT_FOR_A_CACHED_CHECK if module in cached] == []


def test_a_check_with_findings_answered_from_the_cache_imports_only_what_it_needs(tmp_path):
    (tmp_path / "train.py").write_text(
        "import torch\n\nw = torch.ones(2, requires_grad=True)\nloss = (w * 2).sum()\nloss.backward()\nloss.backward()\n"
    )
    first_exit, _ = _modules_loaded_by(tmp_path, "check", "train.py")
    cached_exit, cached = _modules_loaded_by(tmp_path, "check", "train.py")
    assert first_exit == cached_exit == 1
    assert [module for module in NOT_FOR_A_CACHED_CHECK if module in cached] == []
