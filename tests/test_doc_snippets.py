"""The snippets of the README and docs/ work when copied. Each YAML block parses, and the pre-commit
configuration is one pre-commit's own loader takes: a SHA of digits alone is quoted, or YAML reads a
number. The README's shell blocks that need neither the network nor the reader's
own files run, a line at a time as a user types them, in a git repository of the examples, and
leave it as `gradfix fix` would."""

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
_FENCED = re.compile(r"^```(\w*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
# The README's shell blocks that cannot run here, by their first line, and why.
NOT_RUN_HERE = {
    "python3 -m venv .venv && . .venv/bin/activate": "it installs gradfix from GitHub",
    "python -m pip install -e . && gradfix fix --diff examples/": "it installs into the environment the tests run in",
    "gradfix check src/ train.py              # report; exit 1 on findings": "it names the reader's own files and scripts",
}


def blocks(page: Path, language: str) -> list[str]:
    return [code for found, code in _FENCED.findall(page.read_text(encoding="utf-8")) if found == language]


def yaml_blocks() -> list[tuple[str, str]]:
    return [(page.name, code) for page in PAGES for code in blocks(page, "yaml")]


def numbers_written_as_shas(node: yaml.Node) -> list[str]:
    """The scalars YAML reads as numbers although they are SHAs (seven digits or more, with no
    quotes): the full SHA of zeros is read as 0."""
    if isinstance(node, yaml.MappingNode):
        return [found for pair in node.value for item in pair for found in numbers_written_as_shas(item)]
    if isinstance(node, yaml.SequenceNode):
        return [found for item in node.value for found in numbers_written_as_shas(item)]
    return [node.value] if node.tag == "tag:yaml.org,2002:int" and re.fullmatch(r"[0-9]{7,}", node.value) else []


@pytest.mark.parametrize(("page", "code"), yaml_blocks(), ids=[f"{page}-{n}" for n, (page, _) in enumerate(yaml_blocks())])
def test_every_yaml_block_parses_and_keeps_its_shas_strings(page, code):
    code = textwrap.dedent(code)  # a block of a workflow's steps is indented
    assert yaml.safe_load(code), f"{page}: an empty YAML block"
    assert numbers_written_as_shas(yaml.compose(code, Loader=yaml.SafeLoader)) == [], f"{page}: a SHA YAML reads as a number; quote it"


def test_the_pre_commit_configuration_is_one_pre_commit_loads(tmp_path):
    clientlib = pytest.importorskip("pre_commit.clientlib", reason="pre-commit is not installed (it is in the test extra)")
    [code] = [code for _, code in yaml_blocks() if code.lstrip().startswith("# .pre-commit-config.yaml")]
    config = tmp_path / ".pre-commit-config.yaml"
    config.write_text(code)
    [repository] = clientlib.load_config(str(config))["repos"]
    assert repository["rev"] == "0" * 40
    hooks = {hook["id"] for hook in clientlib.load_manifest(str(ROOT / ".pre-commit-hooks.yaml"))}
    assert {hook["id"] for hook in repository["hooks"]} <= hooks


@pytest.fixture
def examples_repository(tmp_path) -> tuple[Path, dict]:
    """A git repository holding the buggy examples, and the environment of a shell in which
    `gradfix` is the gradfix under test."""
    repository = tmp_path / "project"
    shutil.copytree(ROOT / "examples", repository / "examples")
    subprocess.run(["git", "init", "--quiet"], cwd=repository, check=True)
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "gradfix").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m gradfix "$@"\n')
    (tools / "gradfix").chmod(0o755)
    return repository, {**os.environ, "PATH": f"{tools}{os.pathsep}{os.environ['PATH']}"}


def as_typed(lines: list[str], repository: Path, environment: dict) -> list[int]:
    """Each line run by a shell in ``repository``, as a user types them one after the other: a
    line's exit status stops nothing. Their exit statuses."""
    return [subprocess.run(["bash", "-c", line], cwd=repository, env=environment, capture_output=True).returncode for line in lines]


def fixed_by_gradfix(environment: dict, tmp_path: Path) -> dict[str, str]:
    """The examples' sources once `gradfix fix` fixed them."""
    twin = tmp_path / "fixed-by-gradfix"
    shutil.copytree(ROOT / "examples", twin / "examples")
    assert as_typed(["gradfix fix ."], twin, environment) == [0]
    return sources(twin)


def sources(folder: Path) -> dict[str, str]:
    return {str(path.relative_to(folder)): path.read_text() for path in sorted(folder.rglob("*.py"))}


def test_the_readmes_patch_pipeline_applies_the_fixes(examples_repository, tmp_path):
    """The lines that write and apply fixes.patch, wherever the README has them (a block, or a span)."""
    repository, environment = examples_repository
    text = README.read_text(encoding="utf-8")
    code = [code for _, code in _FENCED.findall(text)] + re.findall(r"`([^`\n]+)`", _FENCED.sub("", text))
    pipeline = [line for piece in code for line in piece.splitlines() if "fixes.patch" in line]
    assert pipeline, "the README no longer shows how git apply takes the diff"
    statuses = as_typed(pipeline, repository, environment)
    assert statuses[-1] == 0, f"{pipeline}: exit statuses {statuses}"
    assert sources(repository) == fixed_by_gradfix(environment, tmp_path)


def test_the_blocks_not_run_here_are_the_readmes():
    first_lines = {code.splitlines()[0] for code in blocks(README, "sh")}
    assert set(NOT_RUN_HERE) <= first_lines, "NOT_RUN_HERE names a block the README no longer has"


# The blocks run here; the lines of the patch pipeline are test_the_readmes_patch_pipeline_applies_the_fixes's.
RUN_HERE = [code for code in blocks(README, "sh") if code.splitlines()[0] not in NOT_RUN_HERE and "fixes.patch" not in code]


@pytest.mark.parametrize("code", RUN_HERE, ids=[code.split("#")[0].strip() for code in RUN_HERE])
def test_a_readme_shell_block_leaves_the_examples_as_gradfix_fix_does(code, examples_repository, tmp_path):
    repository, environment = examples_repository
    lines = code.splitlines()
    statuses = as_typed(lines, repository, environment)
    assert all(status in (0, 1) for status in statuses), f"a line ended in an error: {list(zip(lines, statuses))}"
    assert sources(repository) == fixed_by_gradfix(environment, tmp_path)
