"""The composite action beyond its modes (tests/test_pull_request.py runs those): what it installs,
on which Python, and the inputs and outputs a workflow sees."""

import importlib.metadata
import itertools
import json
import os
import re
import shutil
import subprocess
import sys

import pytest
import yaml
from packaging.requirements import Requirement

from .conftest import FIXTURES
from .test_fix_verify import KEPT_AND_READ
from .test_pull_request import (  # noqa: F401 (runner_temp: a fixture)
    ACTION,
    INSTALL_STEP,
    PUSH,
    RECORDING_GRADFIX,
    REPOSITORY,
    ROOT,
    TOKEN,
    git,
    pull_request_from,
    read_step_outputs,
    run_action,
    runner_temp,
)

DOUBLE = (FIXTURES / "gf002_separate_backwards" / "shared_trunk_for_loop" / "before.py").read_text()
DOUBLE_FIXED = (FIXTURES / "gf002_separate_backwards" / "shared_trunk_for_loop" / "after.py").read_text()
LOCK = ROOT / "requirements" / "action.txt"


def install_step(tmp_path, environment):
    """The install step, as a runner runs it, with ``environment`` over the test's."""
    script = tmp_path / "install.sh"
    script.write_text(INSTALL_STEP["run"])
    env = {**os.environ, "RUNNER_TEMP": str(tmp_path), "GITHUB_ACTION_PATH": str(ROOT), **environment}
    return subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)], env=env, capture_output=True, text=True, timeout=60)


def test_the_install_step_refuses_a_python_older_than_3_11_before_installing_anything(tmp_path):
    old = tmp_path / "bin" / "python3"
    old.parent.mkdir()
    old.write_text('#!/bin/sh\nif [ "$1" = --version ]; then echo "Python 3.10.12"; exit 0; fi\nexit 1\n')
    old.chmod(0o755)
    done = install_step(tmp_path, {"PATH": f"{old.parent}:{os.environ['PATH']}", "RUNNER_OS": "Linux", "RUNNER_ARCH": "X64"})
    assert done.returncode == 2
    assert done.stderr == ("gradfix: needs Python 3.11 or newer as python3, found: Python 3.10.12 (run actions/setup-python before this action)\n")
    assert not (tmp_path / "gradfix-venv").exists()


def test_the_install_step_names_the_runners_it_supports(tmp_path):
    done = install_step(tmp_path, {"RUNNER_OS": "Windows", "RUNNER_ARCH": "X64"})
    assert done.returncode == 2
    assert done.stderr == "gradfix: the action runs on Linux (X64, ARM64) and macOS (ARM64) runners, not on Windows/X64\n"


@pytest.mark.parametrize(("verify", "seen"), [("false", []), ("true", ["--system-site-packages"])], ids=["alone", "verifying"])
def test_the_install_step_installs_the_locked_versions_by_hash_then_gradfix_from_nothing_but_its_checkout(tmp_path, verify, seen):
    # A python3 that records the venv it is asked for, whose venv's python records each pip call instead of installing.
    fake = tmp_path / "bin" / "python3"
    fake.parent.mkdir()
    fake.write_text(
        '#!/bin/bash\nif [[ "$1" == -m && "$2" == venv ]]; then venv="${@: -1}"; mkdir -p "$venv/bin"\n'
        'printf "%s\\0" "$@" >> "$RECORD"; echo >> "$RECORD"\n'
        'printf \'#!/bin/sh\\nprintf "%%s\\\\0" "$@" >> "%s"\\necho >> "%s"\\n\' "$RECORD" "$RECORD" > "$venv/bin/python"\n'
        f'chmod +x "$venv/bin/python"; exit 0; fi\nexec "{sys.executable}" "$@"\n'
    )
    fake.chmod(0o755)
    record = tmp_path / "python-calls"
    environment = {
        "PATH": f"{fake.parent}:{os.environ['PATH']}",
        "RUNNER_OS": "Linux",
        "RUNNER_ARCH": "ARM64",
        "RECORD": str(record),
        "GRADFIX_VERIFY": verify,  # the trust step's answer: the venv sees the workflow's torch only to run verify-command
    }
    done = install_step(tmp_path, environment)
    assert done.returncode == 0, done.stderr
    calls = [line.split("\0")[:-1] for line in record.read_text().splitlines()]
    common = ["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-input"]
    assert calls == [
        ["-m", "venv", *seen, f"{tmp_path}/gradfix-venv"],
        [*common, "--require-hashes", "--only-binary", ":all:", "--requirement", f"{ROOT}/requirements/action.txt"],
        [*common, "--no-deps", "--no-build-isolation", "--no-index", str(ROOT)],
    ]


def locked() -> dict[str, Requirement]:
    """requirements/action.txt: each requirement, with its hashes checked on the way."""
    entries = re.split(r"\n(?=\S)", "\n".join(line for line in LOCK.read_text().splitlines() if not line.startswith("#")).strip())
    requirements = {}
    for entry in entries:
        head, *hashes = [part.strip() for part in entry.split("\\")]
        requirement = Requirement(head)
        [specifier] = requirement.specifier
        assert specifier.operator == "==", f"{head}: not an exact version"
        assert hashes and all(re.fullmatch(r"--hash=sha256:[0-9a-f]{64}", h) for h in hashes), head
        requirements[requirement.name.lower().replace("_", "-")] = requirement
    return requirements


def test_the_lock_pins_every_dependency_of_gradfix_at_a_version_it_allows():
    pins = locked()
    dependencies = [Requirement(text) for text in importlib.metadata.requires("gradfix") if "extra ==" not in text]
    assert dependencies
    for dependency in dependencies:
        pinned = pins[dependency.name.lower()]
        version = next(iter(pinned.specifier)).version
        assert dependency.specifier.contains(version), f"{dependency} does not allow {pinned}"
    assert "setuptools" in pins  # builds gradfix without build isolation


def test_the_lock_pins_what_each_locked_package_needs_on_every_python_and_platform_it_serves():
    pins = locked()
    checked = 0
    for name, pin in pins.items():
        try:
            installed = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:  # (pyyaml-ft: Python 3.13's)
            continue
        if installed.version != next(iter(pin.specifier)).version:
            continue  # its requirements here are another version's
        for text in installed.requires or ():
            needed = Requirement(text)
            for python, platform in itertools.product(("3.11", "3.12", "3.13", "3.14"), ("linux", "darwin")):
                where = {
                    "python_version": python,
                    "python_full_version": f"{python}.0",
                    "sys_platform": platform,
                    "platform_system": {"linux": "Linux", "darwin": "Darwin"}[platform],
                    "extra": "",
                }
                if needed.marker is not None and not needed.marker.evaluate(where):
                    continue
                key = needed.name.lower().replace("_", "-")
                assert key in pins, f"{name} needs {needed} on Python {python} ({platform}): not in the lock"
                assert pins[key].marker is None or pins[key].marker.evaluate(where), f"{key} is locked only elsewhere"
                assert needed.specifier.contains(next(iter(pins[key].specifier)).version), f"{name} needs {needed}"
                checked += 1
    assert checked


def test_every_line_of_a_multi_line_paths_input_is_checked(tmp_path):
    runner_temp = tmp_path / "runner_temp"
    recorder = runner_temp / "gradfix-venv" / "bin" / "gradfix"
    recorder.parent.mkdir(parents=True)
    recorder.write_text(RECORDING_GRADFIX)
    recorder.chmod(0o755)
    done, _, _ = run_action(
        {"mode": "check", "paths": "src\ntests/unit  notebooks\n\n*.py\n"}, runner_temp, tmp_path, tmp_path, environment={"RECORDED_STATUS": "0"}
    )
    assert done.returncode == 0, done.stderr
    argv = (runner_temp / "argv").read_text().split("\0")[:-1]
    assert argv == ["check", "--output-format", "github", "--", "src", "tests/unit", "notebooks", "*.py"]


def test_fix_mode_lists_only_the_files_gradfix_changed(tmp_path, runner_temp):
    workspace = tmp_path / "workspace"
    git(tmp_path, "init", "--quiet", str(workspace))
    (workspace / "sub").mkdir()
    (workspace / "sub" / "train.py").write_text(DOUBLE)
    (workspace / "notes.py").write_text("x = 1\n")
    git(workspace, "add", ".")
    git(workspace, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "--quiet", "-m", "start")
    (workspace / "notes.py").write_text("x = 2  # an earlier step of the job changed this file\n")
    done, outputs, summary = run_action({"mode": "fix"}, runner_temp, workspace, tmp_path)
    assert done.returncode == 0, done.stderr
    assert outputs["changed-files"] == "sub/train.py" and outputs["findings"] == "0"
    assert (workspace / "sub" / "train.py").read_text() == DOUBLE_FIXED
    assert "gradfix fixed 1 finding(s) in 1 file(s)" in summary


def test_fix_mode_outside_a_git_repository_writes_whole_outputs(tmp_path, runner_temp):
    workspace = tmp_path / "plain"
    workspace.mkdir()
    (workspace / "train.py").write_text(DOUBLE)
    (workspace / "left.py").write_text((FIXTURES / "gf003_forward_outside_loop" / "input_rebound_in_loop" / "reported.py").read_text())
    done, outputs, _ = run_action({"mode": "fix"}, runner_temp, workspace, tmp_path)
    assert done.returncode == 0, done.stderr
    assert outputs["changed-files"] == "train.py" and outputs["findings"] == "1"
    written = read_step_outputs((tmp_path / "gradfix.outputs").read_text())
    assert set(written) == {"findings", "changed-files"}
    assert re.match(r"::error file=left\.py,line=\d+,col=\d+,title=GF003 forward_outside_loop::", done.stdout)


def test_check_mode_writes_sarif_for_code_scanning_and_fails_on_findings(tmp_path, runner_temp):
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "train.py").write_text(DOUBLE)
    done, outputs, _ = run_action({"mode": "check", "sarif-file": "gradfix.sarif"}, runner_temp, workspace, tmp_path)
    assert done.returncode == 1, done.stderr
    assert outputs["findings"] == "1" and done.stdout.startswith("::error file=train.py,line=19,col=5,")
    [run] = json.loads((workspace / "gradfix.sarif").read_text())["runs"]
    assert [(r["ruleId"], r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]) for r in run["results"]] == [("GF002", "train.py")]


# verify-command -------------------------------------------------------------------------------
# CMD of the tests: it notes the environment it got in the file it is given, then runs the training script.
NOTING_MAIN = """import os
import sys

with open(sys.argv[1], "w") as noted:
    noted.write("\\n".join(f"{name}={value}" for name, value in os.environ.items()))
import train
"""
OWN_CODE = {
    "push": PUSH,
    "schedule": {"github.event_name": "schedule"},
    "workflow_dispatch": {"github.event_name": "workflow_dispatch"},
    "own-pull-request": pull_request_from(REPOSITORY),
}
NOT_OWN_CODE = {
    "fork-pull-request": pull_request_from("mallory/net"),
    "deleted-fork-pull-request": pull_request_from(""),  # a fork deleted since: no head repository
    "pull_request_target": {"github.event_name": "pull_request_target", "github.event.pull_request.head.repo.full_name": REPOSITORY},
    "workflow_run": {"github.event_name": "workflow_run"},
    "issue_comment": {"github.event_name": "issue_comment"},
}
# What the runner's environment may hold that no code of the tree may see.
SECRETS = {
    "GITHUB_TOKEN": TOKEN,
    "INPUT_TOKEN": TOKEN,
    "ACTIONS_RUNTIME_TOKEN": "runtime-token-of-the-runner",
    "ACTIONS_ID_TOKEN_REQUEST_TOKEN": "oidc-request-token",
    "ACTIONS_ID_TOKEN_REQUEST_URL": "https://token.actions.example/oidc",
    "ACTIONS_CACHE_URL": "https://cache.actions.example/",
    "ACTIONS_RESULTS_URL": "https://results.actions.example/",
}


def recorded_run(tmp_path, inputs, event):
    """The action with a gradfix that records its arguments: its step, and the arguments."""
    runner_temp = tmp_path / "runner_temp"
    recorder = runner_temp / "gradfix-venv" / "bin" / "gradfix"
    recorder.parent.mkdir(parents=True)
    recorder.write_text(RECORDING_GRADFIX)
    recorder.chmod(0o755)
    done, _, _ = run_action(inputs, runner_temp, tmp_path, tmp_path, environment={"RECORDED_STATUS": "0"}, event=event)
    argv = runner_temp / "argv"
    return done, argv.read_text().split("\0")[:-1] if argv.exists() else None


@pytest.mark.parametrize("event", [*OWN_CODE.values(), *NOT_OWN_CODE.values()], ids=[*OWN_CODE, *NOT_OWN_CODE])
def test_code_runs_only_when_verify_command_is_set_and_the_code_is_the_repository_s_own(tmp_path, event):
    own = event in OWN_CODE.values()
    for mode in ("check", "fix", "pr"):
        done, argv = recorded_run(tmp_path / mode, {"mode": mode, "unsafe-fixes": "true"}, event)
        assert done.returncode == 0 and "--verify" not in argv and "diagnose" not in argv, (mode, argv)
    done, argv = recorded_run(tmp_path / "verify", {"mode": "fix", "unsafe-fixes": "true", "verify-command": "python train.py"}, event)
    assert done.returncode == 0, done.stderr
    if own:
        assert argv == ["fix", "--output-format", "github", "--unsafe-fixes", "--verify", "python train.py", "--", "."]
    else:  # the safe fixes alone, unverified, and the log says why
        assert argv == ["fix", "--output-format", "github", "--", "."]
        assert "gradfix: verify-command not run" in done.stdout and "only the safe fixes are applied, unverified" in done.stdout


@pytest.mark.parametrize("mode", ["check", "pr"])
def test_verify_command_goes_with_fix_mode_only(tmp_path, mode):
    done, argv = recorded_run(tmp_path, {"mode": mode, "verify-command": "python train.py"}, PUSH)
    assert done.returncode == 2 and done.stderr == "gradfix: the verify-command input goes with mode fix only\n"
    assert argv is None


def verify_workspace(tmp_path):
    """A checkout with a safe fix (train.py, run by CMD) and an unsafe one that breaks the program (bad.py)."""
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "train.py").write_text(DOUBLE)
    (workspace / "bad.py").write_text(KEPT_AND_READ)
    (workspace / "main.py").write_text(NOTING_MAIN)
    return workspace


@pytest.mark.parametrize("event", [NOT_OWN_CODE["fork-pull-request"], NOT_OWN_CODE["pull_request_target"]], ids=["fork", "pull_request_target"])
def test_on_a_fork_s_code_verify_command_never_runs_and_only_the_safe_fixes_are_applied(tmp_path, runner_temp, event):
    workspace, noted = verify_workspace(tmp_path), tmp_path / "noted"
    inputs = {"mode": "fix", "unsafe-fixes": "true", "verify-command": f"python main.py {noted}"}
    done, outputs, _ = run_action(inputs, runner_temp, workspace, tmp_path, event=event)
    assert done.returncode == 0, done.stderr
    assert not noted.exists()
    assert (workspace / "train.py").read_text() == DOUBLE_FIXED and (workspace / "bad.py").read_text() == KEPT_AND_READ
    assert outputs["changed-files"] == "train.py"


def test_on_the_repository_s_own_code_verify_command_runs_with_no_token_nor_runner_secret(tmp_path, runner_temp):
    workspace, noted = verify_workspace(tmp_path), tmp_path / "noted"
    (workspace / "bad.py").unlink()
    inputs = {"mode": "fix", "unsafe-fixes": "true", "verify-command": f"python main.py {noted}"}
    done, outputs, _ = run_action(inputs, runner_temp, workspace, tmp_path, environment=SECRETS, event=PUSH)
    assert done.returncode == 0, done.stderr
    assert "train.py: verified" in done.stderr.splitlines()
    assert (workspace / "train.py").read_text() == DOUBLE_FIXED and outputs["changed-files"] == "train.py"
    seen = dict(line.partition("=")[::2] for line in noted.read_text().splitlines())
    assert "PATH" in seen
    leaked = [name for name in seen if name in SECRETS or name.startswith(("INPUT_", "ACTIONS_", "GRADFIX_TOKEN"))]
    assert leaked == [] and not any(secret in value for value in seen.values() for secret in SECRETS.values())


WORKFLOWS = sorted((ROOT / "docs").glob("*.yml"))


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=[path.stem for path in WORKFLOWS])
def test_every_example_workflow_is_pinned_least_privilege_audited_and_in_the_ci_guide(workflow):
    text = workflow.read_text()
    document = yaml.safe_load(text)
    assert "pull_request_target" not in document[True]  # YAML 1.1 reads the key `on` as true
    assert document["permissions"] == {}
    for job in document["jobs"].values():
        assert "write-all" not in str(job["permissions"]) and "contents" in job["permissions"]
        for step in job["steps"]:
            assert "uses" not in step or re.fullmatch(r"[\w.-]+/[\w./-]+@[0-9a-f]{40}", step["uses"]), step["uses"]
            assert step.get("with", {}).get("persist-credentials", False) is False
    assert f"```yaml\n{text}```" in (ROOT / "docs" / "github-action.md").read_text()
    zizmor = shutil.which("zizmor")
    if zizmor is None:
        pytest.skip("zizmor is not installed (it is in the test extra: pip install -e '.[test]')")
    for persona in ("regular", "pedantic"):
        done = subprocess.run(
            [zizmor, "--offline", "--persona", persona, "--format", "json", str(workflow)], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0 and json.loads(done.stdout) == [], done.stdout + done.stderr


def test_the_check_workflow_uploads_the_sarif_of_the_check_even_when_it_fails_on_findings():
    workflow = yaml.safe_load((ROOT / "docs" / "github-check-workflow.yml").read_text())
    assert set(workflow[True]) == {"pull_request", "push"}
    [job] = workflow["jobs"].values()
    assert job["permissions"] == {"contents": "read", "security-events": "write"}
    [gradfix] = [step for step in job["steps"] if step.get("uses", "").startswith("OWNER/gradfix@")]
    [upload] = [step for step in job["steps"] if "upload-sarif" in step.get("uses", "")]
    assert gradfix["with"] == {"mode": "check", "sarif-file": upload["with"]["sarif_file"]}
    assert upload["if"].startswith("always()")


def test_the_shards_workflow_installs_the_locked_dependencies_of_the_commit_it_installs():
    workflow = yaml.safe_load((ROOT / "docs" / "github-shards-workflow.yml").read_text())
    [job] = workflow["jobs"].values()
    [install] = [step for step in job["steps"] if "pip install" in step.get("run", "")]
    assert re.fullmatch(r"[0-9a-f]{40}", install["env"]["GRADFIX_SHA"])
    assert install["run"].count("$GRADFIX_SHA") == 2 and "requirements/action.txt" in install["run"]
    assert "--require-hashes" in install["run"] and "--no-deps" in install["run"]
