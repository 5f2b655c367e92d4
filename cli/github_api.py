"""The few GitHub REST endpoints ``gradfix pr`` needs, over the standard library's HTTP client.

Requests that fail on the server's side (5xx, a secondary rate limit, a dropped connection) are
retried with exponential backoff, honouring ``Retry-After``; what retrying cannot mend (401, 403,
404, 422) raises ``GitHubError`` with one line that says which permission or setting is missing,
and so does an answer that is not the API's (a proxy's HTML page). The token is sent in a header
only, over https (or to this machine), and appears in no message nor answer gradfix shows, not
even echoed back encoded (``token_echoes``).
"""

from __future__ import annotations

import base64
import ipaddress
import json
import re
import time
import urllib.error
import urllib.parse
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, TypeVar

if TYPE_CHECKING:
    import urllib.request

DEFAULT_API_URL = "https://api.github.com"
API_VERSION = "2022-11-28"
ATTEMPTS = 5
FIRST_BACKOFF = 1.0  # seconds before the second attempt; doubled for each further one
LONGEST_WAIT = 60.0  # a Retry-After longer than this is not waited for: the run would look hung
TIMEOUT = 30.0
# GitHub's own rules for the names: a query, a fragment, a dot-segment or an escape cannot slip in.
_REPOSITORY = re.compile(r"(?P<owner>[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)/(?P<name>(?!\.\.?$)[A-Za-z0-9._-]+)")
Answer = TypeVar("Answer")

PERMISSIONS_HINT = (
    "the token needs `contents: write` and `pull-requests: write` (the workflow's `permissions:`), "
    "and a repository's Settings > Actions > General must allow GitHub Actions to create pull requests"
)


class GitHubError(Exception):
    """A request GitHub refused or never answered; the message is one line for the user."""


def in_clear_text(url: str) -> bool:
    """Whether a token sent to ``url`` would cross the network unencrypted: http to another
    machine than this one."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "http" or parts.hostname == "localhost":
        return False
    try:
        return not ipaddress.ip_address(parts.hostname or "").is_loopback
    except ValueError:
        return True


def token_echoes(token: str) -> re.Pattern[str]:
    """Every form a server, a proxy or git may echo ``token`` back in: as is, with any of its
    characters percent-encoded, in base64 (standard or URL-safe) wherever it stands in the text
    encoded (``x-access-token:TOKEN`` of an HTTP basic header among them), and each reversed."""
    forms = [token, token[::-1]]
    data = token.encode()
    for offset in range(3):
        # The characters of the base64 of a text holding the token ``offset`` bytes after a
        # multiple of three that depend on the token's bits alone, whatever is around it.
        encoded = base64.b64encode(bytes(offset) + data).decode()
        inner = encoded[-(-8 * offset // 6) : 8 * (offset + len(data)) // 6]
        for alphabet in (inner, inner.translate(str.maketrans("+/", "-_"))):
            forms += [alphabet, alphabet[::-1]]
    return re.compile("|".join(_percent_encodable(form) for form in dict.fromkeys(forms) if form))


def _percent_encodable(text: str) -> str:
    """A pattern for ``text`` with any of its characters percent-encoded (hex in either case)."""
    return "".join(f"(?:{re.escape(c)}|(?i:{''.join(f'%{byte:02x}' for byte in c.encode())}))" for c in text)


class PullRequestExists(GitHubError):
    """422: a pull request from the branch is open already (opened since we looked)."""


@dataclass(frozen=True)
class PullRequest:
    number: int
    url: str
    title: str
    body: str
    base: str
    labels: frozenset[str]

    @classmethod
    def from_json(cls, data: dict) -> "PullRequest":
        """The pull request in GitHub's answer; KeyError, TypeError or AttributeError when the
        answer is not one."""
        return cls(
            number=data["number"],
            url=data.get("html_url", ""),
            title=data.get("title") or "",
            body=data.get("body") or "",
            base=data.get("base", {}).get("ref", ""),
            labels=frozenset(label["name"] for label in data.get("labels", ())),
        )


def _pull_requests(answer: object) -> list[PullRequest]:
    if not isinstance(answer, list):
        raise TypeError("not a list")
    return [PullRequest.from_json(item) for item in answer]


class GitHub:
    """One repository's pull requests, as ``owner/name`` on the API at ``api_url``."""

    def __init__(
        self,
        token: str,
        repository: str,
        api_url: str = DEFAULT_API_URL,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        named = _REPOSITORY.fullmatch(repository)
        if named is None:
            raise GitHubError(f"the repository must be given as owner/name (GITHUB_REPOSITORY or --repository), not {repository!r}")
        if in_clear_text(api_url):
            raise GitHubError(f"the GitHub API {api_url} (GITHUB_API_URL or --api-url) is not https: the token is not sent in clear text")
        self.owner, self.repository = named["owner"], repository
        self.api_url = api_url.rstrip("/")
        self._token = token
        self._echoes = token_echoes(token) if token else None
        self._sleep = sleep
        from .github_http import same_host_opener  # (http.client, email and ssl: imported for pr alone)

        self._opener = same_host_opener()

    # endpoints ---------------------------------------------------------------------------------
    def open_pull_request(self, branch: str) -> PullRequest | None:
        """The open pull request from ``branch`` of this repository, if there is one."""
        query = urllib.parse.urlencode({"head": f"{self.owner}:{branch}", "state": "open"})
        found = self.request("GET", f"/repos/{self.repository}/pulls?{query}", read=_pull_requests)
        return found[0] if found else None

    def create_pull_request(self, branch: str, base: str, title: str, body: str, draft: bool) -> PullRequest:
        """Open a pull request; ``PullRequestExists`` when one from ``branch`` is already open."""
        payload = {"title": title, "head": branch, "base": base, "body": body, "draft": draft}
        try:
            return self.request("POST", f"/repos/{self.repository}/pulls", payload, read=PullRequest.from_json)
        except _Unprocessable as error:
            if "already exists" in error.detail:
                raise PullRequestExists(str(error)) from None
            raise

    def update_pull_request(self, number: int, **fields: str) -> PullRequest:
        return self.request("PATCH", f"/repos/{self.repository}/pulls/{number}", fields, read=PullRequest.from_json)

    def add_labels(self, number: int, labels: list[str]) -> None:
        self.request("POST", f"/repos/{self.repository}/issues/{number}/labels", {"labels": labels})

    # transport ---------------------------------------------------------------------------------
    def request(self, method: str, path: str, payload: dict | None = None, read: Callable[[object], Answer] = lambda answer: answer) -> Answer:
        """The JSON answer to one request, after the retries a transient failure earns, as
        ``read`` reads it."""
        what = f"{method} {path.partition('?')[0]}"
        attempt = 0
        while True:
            final = attempt + 1 >= ATTEMPTS
            try:
                with self._opener.open(self._prepare(method, path, payload), timeout=TIMEOUT) as response:
                    return self._read(what, response.read(), response.headers.get_content_type(), read)
            except urllib.error.HTTPError as error:
                body = _json_body(error)
                wait = _retry_delay(error.code, error.headers, body, attempt)
                if wait is None or final:
                    said = self._redacted(_what_github_said(body))
                    raise _error_for(error.code, what, said, self.api_url, self.repository) from None
            except (urllib.error.URLError, TimeoutError, ConnectionError) as error:
                if final:
                    reason = self._redacted(str(getattr(error, "reason", error)))
                    raise GitHubError(f"cannot reach the GitHub API at {self.api_url} ({what}): {reason}") from None
                wait = FIRST_BACKOFF * 2**attempt
            self._sleep(wait)
            attempt += 1

    def _read(self, what: str, data: bytes, content_type: str, read: Callable[[object], Answer]) -> Answer:
        """An answer that is not JSON, or not of the shape ``read`` reads, is not the API's (a
        proxy's or a login page, a web server's index)."""
        try:
            return read(self._redacted_answer(json.loads(data) if data else None))
        except (ValueError, KeyError, IndexError, TypeError, AttributeError):
            raise GitHubError(
                f"{what}: a {content_type} answer that is not what the GitHub API at {self.api_url} answers; "
                "is that the API (GITHUB_API_URL; GitHub Enterprise: https://HOST/api/v3)?"
            ) from None

    def _prepare(self, method: str, path: str, payload: dict | None) -> urllib.request.Request:
        import urllib.request

        headers = {
            "Accept": "application/vnd.github+json",
            "Authorization": f"Bearer {self._token}",
            "X-GitHub-Api-Version": API_VERSION,
            "User-Agent": "gradfix",
        }
        data = None
        if payload is not None:
            data = json.dumps(payload).encode()
            headers["Content-Type"] = "application/json"
        return urllib.request.Request(self.api_url + path, data=data, headers=headers, method=method)

    def _redacted(self, text: str) -> str:
        """``text`` without the token: a server (or a proxy) may echo the Authorization header."""
        return self._echoes.sub("***", text) if self._echoes else text

    def _redacted_answer(self, answer: object) -> object:
        """A JSON answer with the token out of every string in it: what gradfix prints of a pull
        request (its address) comes from the answer."""
        if isinstance(answer, str):
            return self._redacted(answer)
        if isinstance(answer, list):
            return [self._redacted_answer(item) for item in answer]
        if isinstance(answer, dict):
            return {key: self._redacted_answer(value) for key, value in answer.items()}
        return answer


class _Unprocessable(GitHubError):
    """422: GitHub understood the request and refuses it; ``detail`` holds its reasons."""

    def __init__(self, line: str, detail: str) -> None:
        super().__init__(line)
        self.detail = detail


def _json_body(error: urllib.error.HTTPError) -> dict:
    try:
        decoded = json.loads(error.read() or b"{}")
    except (ValueError, OSError):
        return {}
    return decoded if isinstance(decoded, dict) else {}


def _retry_delay(status: int, headers, body: dict, attempt: int) -> float | None:
    """Seconds to wait before trying again, or None when trying again cannot help."""
    retry_after = headers.get("Retry-After") if headers else None
    rate_limited = status in (403, 429) and (
        retry_after is not None
        or (headers is not None and headers.get("X-RateLimit-Remaining") == "0")
        or "rate limit" in str(body.get("message", "")).lower()
    )
    if status < 500 and not rate_limited:
        return None
    if retry_after is not None and retry_after.strip().isdigit():
        wait = float(retry_after)
    elif rate_limited and headers is not None and (reset := headers.get("X-RateLimit-Reset", "")).isdigit():
        wait = max(0.0, int(reset) - time.time())
    else:
        wait = FIRST_BACKOFF * 2**attempt
    return wait if wait <= LONGEST_WAIT else None


def _what_github_said(body: dict) -> str:
    message = str(body.get("message", "")).strip() or "no message"
    details = "; ".join(str(e.get("message") or e.get("code") or e) if isinstance(e, dict) else str(e) for e in body.get("errors", ()))
    return f"GitHub said: {message}" + (f" ({details})" if details else "")


def _error_for(status: int, what: str, said: str, api_url: str, repository: str) -> GitHubError:
    if status == 401:
        return GitHubError(f"{what}: 401 unauthorized: the token is missing, expired or revoked (set GITHUB_TOKEN or --token-env); {said}")
    if status in (403, 429):
        if "rate limit" in said.lower():
            return GitHubError(f"{what}: {status} rate limited, and retrying did not help; run again later; {said}")
        return GitHubError(f"{what}: {status} forbidden: {PERMISSIONS_HINT}; {said}")
    if status == 404:
        return GitHubError(
            f"{what}: 404 not found: check that {repository!r} is the repository (GITHUB_REPOSITORY), that {api_url} is "
            f"its API (GITHUB_API_URL), and that the token can see it; {said}"
        )
    if status == 422:
        return _Unprocessable(f"{what}: 422 unprocessable: GitHub refused the request (is the base branch right?); {said}", said)
    return GitHubError(f"{what}: {status} from GitHub, still after {ATTEMPTS} attempts; {said}")
