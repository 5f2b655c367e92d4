"""`gradfix pr` against a bare git repository on disk (the remote; served over HTTP too, by
git's http-backend) and a fake GitHub API on 127.0.0.1 that records every request; the GitHub
client's retries and errors; the token's secrecy."""

import base64
import json
import os
import re
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from gradfix.cli import github_api, github_http
from gradfix.cli.app import app
from gradfix.cli.github_api import GitHub, GitHubError, token_echoes
from gradfix.cli.pull_request import DEFAULT_BRANCH, Git, GitError, fingerprint_in

from .conftest import FIXTURES
from .fake_git_http import FakeGitServer, basic_credentials
from .fake_github import FakeGitHub, Scripted

DOUBLE = (FIXTURES / "gf002_separate_backwards" / "shared_trunk_for_loop" / "before.py").read_text()
DOUBLE_FIXED = (FIXTURES / "gf002_separate_backwards" / "shared_trunk_for_loop" / "after.py").read_text()
TWICE = (FIXTURES / "gf001_duplicate_backward" / "for_loop" / "before.py").read_text()
TWICE_FIXED = (FIXTURES / "gf001_duplicate_backward" / "for_loop" / "after.py").read_text()
REPOSITORY = "octo/net"
TOKEN = "ghs_fake0token0that0must0never0show"
PULLS = f"/repos/{REPOSITORY}/pulls"
FIND_PULL = f"{PULLS}?head=octo%3Agradfix%2Ffixes&state=open"


# Git as the tests use it: no user or system configuration, a fixed identity for their commits.
GIT_ENVIRONMENT = {
    "GIT_AUTHOR_NAME": "dev",
    "GIT_AUTHOR_EMAIL": "dev@example.test",
    "GIT_COMMITTER_NAME": "dev",
    "GIT_COMMITTER_EMAIL": "dev@example.test",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_CONFIG_NOSYSTEM": "1",
}


def git(directory, *args):
    done = subprocess.run(["git", *args], cwd=directory, check=True, capture_output=True, text=True, env={**os.environ, **GIT_ENVIRONMENT})
    return done.stdout.strip()


class Project:
    """A remote (a bare repository), the checkout `gradfix pr` runs in, and a second clone that
    stands for the people who push to the base branch."""

    def __init__(self, root):
        self.remote, self.checkout, self.other = root / "remote.git", root / "checkout", root / "other"

    @classmethod
    def create(cls, root):
        made = cls(root)
        git(root, "init", "--quiet", "--bare", "--initial-branch=main", str(made.remote))
        git(root, "init", "--quiet", "--initial-branch=main", str(made.checkout))
        git(made.checkout, "remote", "add", "origin", str(made.remote))
        made.commit(made.checkout, {"train.py": DOUBLE, "README.md": "a project\n"}, "first")
        git(root, "clone", "--quiet", str(made.remote), str(made.other))
        return made

    def copy(self, root):
        """The same repositories under ``root``, their remotes pointing at the copy."""
        shutil.copytree(self.remote.parent, root, symlinks=True, dirs_exist_ok=True)
        made = Project(root)
        for clone in (made.checkout, made.other):
            git(clone, "remote", "set-url", "origin", str(made.remote))
        return made

    def commit(self, clone, files, message):
        for name, text in files.items():
            (clone / name).write_text(text)
        git(clone, "add", *files)
        git(clone, "commit", "--quiet", "-m", message)
        git(clone, "push", "--quiet", "origin", "main")
        return git(clone, "rev-parse", "HEAD")

    def push_to_base(self, files, message="base moves"):
        git(self.other, "pull", "--quiet", "--ff-only")
        return self.commit(self.other, files, message)

    def remote_has(self, branch):
        return bool(git(self.remote, "branch", "--list", branch))

    def head(self, branch):
        return git(self.remote, "rev-parse", f"refs/heads/{branch}")

    def show(self, branch, path):
        return git(self.remote, "show", f"{branch}:{path}") + "\n"


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    """Made once and copied for each test: a copy costs a fraction of the git commands."""
    return Project.create(tmp_path_factory.mktemp("template"))


@pytest.fixture
def project(template, tmp_path, monkeypatch):
    for name, value in GIT_ENVIRONMENT.items():
        monkeypatch.setenv(name, value)
    made = template.copy(tmp_path / "project")
    monkeypatch.chdir(made.checkout)
    return made


@pytest.fixture
def api(monkeypatch):
    monkeypatch.setattr(github_api, "FIRST_BACKOFF", 0.01)
    with FakeGitHub(REPOSITORY, TOKEN) as fake:
        yield fake


@pytest.fixture
def pr(api, tmp_path):
    """`gradfix pr` as a workflow runs it; returns the result and what it wrote to GITHUB_OUTPUT."""
    outputs = tmp_path / "github_output"

    def run(*args):
        outputs.write_text("")
        env = {
            "GITHUB_TOKEN": TOKEN,
            "GITHUB_REPOSITORY": REPOSITORY,
            "GITHUB_API_URL": api.url,
            "GITHUB_OUTPUT": str(outputs),
            "GITHUB_STEP_SUMMARY": None,
        }
        result = CliRunner().invoke(app, ["pr", *map(str, args)], env=env)
        assert not token_echoes(TOKEN).search(result.output + result.stderr + outputs.read_text())
        run.outputs = outputs.read_text()
        return result

    return run


def assert_leaves_checkout_alone(project):
    assert git(project.checkout, "status", "--porcelain") == ""
    assert (project.checkout / "train.py").read_text() == DOUBLE
    assert len(git(project.checkout, "worktree", "list").splitlines()) == 1
    assert TOKEN not in (project.checkout / ".git" / "config").read_text()


def test_first_run_pushes_the_fixes_branch_and_opens_the_pull_request(project, api, pr):
    result = pr("--label", "bug,gradfix", "--draft")
    assert result.exit_code == 1, result.output
    assert api.log() == [
        f"GET {FIND_PULL}",
        f'POST {PULLS} {{"title": "Fix PyTorch training-loop bugs found by gradfix", "head": "gradfix/fixes", "base": "main", "body": "<{len(api.pulls[1]["body"])} characters>", "draft": true}}',
        f'POST /repos/{REPOSITORY}/issues/1/labels {{"labels": ["bug", "gradfix"]}}',
    ]
    assert all(r.authorization == f"Bearer {TOKEN}" for r in api.requests)
    assert git(project.remote, "rev-parse", f"{DEFAULT_BRANCH}^") == project.head("main")
    assert project.show(DEFAULT_BRANCH, "train.py") == DOUBLE_FIXED
    body = api.pulls[1]["body"]
    assert "| GF002 separate_backwards | `train.py:19:5` | safe: the same gradients as running with `retain_graph=True` |" in body
    assert "<details><summary>train.py</summary>" in body and "+    (loss_reg + loss_cls).backward()" in body
    assert fingerprint_in(body)
    author = git(project.remote, "log", "-1", "--format=%an <%ae>|%s", DEFAULT_BRANCH)
    assert author == "github-actions[bot] <41898282+github-actions[bot]@users.noreply.github.com>|Fix PyTorch training-loop bugs found by gradfix"
    assert f"Opened pull request #1 ({api.pulls[1]['html_url']}): 1 fix(es) in 1 file(s) on gradfix/fixes." in result.stderr
    assert "pull-request-number<<" in pr.outputs and "\n1\n" in pr.outputs and "\ntrain.py\n" in pr.outputs
    assert_leaves_checkout_alone(project)


def test_new_findings_on_the_base_update_the_branch_and_the_body(project, api, pr):
    pr()
    first_fixes = project.head(DEFAULT_BRANCH)
    base = project.push_to_base({"second.py": TWICE})
    api.requests.clear()
    result = pr()
    assert result.exit_code == 1, result.output
    assert [(r.method, r.path) for r in api.requests] == [("GET", FIND_PULL), ("PATCH", f"{PULLS}/1")]
    assert set(api.requests[1].body) == {"title", "body", "base"}
    assert project.head(DEFAULT_BRANCH) != first_fixes
    assert git(project.remote, "rev-parse", f"{DEFAULT_BRANCH}^") == base
    assert project.show(DEFAULT_BRANCH, "second.py") == TWICE_FIXED
    assert "GF001 duplicate_backward" in api.pulls[1]["body"] and "GF002 separate_backwards" in api.pulls[1]["body"]
    assert "Updated pull request #1" in result.stderr


def test_when_the_base_fixes_the_code_the_pull_request_is_closed_and_the_branch_deleted(project, api, pr):
    pr()
    project.push_to_base({"train.py": DOUBLE_FIXED}, "fixed by hand")
    api.requests.clear()
    result = pr()
    assert result.exit_code == 0, result.output
    assert api.log() == [f"GET {FIND_PULL}", f'PATCH {PULLS}/1 {{"state": "closed"}}']
    assert not project.remote_has(DEFAULT_BRANCH)
    assert "No fix to make on main; closed pull request #1 and deleted gradfix/fixes." in result.stderr
    assert "pull-request-number<<" in pr.outputs and "findings<<" in pr.outputs
    api.requests.clear()
    assert pr().exit_code == 0
    assert api.log() == [f"GET {FIND_PULL}"]


def test_a_moved_base_gets_a_branch_made_again_from_its_tip(project, api, pr):
    pr()
    moved = DOUBLE.replace("import torch\n", "import torch\n# a comment above the fix\n", 1)
    assert moved != DOUBLE
    base = project.push_to_base({"train.py": moved, "README.md": "a project, moved\n"})
    api.requests.clear()
    result = pr()
    assert result.exit_code == 1, result.output
    assert git(project.remote, "rev-list", "--count", f"main..{DEFAULT_BRANCH}") == "1"
    assert git(project.remote, "rev-parse", f"{DEFAULT_BRANCH}^") == base
    fixed = project.show(DEFAULT_BRANCH, "train.py")
    assert fixed == DOUBLE_FIXED.replace("import torch\n", "import torch\n# a comment above the fix\n", 1)
    assert git(project.remote, "diff", "--name-only", f"main..{DEFAULT_BRANCH}") == "train.py"
    assert [(r.method, r.path) for r in api.requests] == [("GET", FIND_PULL), ("PATCH", f"{PULLS}/1")]  # the lines moved
    assert_leaves_checkout_alone(project)


@pytest.mark.parametrize("depth", [[], ["--depth", "1"]], ids=["full-clone", "shallow-clone"])
def test_three_runs_push_once_open_once_then_push_and_write_nothing(project, api, pr, tmp_path, monkeypatch, depth):
    project.push_to_base({"README.md": "history that a shallow checkout does not have\n"})
    clone = tmp_path / "clone"  # a --depth 1 clone is what actions/checkout makes
    git(tmp_path, "clone", "--quiet", *depth, f"file://{project.remote}", str(clone))
    pushes = tmp_path / "pushes"
    update = project.remote / "hooks" / "update"  # the remote's record of every ref a push moves
    update.write_text(f'#!/bin/sh\necho "$1 $3" >> "{pushes}"\n')
    update.chmod(0o755)
    monkeypatch.chdir(clone)
    first = pr("--label", "gradfix")
    assert first.exit_code == 1 and "Opened pull request #1" in first.stderr, first.output
    assert [(r.method, r.path) for r in api.requests] == [("GET", FIND_PULL), ("POST", PULLS), ("POST", f"/repos/{REPOSITORY}/issues/1/labels")]
    pushed = [f"refs/heads/{DEFAULT_BRANCH} {project.head(DEFAULT_BRANCH)}"]
    assert pushes.read_text().splitlines() == pushed
    for _ in range(2):
        api.requests.clear()
        result = pr("--label", "gradfix")
        assert result.exit_code == 1, result.output
        assert f"Up to date: pull request #1 ({api.pulls[1]['html_url']})" in result.stderr
        assert api.log() == [f"GET {FIND_PULL}"]
        assert pushes.read_text().splitlines() == pushed
    assert git(clone, "rev-parse", "--is-shallow-repository") == ("true" if depth else "false")


def test_a_server_error_is_retried(project, api, pr):
    api.scripted.append(Scripted(500, {"message": "Server Error"}))
    result = pr()
    assert result.exit_code == 1, result.output
    assert [(r.method, r.path) for r in api.requests] == [("GET", FIND_PULL), ("GET", FIND_PULL), ("POST", PULLS)]


def test_a_forbidden_token_is_one_clear_line_and_nothing_is_pushed(project, api, pr):
    api.scripted.append(Scripted(403, {"message": "Resource not accessible by integration"}))
    result = pr()
    assert result.exit_code == 2
    [line] = result.stderr.splitlines()
    assert line.startswith("error: GET /repos/octo/net/pulls: 403 forbidden: the token needs `contents: write` and `pull-requests: write`")
    assert "Resource not accessible by integration" in line
    assert not project.remote_has(DEFAULT_BRANCH)
    assert len(api.requests) == 1


def test_a_pull_request_that_already_exists_is_found_and_updated(project, api, pr):
    api.open_pull(DEFAULT_BRANCH, "main")
    api.scripted.append(Scripted(200, []))  # the list is behind: the pull request is not in it yet
    result = pr()
    assert result.exit_code == 1, result.output
    assert [(r.method, r.path) for r in api.requests] == [("GET", FIND_PULL), ("POST", PULLS), ("GET", FIND_PULL), ("PATCH", f"{PULLS}/1")]
    assert api.pulls[1]["title"] == "Fix PyTorch training-loop bugs found by gradfix"
    assert "GF002 separate_backwards" in api.pulls[1]["body"]
    assert "Updated pull request #1" in result.stderr


def test_findings_no_fix_removes_are_listed_and_exit_1(project, api, pr):
    reported = (FIXTURES / "gf003_forward_outside_loop" / "input_rebound_in_loop" / "reported.py").read_text()
    project.push_to_base({"train.py": reported})
    result = pr()
    assert result.exit_code == 1
    assert "train.py:" in result.stdout and "GF003" in result.stdout
    assert api.log() == [f"GET {FIND_PULL}"]
    assert "No fix to make on main; 1 finding(s) left to fix by hand." in result.stderr


def test_a_file_that_cannot_be_checked_does_not_hold_back_the_others_fixes(project, api, pr):
    project.push_to_base({"broken.py": "def f(:\n    loss.backward()\n"})
    result = pr()
    assert result.exit_code == 2
    assert "error: broken.py:1: cannot parse" in result.stderr and "Opened pull request #1" in result.stderr
    assert project.show(DEFAULT_BRANCH, "train.py") == DOUBLE_FIXED


def test_a_link_out_of_the_worktree_is_skipped_and_left_out_of_the_pull_request(project, api, pr, tmp_path):
    victim = tmp_path / "outside" / "victim.py"
    victim.parent.mkdir()
    victim.write_text(TWICE)
    (project.checkout / "model.py").symlink_to(victim)
    git(project.checkout, "add", "model.py")
    git(project.checkout, "commit", "--quiet", "-m", "a link out of the repository")
    git(project.checkout, "push", "--quiet", "origin", "main")
    result = pr()
    assert result.exit_code == 1, result.output
    assert "warning: model.py: a symbolic link out of . (to " in result.stderr
    assert "1 fix(es) in 1 file(s)" in result.stderr and "GF001" not in api.pulls[1]["body"]
    assert victim.read_text() == TWICE
    assert git(project.remote, "diff", "--name-only", f"main..{DEFAULT_BRANCH}") == "train.py"
    assert read_step_outputs(pr.outputs)["changed-files"] == "train.py"


def test_a_link_in_the_worktree_commits_the_fixed_file_it_points_to(project, api, pr):
    (project.checkout / "build").mkdir()  # a folder the walk excludes: the link is the file's only name
    (project.checkout / "build" / "model.py").write_text(TWICE)
    (project.checkout / "model.py").symlink_to("build/model.py")
    git(project.checkout, "add", "model.py", "build/model.py")
    git(project.checkout, "commit", "--quiet", "-m", "a link into the repository")
    git(project.checkout, "push", "--quiet", "origin", "main")
    result = pr()
    assert result.exit_code == 1, result.output
    assert project.show(DEFAULT_BRANCH, "build/model.py") == TWICE_FIXED
    assert project.show(DEFAULT_BRANCH, "model.py") == "build/model.py\n"  # still the link
    assert read_step_outputs(pr.outputs)["changed-files"].split("\n") == ["build/model.py", "train.py"]


def test_changed_files_quotes_a_name_that_holds_a_newline(project, api, pr):
    project.push_to_base({"new\nline.py": TWICE})
    result = pr()
    assert result.exit_code == 1, result.output
    assert project.show(DEFAULT_BRANCH, "new\nline.py") == TWICE_FIXED
    assert read_step_outputs(pr.outputs)["changed-files"].split("\n") == ['"new\\nline.py"', "train.py"]


def test_usage_errors_exit_2(project, api, pr, monkeypatch, tmp_path):
    assert "error: no GitHub token: set NOPE" in CliRunner().invoke(app, ["pr", "--token-env", "NOPE"], env={"NOPE": None}).stderr
    result = pr("--base", "gradfix/fixes")
    assert result.exit_code == 2 and "cannot be the base branch too" in result.stderr
    result = pr("--base", "missing")
    assert result.exit_code == 2 and "the base branch 'missing' is not on the remote 'origin'" in result.stderr
    result = pr(tmp_path)
    assert result.exit_code == 2 and "outside the git checkout" in result.stderr
    result = CliRunner().invoke(app, ["pr"], env={"GITHUB_TOKEN": TOKEN, "GITHUB_REPOSITORY": None})
    assert result.exit_code == 2 and "the repository must be given as owner/name (GITHUB_REPOSITORY or --repository)" in result.stderr
    result = pr("--author", "nobody")
    assert result.exit_code == 2 and "--author must look like 'Name <email>'" in result.stderr
    assert not project.remote_has(DEFAULT_BRANCH)
    assert len(git(project.checkout, "worktree", "list").splitlines()) == 1


# the GitHub client -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "status, message, expected",
    [
        (401, "Bad credentials", "401 unauthorized: the token is missing, expired or revoked"),
        (404, "Not Found", "404 not found: check that 'octo/net' is the repository (GITHUB_REPOSITORY)"),
        (422, "Validation Failed", "422 unprocessable: GitHub refused the request (is the base branch right?)"),
        (502, "Bad Gateway", "502 from GitHub, still after 5 attempts"),
    ],
)
def test_client_errors_are_one_line_that_says_what_to_check(api, status, message, expected):
    api.scripted += [Scripted(status, {"message": message})] * 5
    with pytest.raises(GitHubError) as raised:
        GitHub(TOKEN, REPOSITORY, api.url, sleep=lambda seconds: None).update_pull_request(7, title="x")
    text = str(raised.value)
    assert expected in text and f"GitHub said: {message}" in text
    assert "\n" not in text and TOKEN not in text
    assert len(api.requests) == (5 if status >= 500 else 1)


@pytest.mark.parametrize(
    "limited",
    [
        Scripted(403, {"message": "You have exceeded a secondary rate limit."}, {"Retry-After": "3"}),
        Scripted(429, {"message": "slow down"}, {"Retry-After": "3"}),
    ],
    ids=["secondary-rate-limit", "too-many-requests"],
)
def test_client_waits_as_retry_after_says(api, limited):
    waits = []
    api.scripted.append(limited)
    assert GitHub(TOKEN, REPOSITORY, api.url, sleep=waits.append).open_pull_request("b") is None
    assert waits == [3.0] and len(api.requests) == 2


def test_client_waits_for_the_rate_limit_reset(api, monkeypatch):
    waits = []
    monkeypatch.setattr(github_api.time, "time", lambda: 1000.0)
    api.scripted.append(Scripted(403, {"message": "API rate limit exceeded"}, {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "1004"}))
    GitHub(TOKEN, REPOSITORY, api.url, sleep=waits.append).open_pull_request("b")
    assert waits == [4.0]


def test_an_unreachable_api_is_one_line(monkeypatch):
    monkeypatch.setattr(github_api, "ATTEMPTS", 2)
    with pytest.raises(GitHubError, match=r"^cannot reach the GitHub API at http://127.0.0.1:9 \(GET /repos/octo/net/pulls\)"):
        GitHub(TOKEN, REPOSITORY, "http://127.0.0.1:9", sleep=lambda seconds: None).open_pull_request("b")


# the token's secrecy ------------------------------------------------------------------------------
HOOKS = ("post-checkout", "pre-push", "reference-transaction")


def record_environments(project, record):
    """Programs of the checkout's own that append the environment git gives them to ``record``:
    hooks; an fsmonitor (git runs it for the commands that read the index: fetch, and the check's
    `git check-ignore`); a clean filter for train.py (run by `git add` when the fixes are staged)."""
    hooks = project.checkout / ".git" / "hooks"
    last_lines = {
        "fsmonitor": "exit 1",  # no answer: git looks at the files itself
        "clean": "cat",
    }  # the file as it is
    for name in (*HOOKS, "fsmonitor", "clean"):
        program = hooks / name  # the last two are no hooks' names: git runs them only as configured below
        program.write_text(f'#!/bin/sh\n{{ echo "== {name}"; env; }} >> "{record}"\n{last_lines.get(name, "cat > /dev/null")}\n')
        program.chmod(0o755)
    git(project.checkout, "config", "core.fsmonitor", str(hooks / "fsmonitor"))
    git(project.checkout, "config", "filter.record.clean", str(hooks / "clean"))
    project.push_to_base({".gitattributes": "train.py filter=record\n"})


def test_the_token_goes_only_to_the_git_commands_that_talk_to_the_remote(project, api, pr, tmp_path):
    record = tmp_path / "environments"
    record_environments(project, record)
    with FakeGitServer(project.remote.parent, TOKEN) as server:
        git(project.checkout, "remote", "set-url", "origin", f"{server.url}/remote.git")
        # A header actions/checkout persisted (persist-credentials) is replaced, not sent beside the token's.
        git(project.checkout, "config", f"http.{server.url}/.extraheader", "AUTHORIZATION: basic c3RhbGU6Y3JlZGVudGlhbHM=")
        result = pr()
    assert result.exit_code == 1, result.output
    assert "Opened pull request #1" in result.stderr and project.show(DEFAULT_BRANCH, "train.py") == DOUBLE_FIXED
    assert len(server.authorizations) >= 3 and all(sent == [basic_credentials(TOKEN)] for sent in server.authorizations)
    seen = record.read_text()
    assert "== fsmonitor" in seen and "== clean" in seen  # programs of the checkout's own ran, with git's environment
    assert not any(f"== {hook}" in seen for hook in HOOKS)  # hooks are off, for push too
    encoded = basic_credentials(TOKEN).split()[1].encode()
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert TOKEN.encode() not in path.read_bytes() and encoded not in path.read_bytes(), path


def test_an_api_that_echoes_the_token_in_its_error_has_it_hidden(project, api, pr):
    api.scripted.append(Scripted(401, lambda request: {"message": f"Bad credentials: {request.authorization}"}))
    result = pr()  # the fixture fails the test if the token shows
    assert result.exit_code == 2
    assert "GitHub said: Bad credentials: Bearer ***" in result.stderr


@pytest.mark.parametrize("status", [401, 403, 404, 422, 502])
def test_client_errors_never_show_the_token_the_api_echoes(api, status):
    echo = Scripted(
        status, lambda request: {"message": f"you sent {request.authorization}", "errors": [{"message": f"header {request.authorization}"}]}
    )
    api.scripted += [echo] * 5
    with pytest.raises(GitHubError) as raised:
        GitHub(TOKEN, REPOSITORY, api.url, sleep=lambda seconds: None).update_pull_request(7, title="x")
    assert TOKEN not in str(raised.value) and "you sent Bearer ***" in str(raised.value)


def test_the_token_is_never_sent_in_clear_text_to_an_api_on_another_host(project, api, pr, monkeypatch):
    # The fake stands as the proxy to github.example: what would cross the network reaches it.
    monkeypatch.setenv("http_proxy", api.url)
    for name in ("HTTP_PROXY", "no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    result = pr("--api-url", "http://github.example/api/v3")
    assert result.exit_code == 2
    assert (
        "error: the GitHub API http://github.example/api/v3 (GITHUB_API_URL or --api-url) is not https: the token is not sent in clear text"
        in result.stderr
    )
    assert api.requests == [] and not project.remote_has(DEFAULT_BRANCH)


def test_a_redirect_from_https_to_http_is_not_followed():
    request = urllib.request.Request("https://github.example/repos/octo/net/pulls", headers={"Authorization": f"Bearer {TOKEN}"})
    redirects = github_http.SameHostRedirects()
    assert redirects.redirect_request(request, None, 301, "Moved", {}, "http://github.example/repos/octo/net/pulls") is None
    assert redirects.redirect_request(request, None, 301, "Moved", {}, "https://github.example/repos/octo/renamed/pulls") is not None


def test_the_token_is_never_sent_in_clear_text_to_a_remote_on_another_host(project, api, pr):
    git(project.checkout, "remote", "set-url", "origin", "http://someone:password@github.example/octo/net.git")
    result = pr()
    assert result.exit_code == 2
    assert "error: the remote 'origin' is on http://github.example, not https: the token is not sent in clear text" in result.stderr
    assert api.requests == []


def _base64(text, alphabet=base64.b64encode):
    return alphabet(text.encode()).decode()


# Each form a server, a proxy or git may echo the token back in.
ECHOES = {
    "plain": TOKEN,
    "percent-encoded": "".join(f"%{byte:02X}" for byte in TOKEN.encode()),
    "partly-percent-encoded-in-lower-case": TOKEN[:4] + "".join(f"%{byte:02x}" for byte in TOKEN[4:20].encode()) + TOKEN[20:],
    "base64": _base64(TOKEN),
    "base64-unpadded": _base64(TOKEN).rstrip("="),
    "base64-after-one-byte": _base64(f"x{TOKEN}"),
    "base64-after-two-bytes": _base64(f"xy{TOKEN}"),
    "base64-of-the-credentials": basic_credentials(TOKEN).split()[1],
    "url-safe-base64-of-the-credentials": _base64(f"x-access-token:{TOKEN}", base64.urlsafe_b64encode),
    "reversed": TOKEN[::-1],
    "reversed-base64-of-the-credentials": basic_credentials(TOKEN).split()[1][::-1],
}


@pytest.mark.parametrize("shown", ECHOES.values(), ids=ECHOES.keys())
def test_a_failing_git_command_hides_the_token_in_every_form(project, shown):
    with pytest.raises(GitError) as raised:
        Git(project.checkout, TOKEN)("show", f"{shown}:train.py")
    said = str(raised.value)
    assert "invalid object name" in said and "***" in said
    assert not token_echoes(TOKEN).search(said) and shown not in said


@pytest.mark.parametrize("shown", ECHOES.values(), ids=ECHOES.keys())
def test_an_api_error_hides_the_token_in_every_form(api, shown):
    api.scripted.append(Scripted(401, {"message": f"Bad credentials: {shown}"}))
    with pytest.raises(GitHubError) as raised:
        GitHub(TOKEN, REPOSITORY, api.url, sleep=lambda seconds: None).update_pull_request(7, title="x")
    said = str(raised.value)
    assert "GitHub said: Bad credentials: " in said and "***" in said
    assert not token_echoes(TOKEN).search(said) and shown not in said


def test_a_pull_request_address_that_echoes_the_token_is_shown_masked(project, api, pr):
    api.open_pull(DEFAULT_BRANCH, "main")
    api.pulls[1]["html_url"] += f"?from={ECHOES['base64-of-the-credentials']}"
    result = pr()  # the fixture fails the test if a form of the token shows
    assert result.exit_code == 1, result.output
    shown = read_step_outputs(pr.outputs)["pull-request-url"]
    assert shown.startswith(f"https://github.test/{REPOSITORY}/pull/1?from=") and "***" in shown
    assert f"Updated pull request #1 ({shown})" in result.stderr


# answers and names gradfix refuses --------------------------------------------------------------
@pytest.mark.parametrize(
    "answers, refused",
    [
        ([Scripted(200, "<html><body>Sign in to your proxy</body></html>")], "GET"),
        ([Scripted(200, {"message": "a repository, not a list"})], "GET"),
        ([Scripted(200, []), Scripted(201, {"html_url": "https://github.test/octo/net/pull/1"})], "POST"),
    ],
    ids=["html-page", "object-for-a-list", "pull-request-without-a-number"],
)
def test_an_answer_that_is_not_the_apis_is_one_line_and_exit_2(project, api, pr, answers, refused):
    api.scripted += answers
    result = pr()
    assert result.exit_code == 2, result.output
    [line] = result.stderr.splitlines()
    assert line.startswith(f"error: {refused} /repos/octo/net/pulls: ")
    assert f"is not what the GitHub API at {api.url} answers" in line


@pytest.mark.parametrize("repository", ["octo/net?x#", "octo/net#", "../net", "octo/..", "octo/net%2Fx"])
def test_a_repository_that_is_not_owner_slash_name_is_refused_before_any_request(project, api, pr, repository):
    api.scripted.append(Scripted(200, {"full_name": "octo/net", "id": 1}))  # what GitHub answers for /repos/octo/net?…
    result = pr("--repository", repository)
    assert result.exit_code == 2, result.output
    assert f"error: the repository must be given as owner/name (GITHUB_REPOSITORY or --repository), not {repository!r}" in result.stderr
    assert api.requests == []


@pytest.mark.parametrize("option", ["--branch", "--base"])
def test_a_ref_given_for_a_branch_is_refused(project, api, pr, option):
    result = pr(option, "refs/heads/main")
    assert result.exit_code == 2, result.output
    assert f"error: {option} takes a branch's name, not a ref: refs/heads/main" in result.stderr
    assert api.requests == [] and git(project.remote, "for-each-ref", "--format=%(refname)") == "refs/heads/main"


# the composite action --------------------------------------------------------------------------------
ROOT = Path(__file__).resolve().parents[1]
ACTION = yaml.safe_load((ROOT / "action.yml").read_text())
EXAMPLE_WORKFLOW = ROOT / "docs" / "github-action-workflow.yml"
EXPRESSION = re.compile(r"\$\{\{\s*([\w.-]+)\s*\}\}")


INSTALL_STEP = next(step for step in ACTION["runs"]["steps"] if "pip install" in step["run"])
PUSH = {"github.event_name": "push"}


def pull_request_from(repository):
    """The ``github`` context of a pull request whose head branch is in ``repository``."""
    return {"github.event_name": "pull_request", "github.event.pull_request.head.repo.full_name": repository}


def run_action(with_inputs, runner_temp, workspace, tmp_path, api_url="http://127.0.0.1:9", environment=None, event=PUSH):
    """The action's run steps as a runner runs them, on ``event`` (entries of the ``github``
    context) in ``REPOSITORY``: `${{ }}` only in `env:`, resolved from the inputs, the context and
    the outputs of the steps before; bash with -e -o pipefail; a GITHUB_OUTPUT file per step
    (``<id>.outputs``) and one GITHUB_STEP_SUMMARY; the first step that fails ends the run. The
    install step is left out (it builds gradfix from this checkout: the tests run the gradfix
    installed). Returns the job's log (each step's stdout, and stderr, one after the other) with the
    status of the last step run, the action's outputs and the step summary."""
    summary = tmp_path / "step_summary"
    summary.write_text("")
    github = {"github.token": TOKEN, "github.repository": REPOSITORY, "github.event.pull_request.head.repo.full_name": ""} | event
    defaults = {name: EXPRESSION.sub(lambda m: github[m[1]], spec.get("default", "")) for name, spec in ACTION["inputs"].items()}
    context = github | {f"inputs.{name}": value for name, value in (defaults | with_inputs).items()}
    stdout = stderr = ""
    for step in ACTION["runs"]["steps"]:
        if step is INSTALL_STEP:
            continue
        outputs = tmp_path / f"{step['id']}.outputs"
        outputs.write_text("")
        env = {name: EXPRESSION.sub(lambda m: context[m[1]], value) for name, value in step.get("env", {}).items()}
        env |= {
            "GITHUB_OUTPUT": str(outputs),
            "GITHUB_STEP_SUMMARY": str(summary),
            "RUNNER_TEMP": str(runner_temp),
            "GITHUB_ACTION_PATH": str(ROOT),
            "GITHUB_REPOSITORY": REPOSITORY,
            "GITHUB_API_URL": api_url,
            **(environment or {}),
        }
        script = tmp_path / "step.sh"
        script.write_text(step["run"])
        done = subprocess.run(
            ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
            cwd=workspace,
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=600,  # a verify-command runs twice
        )
        stdout, stderr = stdout + done.stdout, stderr + done.stderr
        context |= {f"steps.{step['id']}.outputs.{name}": value for name, value in read_step_outputs(outputs.read_text()).items()}
        if done.returncode != 0:
            break
    step_outputs = {name: EXPRESSION.sub(lambda m: context.get(m[1], ""), spec["value"]) for name, spec in ACTION["outputs"].items()}
    return subprocess.CompletedProcess(done.args, done.returncode, stdout, stderr), step_outputs, summary.read_text()


def read_step_outputs(text):
    """``name=value`` lines, and ``name<<DELIMITER``, the value's lines, ``DELIMITER``: as the
    runner reads GITHUB_OUTPUT."""
    outputs = {}
    lines = iter(text.splitlines())
    for line in lines:
        heredoc = re.fullmatch(r"([\w-]+)<<(\S+)", line)
        if heredoc:
            outputs[heredoc[1]] = "\n".join(iter(lines.__next__, heredoc[2]))
        elif line:
            name, _, value = line.partition("=")
            outputs[name] = value
    return outputs


@pytest.fixture
def runner_temp(tmp_path):
    """$RUNNER_TEMP as the install step leaves it: a gradfix in gradfix-venv/bin (here, this one)."""
    binaries = tmp_path / "runner_temp" / "gradfix-venv" / "bin"
    binaries.mkdir(parents=True)
    (binaries / "gradfix").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m gradfix "$@"\n')
    (binaries / "gradfix").chmod(0o755)
    return binaries.parents[1]


def test_the_action_in_pr_mode_opens_the_pull_request_and_sets_its_outputs(project, api, runner_temp, tmp_path):
    project.push_to_base({"README.md": "history that a shallow checkout does not have\n"})
    checkout = tmp_path / "shallow"  # as actions/checkout leaves it: one commit deep
    git(tmp_path, "clone", "--quiet", "--depth=1", f"file://{project.remote}", str(checkout))
    done, outputs, _ = run_action({"mode": "pr", "labels": "bug", "draft": "true"}, runner_temp, checkout, tmp_path, api.url)
    assert done.returncode == 0, done.stderr
    assert outputs == {"findings": "1", "changed-files": "train.py", "pull-request-number": "1", "pull-request-url": api.pulls[1]["html_url"]}
    assert [(r.method, r.path) for r in api.requests] == [("GET", FIND_PULL), ("POST", PULLS), ("POST", f"/repos/{REPOSITORY}/issues/1/labels")]
    assert api.pulls[1]["draft"] is True and project.show(DEFAULT_BRANCH, "train.py") == DOUBLE_FIXED
    assert git(project.remote, "rev-parse", f"{DEFAULT_BRANCH}^") == project.head("main")
    assert git(checkout, "status", "--porcelain") == "" and git(checkout, "rev-parse", "--is-shallow-repository") == "true"
    assert TOKEN not in done.stdout + done.stderr


def test_the_action_in_fix_mode_writes_the_fixes_and_lists_the_files(project, runner_temp, tmp_path):
    done, outputs, _ = run_action({"mode": "fix", "select": "GF002"}, runner_temp, project.checkout, tmp_path)
    assert done.returncode == 0, done.stderr
    assert outputs["changed-files"] == "train.py"
    assert (project.checkout / "train.py").read_text() == DOUBLE_FIXED


# A gradfix that records its arguments and exits with the status asked: the script's handling of
# inputs and exit statuses, for every mode, without paying gradfix's start-up each time (the two
# tests above run the real one).
RECORDING_GRADFIX = '#!/bin/sh\nprintf "%s\\0" "$@" > "$RUNNER_TEMP/argv"\nexit "$RECORDED_STATUS"\n'


@pytest.mark.parametrize(
    "inputs, status, argv, step_status",
    [
        (
            {"mode": "check", "paths": "src  tests/x.py", "select": "GF002,GF003", "unsafe-fixes": "true"},
            1,
            ["check", "--output-format", "github", "--select", "GF002,GF003", "--", "src", "tests/x.py"],
            1,
        ),
        ({"mode": "check"}, 0, ["check", "--output-format", "github", "--", "."], 0),
        (
            {"mode": "fix", "ignore": "GF004", "unsafe-fixes": "true"},
            1,
            ["fix", "--output-format", "github", "--ignore", "GF004", "--unsafe-fixes", "--", "."],
            0,
        ),
        ({"mode": "fix"}, 2, ["fix", "--output-format", "github", "--", "."], 2),
        (
            {"mode": "pr", "base": "dev", "title": 'Fix `$(touch pwned)` "now"', "labels": "a,b", "draft": "true", "branch": "fixes"},
            1,
            [
                "pr",
                "--branch",
                "fixes",
                "--token-env",
                "GRADFIX_TOKEN",
                "--base",
                "dev",
                "--title",
                'Fix `$(touch pwned)` "now"',
                "--label",
                "a,b",
                "--draft",
                "--",
                ".",
            ],
            0,
        ),
        ({"mode": "pr"}, 2, ["pr", "--branch", "gradfix/fixes", "--token-env", "GRADFIX_TOKEN", "--", "."], 2),
    ],
    ids=["check-findings", "check-clean", "fix-left", "fix-error", "pr-pending", "pr-error"],
)
def test_the_action_script_turns_inputs_into_arguments_and_statuses(tmp_path, inputs, status, argv, step_status):
    runner_temp = tmp_path / "runner_temp"
    recorder = runner_temp / "gradfix-venv" / "bin" / "gradfix"
    recorder.parent.mkdir(parents=True)
    recorder.write_text(RECORDING_GRADFIX)
    recorder.chmod(0o755)
    workspace = tmp_path / "workspace"
    git(tmp_path, "init", "--quiet", str(workspace))
    done, _, _ = run_action(inputs, runner_temp, workspace, tmp_path, environment={"RECORDED_STATUS": str(status)})
    assert done.returncode == step_status, done.stderr
    assert (runner_temp / "argv").read_text().split("\0")[:-1] == argv
    assert not (workspace / "pwned").exists()


def test_the_action_refuses_an_unknown_mode(tmp_path):
    done, _, _ = run_action({"mode": "deploy"}, tmp_path, tmp_path, tmp_path)
    assert done.returncode == 2 and done.stderr == "gradfix: the mode input must be check, fix or pr\n"


def test_the_action_keeps_expressions_out_of_its_scripts():
    steps = ACTION["runs"]["steps"]
    assert [s for s in steps if "uses" in s] == []
    assert all("${{" not in step["run"] for step in steps)
    assert all(EXPRESSION.fullmatch(value) for step in steps for value in step.get("env", {}).values())
    assert "diagnose" not in (ROOT / "action.yml").read_text()
    # Code of the tree runs only through verify-command (tests/test_action.py: never on a fork's code).
    assert ACTION["inputs"]["verify-command"]["default"] == "" and sum(step["run"].count("--verify") for step in steps) == 1


def test_zizmor_finds_nothing_in_the_action_and_the_example_workflow():
    zizmor = shutil.which("zizmor")
    if zizmor is None:
        pytest.skip("zizmor is not installed (it is in the test extra: pip install -e '.[test]')")
    done = subprocess.run(
        [zizmor, "--offline", "--format", "json", str(ROOT / "action.yml"), str(EXAMPLE_WORKFLOW)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout) == []


def test_the_example_workflow_is_least_privilege_pinned_and_in_the_ci_guide():
    text = EXAMPLE_WORKFLOW.read_text()
    workflow = yaml.safe_load(text)
    triggers = workflow[True]  # YAML 1.1 reads the key `on` as true
    assert set(triggers) == {"push", "schedule", "workflow_dispatch"} and triggers["push"] == {"branches": ["main"]}
    assert workflow["permissions"] == {}
    [job] = workflow["jobs"].values()
    assert job["permissions"] == {"contents": "write", "pull-requests": "write"}
    for step in job["steps"]:
        assert re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", step["uses"])
    assert f"```yaml\n{text}```" in (ROOT / "docs" / "github-action.md").read_text()
