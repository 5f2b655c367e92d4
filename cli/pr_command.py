"""``gradfix pr``: the fixes of a checkout of the base branch committed on a branch of their own, and
kept current in one pull request (``pull_request.py`` does the git and GitHub work). Apart from
``fix`` because it works in a checkout of its own, never on the files the user has open.
"""

from __future__ import annotations

from typing import Annotated, List, Optional

import typer

from . import formats, pull_request, render
from .github_api import DEFAULT_API_URL, GitHub, GitHubError
from .conventions import EXIT_CLEAN, EXIT_ERROR, EXIT_FINDINGS
from .options import (
    Ignore,
    Jobs,
    Select,
    UnsafeFixes,
    Verbose,
    _has_errors,
    _run,
    _selection,
    _split,
    _write_fixes,
)


def pr(
    paths: Annotated[
        Optional[List[str]], typer.Argument(metavar="[PATH...]", help="Files or folders to fix [default: the whole checkout].", show_default=False)
    ] = None,
    unsafe_fixes: UnsafeFixes = None,
    select: Select = None,
    ignore: Ignore = None,
    jobs: Jobs = None,
    branch: Annotated[str, typer.Option("--branch", metavar="BRANCH", help="The branch the fixes are pushed to.")] = pull_request.DEFAULT_BRANCH,
    base: Annotated[
        Optional[str], typer.Option("--base", metavar="BRANCH", help="The branch to fix [default: the branch checked out].", show_default=False)
    ] = None,
    remote: Annotated[str, typer.Option("--remote", metavar="REMOTE", help="The git remote to fetch from and push to.")] = "origin",
    title: Annotated[str, typer.Option("--title", metavar="TITLE", help="The pull request's title.")] = pull_request.DEFAULT_TITLE,
    label: Annotated[
        Optional[List[str]],
        typer.Option("--label", metavar="LABELS", help="Labels for the pull request (comma-separated, repeatable).", show_default=False),
    ] = None,
    draft: Annotated[bool, typer.Option("--draft", help="Open the pull request as a draft.")] = False,
    author: Annotated[
        str, typer.Option("--author", metavar="NAME <EMAIL>", help="The commit's author, as 'Name <email>'.")
    ] = pull_request.DEFAULT_AUTHOR,
    message: Annotated[
        Optional[str], typer.Option("--message", metavar="MESSAGE", help="The commit message [default: the title].", show_default=False)
    ] = None,
    token_env: Annotated[
        str, typer.Option("--token-env", metavar="VARIABLE", help="The environment variable that holds the GitHub token.")
    ] = "GITHUB_TOKEN",
    repository: Annotated[
        Optional[str],
        typer.Option("--repository", metavar="OWNER/NAME", envvar="GITHUB_REPOSITORY", help="owner/name on GitHub.", show_default=False),
    ] = None,
    api_url: Annotated[
        str, typer.Option("--api-url", metavar="URL", envvar="GITHUB_API_URL", help="The GitHub REST API (GitHub Enterprise: https://HOST/api/v3).")
    ] = DEFAULT_API_URL,
    verbose: Verbose = False,
) -> None:
    """Commit the fixes on a branch made from the base branch, push it and open (or update) one
    pull request; close it and delete the branch when nothing is left to fix. Exit 1 while fixes
    wait in the pull request or findings are left, 0 when nothing is left to fix."""
    token = pull_request.token_from_environment(token_env)
    if not token:
        render.stderr.print(f"error: no GitHub token: set {token_env} (or name another variable with --token-env)")
        raise typer.Exit(EXIT_ERROR)
    settings = pull_request.Settings(remote, base, branch, title, message, tuple(_split(label)), draft, author)
    checked, overrides = _selection(None, select, ignore=ignore, unsafe_fixes=unsafe_fixes)
    try:
        github = GitHub(token, repository or "", api_url)
        with pull_request.base_checkout(settings, token) as workspace:
            reports, errors = _run(workspace.paths(paths or ["."]), checked, overrides, jobs, fixing=True)
            # As `fix` does, a file that cannot be checked or written does not hold back the other files' fixes.
            _write_fixes(reports, errors, lambda path: workspace.root)
            outcome = pull_request.publish(workspace, reports, github)
    except (pull_request.GitError, GitHubError) as error:
        render.stderr.print(f"error: {error}")
        raise typer.Exit(EXIT_ERROR) from None
    render.print_findings(outcome.left)
    formats.append_to_file_named_by("GITHUB_OUTPUT", formats.step_outputs(outcome.outputs()))
    render.stderr.print(outcome.summary())
    render.print_errors(reports, errors)
    if _has_errors(reports, errors):
        raise typer.Exit(EXIT_ERROR)
    raise typer.Exit(EXIT_FINDINGS if outcome.pending else EXIT_CLEAN)
