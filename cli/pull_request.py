"""``gradfix pr``: the fixes of a base branch as one pull request, kept up to date.

The fixes are made in a temporary git worktree at the tip of the remote's base branch, so the
checkout the command runs in is never touched. The fixes branch is always that tip plus one
commit, pushed with ``--force-with-lease``: when the base moves, the branch is made again from
it, and no conflict can be left behind. The pull request's body ends with a fingerprint of its
title and text; a run that would write the same tree on the same base and the same body pushes
nothing and sends no write to the API. When nothing is left to fix, the pull request is closed
and the branch deleted.

The token reaches git as an HTTP header through ``GIT_CONFIG_*`` variables of git's own
environment: never on a command line, in a remote URL or in ``.git/config``; and only the git
commands that talk to the remote (fetch, ls-remote, push) get it. The variables that held it are
taken out of the environment before anything starts, and git runs with hooks and fsmonitor off,
so no program git or gradfix starts sees it. It is never sent over http to another machine, and
what git says is shown with the token masked, in every form it may be echoed back in.

A fix is never written through a link out of the worktree (the walk skips one, and the file is
left out of the pull request); the commit holds the files the fixes wrote: a link's target, not
the link.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import hashlib
import os
import re
import subprocess
import tempfile
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

from gradfix.codemods.files import path_lines, unified_diff
from gradfix.codemods.report import FileReport, Finding, FixKind
from gradfix.codemods.registry import rule_by_code

from .github_api import GitHub, GitHubError, PullRequest, PullRequestExists, in_clear_text, token_echoes
from .formats import markdown_cell

DEFAULT_BRANCH = "gradfix/fixes"
DEFAULT_TITLE = "Fix PyTorch training-loop bugs found by gradfix"
# The identity GitHub gives the workflow token's commits.
DEFAULT_AUTHOR = "github-actions[bot] <41898282+github-actions[bot]@users.noreply.github.com>"
BODY_LIMIT = 60_000  # GitHub refuses a body over 65,536 characters; room is left for the fingerprint
GIT_TIMEOUT = 300
REMOTE_COMMANDS = frozenset({"fetch", "ls-remote", "push"})  # the only git commands given the token
# Programs the checkout's configuration names, which would run with git's environment; fetch
# runs an fsmonitor too, and push a pre-push hook.
_PROGRAMS_OFF = [("core.hooksPath", os.devnull), ("core.fsmonitor", "false")]
_FINGERPRINT = re.compile(r"<!-- gradfix fingerprint: ([0-9a-f]{64}) -->")
_AUTHOR = re.compile(r"^\s*(?P<name>[^<>]+?)\s*<(?P<email>[^<>\s]+)>\s*$")


class GitError(Exception):
    """A git command failed, or the checkout is not what ``gradfix pr`` needs; one line."""


@dataclass(frozen=True)
class Settings:
    remote: str = "origin"
    base: str | None = None  # None: the branch checked out
    branch: str = DEFAULT_BRANCH
    title: str = DEFAULT_TITLE
    message: str | None = None  # the commit message; the title when None
    labels: tuple[str, ...] = ()
    draft: bool = False
    author: str = DEFAULT_AUTHOR

    def identity(self) -> dict[str, str]:
        """The commit's author and committer, as git's environment variables."""
        match = _AUTHOR.match(self.author)
        if match is None:
            raise GitError(f"--author must look like 'Name <email>', not {self.author!r}")
        name, email = match["name"], match["email"]
        return {"GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": email, "GIT_COMMITTER_NAME": name, "GIT_COMMITTER_EMAIL": email}


def token_from_environment(variable: str) -> str:
    """The token in ``variable``, taken out of the environment with every variable that holds it,
    so that nothing gradfix starts (git, the check's workers) inherits it."""
    token = os.environ.get(variable, "")
    if token:
        for name in [name for name, value in os.environ.items() if token in value]:
            del os.environ[name]
    return token


class Git:
    """git in one folder, with hooks and fsmonitor off; the token (if any) is an HTTP header for
    the remote's host, given to the commands that talk to the remote only."""

    def __init__(self, directory: Path, token: str | None = None, remote_url: str = "") -> None:
        self.directory = directory
        self._echoes = token_echoes(token) if token else None
        inherited = {**os.environ, "GIT_TERMINAL_PROMPT": "0"}
        self._environment = inherited | _config_variables(_PROGRAMS_OFF)
        self._remote_environment = inherited | _config_variables(_PROGRAMS_OFF + _header_entries(remote_url, token))

    def at(self, directory: Path) -> "Git":
        """The same git, token and header in another folder (a worktree)."""
        other = copy.copy(self)
        other.directory = directory
        return other

    def __call__(self, *args: str, environment: dict[str, str] | None = None) -> str:
        chosen = self._remote_environment if args[0] in REMOTE_COMMANDS else self._environment
        try:
            done = subprocess.run(
                ["git", *args],
                cwd=self.directory,
                env={**chosen, **(environment or {})},
                capture_output=True,
                text=True,
                timeout=GIT_TIMEOUT,
                stdin=subprocess.DEVNULL,
            )
        except (OSError, subprocess.TimeoutExpired) as error:
            raise GitError(self._redacted(f"git {args[0]}: {error}")) from None
        if done.returncode != 0:
            said = " ".join((done.stderr or done.stdout).split()) or f"exit status {done.returncode}"
            raise GitError(self._redacted(f"git {' '.join(args[:2])} failed: {said}"))
        return done.stdout.strip()

    def _redacted(self, text: str) -> str:
        return self._echoes.sub("***", text) if self._echoes else text


def _basic_credentials(token: str) -> str:
    return base64.b64encode(f"x-access-token:{token}".encode()).decode()


def _header_entries(remote_url: str, token: str | None) -> list[tuple[str, str]]:
    """The configuration that sends the token to the remote's host, the way actions/checkout
    does it, without writing it to any file. The empty value first drops a header a checkout may
    have persisted, which would otherwise go out twice."""
    if not token or urllib.parse.urlsplit(remote_url).scheme not in ("http", "https"):
        return []
    key = f"http.{_site(remote_url)}/.extraheader"
    return [(key, ""), (key, f"AUTHORIZATION: basic {_basic_credentials(token)}")]


def _site(url: str) -> str:
    """``scheme://host[:port]`` of a URL, without the path or any user and password in it."""
    parts = urllib.parse.urlsplit(url)
    return f"{parts.scheme}://{parts.hostname}{f':{parts.port}' if parts.port else ''}"


def _config_variables(entries: list[tuple[str, str]]) -> dict[str, str]:
    """``entries`` as ``GIT_CONFIG_*`` variables, after those already in the environment."""
    first = int(os.environ.get("GIT_CONFIG_COUNT", "0") or 0)
    variables = {"GIT_CONFIG_COUNT": str(first + len(entries))}
    for index, (name, value) in enumerate(entries, start=first):
        variables |= {f"GIT_CONFIG_KEY_{index}": name, f"GIT_CONFIG_VALUE_{index}": value}
    return variables


@dataclass
class Workspace:
    """A worktree at the base's tip (the current folder while it is open)."""

    git: Git
    settings: Settings
    base: str
    base_commit: str
    branch_commit: str | None  # the fixes branch on the remote, if it exists
    source: Path  # the top of the checkout the command was run in
    invoked_in: Path  # the folder it was run in, which the paths given are relative to

    @property
    def root(self) -> Path:
        """The worktree: no fix is written outside it."""
        return self.git.directory

    def committed_path(self, path: str) -> str:
        """The file ``path`` names in the worktree (its links followed), as git names it there."""
        return Path(os.path.relpath(os.path.realpath(path), os.path.realpath(self.root))).as_posix()

    def paths(self, given: Sequence[str]) -> list[str]:
        """The paths given (relative to where the command ran) as the same paths in the worktree."""
        inside = []
        for path in given:
            relative = os.path.relpath((self.invoked_in / path).resolve(), self.source)
            if relative == ".." or relative.startswith(".." + os.sep):
                raise GitError(f"{path}: outside the git checkout {self.source}")
            inside.append(relative)
        return inside

    def branch_holds(self, tree: str) -> bool:
        """Whether the remote fixes branch is already this tree, one commit on the base's tip."""
        if self.branch_commit is None:
            return False
        # Read from the commit object: in a shallow clone (actions/checkout's) the branch is
        # fetched one commit deep, and git's own commands hide the parent a shallow commit has.
        header = self.git("cat-file", "commit", self.branch_commit).partition("\n\n")[0].splitlines()
        return f"tree {tree}" in header and [line for line in header if line.startswith("parent ")] == [f"parent {self.base_commit}"]


@contextlib.contextmanager
def base_checkout(settings: Settings, token: str | None) -> Iterator[Workspace]:
    """Fetch the remote's base branch (and the fixes branch) and open a worktree at the base's tip."""
    for option, name in (("--branch", settings.branch), ("--base", settings.base)):
        if name and name.startswith("refs/"):
            raise GitError(f"{option} takes a branch's name, not a ref: {name}")
    invoked_in = Path.cwd()
    try:
        source = Path(Git(invoked_in)("rev-parse", "--show-toplevel")).resolve()
    except GitError:
        raise GitError(f"{Path.cwd()}: not in a git checkout") from None
    probe = Git(source)
    try:
        url = probe("remote", "get-url", settings.remote)
    except GitError:
        raise GitError(f"no git remote named {settings.remote!r} (--remote)") from None
    if token and in_clear_text(url):
        raise GitError(f"the remote {settings.remote!r} is on {_site(url)}, not https: the token is not sent in clear text")
    git = Git(source, token, url)
    base = settings.base or _current_branch(git)
    if base == settings.branch:
        raise GitError(f"the fixes branch {settings.branch!r} cannot be the base branch too (--branch, --base)")
    heads = _remote_heads(git, settings.remote, [base, settings.branch])
    if base not in heads:
        raise GitError(f"the base branch {base!r} is not on the remote {settings.remote!r} (--base)")
    shallow = ["--depth=1"] if git("rev-parse", "--is-shallow-repository") == "true" else []
    git("fetch", "--quiet", "--no-tags", *shallow, settings.remote, *(f"refs/heads/{name}" for name in heads))
    with tempfile.TemporaryDirectory(prefix="gradfix-pr-") as temporary:
        root = Path(temporary, "worktree")
        git("worktree", "add", "--quiet", "--detach", str(root), heads[base])
        try:
            with contextlib.chdir(root):
                yield Workspace(git.at(root), settings, base, heads[base], heads.get(settings.branch), source, invoked_in)
        finally:
            git("worktree", "remove", "--force", str(root))


def _current_branch(git: Git) -> str:
    try:
        return git("symbolic-ref", "--quiet", "--short", "HEAD")
    except GitError:
        raise GitError("HEAD is detached: name the base branch with --base") from None


def _remote_heads(git: Git, remote: str, names: list[str]) -> dict[str, str]:
    listed = git("ls-remote", "--heads", remote, *(f"refs/heads/{name}" for name in names))
    heads = {}
    for line in listed.splitlines():
        commit, _, ref = line.partition("\t")
        heads[ref.removeprefix("refs/heads/")] = commit
    return {name: heads[name] for name in names if name in heads}


@dataclass
class Outcome:
    action: str  # "opened", "updated", "unchanged", "closed" or "clean"
    base: str
    branch: str
    pull_request: PullRequest | None
    changed_files: list[str]
    fixed: list[Finding]
    left: list[Finding]

    @property
    def pending(self) -> bool:
        """Fixes wait in a pull request, or findings remain that no fix removes."""
        return bool(self.changed_files or self.left)

    def summary(self) -> str:
        pr = self.pull_request
        left = f"; {len(self.left)} finding(s) left to fix by hand" if self.left else ""
        if self.action == "clean":
            return f"No fix to make on {self.base}{left}."
        if self.action == "closed":
            closed = f"closed pull request #{pr.number} and " if pr else ""
            return f"No fix to make on {self.base}; {closed}deleted {self.branch}{left}."
        fixes = f"{len(self.fixed)} fix(es) in {len(self.changed_files)} file(s) on {self.branch}"
        verb = {"opened": "Opened", "updated": "Updated", "unchanged": "Up to date:"}[self.action]
        return f"{verb} pull request #{pr.number} ({pr.url}): {fixes}{left}."

    def outputs(self) -> dict[str, str]:
        """The Action's outputs."""
        open_pr = self.pull_request if self.action not in ("closed", "clean") else None
        return {
            "findings": str(len(self.fixed) + len(self.left)),
            "changed-files": path_lines(self.changed_files),
            "pull-request-number": str(open_pr.number) if open_pr else "",
            "pull-request-url": open_pr.url if open_pr else "",
        }


def publish(workspace: Workspace, reports: Sequence[FileReport], github: GitHub) -> Outcome:
    """Bring the fixes branch and the pull request in line with the fixes in ``reports``, written
    into the worktree already."""
    settings = workspace.settings
    changed = [r for r in reports if r.changed]
    outcome = Outcome(
        "clean",
        workspace.base,
        settings.branch,
        None,
        [workspace.committed_path(r.path) for r in changed],
        [f for r in reports for f in r.fixed],
        [f for r in reports for f in r.findings],
    )
    # Asked first: a token that cannot read the pull requests stops the run before anything is pushed.
    found, created = github.open_pull_request(settings.branch), False
    if not changed:
        _withdraw(workspace, github, found, outcome)
        return outcome
    wrote = _push_fixes(workspace, outcome.changed_files)
    title, description = settings.title, pull_request_body(reports, workspace.base)
    body = with_fingerprint(title, description)
    if found is None:
        try:
            found, created = github.create_pull_request(settings.branch, workspace.base, title, body, settings.draft), True
        except PullRequestExists:
            found = github.open_pull_request(settings.branch)
            if found is None:
                raise GitHubError(f"GitHub says a pull request from {settings.branch} is open, but lists none") from None
    if fingerprint_in(found.body) != fingerprint(title, description) or found.title != title or found.base != workspace.base:
        found, wrote = github.update_pull_request(found.number, title=title, body=body, base=workspace.base), True
    missing = [label for label in settings.labels if label not in found.labels]
    if missing:
        github.add_labels(found.number, missing)
        wrote = True
    outcome.action = "opened" if created else "updated" if wrote else "unchanged"
    outcome.pull_request = found
    return outcome


def _push_fixes(workspace: Workspace, changed: Sequence[str]) -> bool:
    """Push the files ``changed`` in the worktree as one commit on the base's tip, unless the
    remote branch holds exactly that already; whether it pushed."""
    settings, git = workspace.settings, workspace.git
    git("add", "--", *changed)
    tree = git("write-tree")
    if workspace.branch_holds(tree):
        return False
    commit = git("commit-tree", tree, "-p", workspace.base_commit, "-m", settings.message or settings.title, environment=settings.identity())
    lease = f"--force-with-lease=refs/heads/{settings.branch}:{workspace.branch_commit or ''}"
    git("push", "--quiet", lease, settings.remote, f"{commit}:refs/heads/{settings.branch}")
    return True


def _withdraw(workspace: Workspace, github: GitHub, found: PullRequest | None, outcome: Outcome) -> None:
    """Nothing left to fix: close the pull request and delete the fixes branch."""
    settings = workspace.settings
    if found is not None:
        outcome.pull_request = github.update_pull_request(found.number, state="closed")
    if workspace.branch_commit is not None:
        lease = f"--force-with-lease=refs/heads/{settings.branch}:{workspace.branch_commit}"
        workspace.git("push", "--quiet", lease, settings.remote, f":refs/heads/{settings.branch}")
    if found is not None or workspace.branch_commit is not None:
        outcome.action = "closed"


# the pull request's text ------------------------------------------------------------------------
def guarantee(finding: Finding) -> str:
    """What a fix promises, in the words the rules' documentation uses."""
    if finding.fix is FixKind.UNSAFE:
        return "unsafe: changes what the program computes (applied because of --unsafe-fixes)"
    if rule_by_code(finding.code).KEEPS_GRADIENTS:
        return "safe: the same gradients as running with `retain_graph=True`"
    return "safe: keeps what the program computes, or only removes the error"


def pull_request_body(reports: Sequence[FileReport], base: str) -> str:
    """The description: a table of the fixes, each file's diff (collapsed), the findings left to
    fix by hand; then the fingerprint, for the next run to tell whether anything changed."""
    fixed = [f for r in reports for f in r.fixed]
    left = [f for r in reports for f in r.findings]
    lines = [
        f"gradfix found {len(fixed) + len(left)} training-loop bug(s) on `{base}`; this pull request fixes {len(fixed)}.",
        "It is kept up to date by `gradfix pr`, and closed when nothing is left to fix.",
        "",
        "| rule | where | what the fix guarantees |",
        "|---|---|---|",
        *(f"| {f.code} {rule_by_code(f.code).NAME} | `{markdown_cell(f.location)}` | {guarantee(f)} |" for f in fixed),
    ]
    diffs = [_collapsed_diff(r) for r in reports if r.changed]
    tail = []
    if left:
        tail += ["", f"{len(left)} finding(s) need a fix by hand:", ""]
        tail += [f"- `{markdown_cell(f.location)}` {f.code} {markdown_cell(f.message)}" for f in left]
    text = "\n".join([*lines, "", *diffs, *tail])
    if len(text) > BODY_LIMIT:
        text = "\n".join([*lines, "", "The diffs are too long for this description: see the changed files.", *tail])
    return text + "\n"


def _collapsed_diff(report: FileReport) -> str:
    diff = unified_diff(report)
    longest = max((len(run) for run in re.findall(r"`+", diff)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"<details><summary>{markdown_cell(report.path)}</summary>\n\n{fence}diff\n{diff}{fence}\n\n</details>\n"


def fingerprint(title: str, body: str) -> str:
    return hashlib.sha256(f"{title}\n{body}".encode()).hexdigest()


def fingerprint_in(body: str) -> str | None:
    match = _FINGERPRINT.search(body)
    return match[1] if match else None


def with_fingerprint(title: str, body: str) -> str:
    return f"{body}\n<!-- gradfix fingerprint: {fingerprint(title, body)} -->\n"
