"""Where a rule's documentation is, for a link to it (the language server's diagnostics, SARIF's
``helpUri``): its section of docs/rules.md in the source this installation came from."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from urllib.parse import urlparse

from gradfix.codemods.registry import RULE_MODULES, rule_anchor


def rules_page_link(code: str) -> str | None:
    """The rule's section of docs/rules.md where this installation came from (``rules_page``)."""
    base = _rules_page()
    return None if base is None or code not in RULE_MODULES else f"{base}#{rule_anchor(code)}"


@lru_cache(maxsize=None)
def _rules_page() -> str | None:
    from importlib import metadata  # its import (email, zipfile) is for a link, not for every run

    try:
        direct_url = json.loads(metadata.distribution("gradfix").read_text("direct_url.json") or "null")
    except (metadata.PackageNotFoundError, ValueError):
        return None
    return rules_page(direct_url)


def rules_page(direct_url: object) -> str | None:
    """docs/rules.md of the source pip installed gradfix from, as its ``direct_url.json`` names
    it: the folder of a clone (an editable install), or the commit of a GitHub repository; None
    for another source (gradfix is not on an index)."""
    if not isinstance(direct_url, dict) or not isinstance(url := direct_url.get("url"), str):
        return None
    parsed = urlparse(url)
    if parsed.scheme == "file":
        from urllib.request import url2pathname  # urllib.request brings http.client and ssl

        page = Path(url2pathname(parsed.path), "docs", "rules.md")
        return page.as_uri() if page.is_file() else None
    commit = (direct_url.get("vcs_info") or {}).get("commit_id")
    if parsed.scheme == "https" and parsed.hostname == "github.com" and isinstance(commit, str):
        return f"{url.removesuffix('/').removesuffix('.git')}/blob/{commit}/docs/rules.md"
    return None
