"""The HTTP client ``gradfix pr`` talks to the GitHub API with: the standard library's, following
redirects only where the token may go. A module of its own, imported when a request is made:
``urllib.request`` brings ``http.client``, ``email`` and ``ssl``, which no other command needs."""

from __future__ import annotations

import urllib.parse
import urllib.request


def same_host_opener() -> urllib.request.OpenerDirector:
    return urllib.request.build_opener(SameHostRedirects)


class SameHostRedirects(urllib.request.HTTPRedirectHandler):
    """Follows a redirect (a renamed repository) only on the API's own host and scheme, where the
    token may go: not to another host, nor from https to http."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        new, old = urllib.parse.urlsplit(newurl), urllib.parse.urlsplit(req.full_url)
        if (new.scheme, new.netloc) != (old.scheme, old.netloc):
            return None
        return super().redirect_request(req, fp, code, msg, headers, newurl)
