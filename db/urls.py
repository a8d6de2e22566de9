"""Database URLs as people may see them: one function renders a URL for pages, logs and errors, its password
hidden wherever the URL holds it, and one scrubs those secrets from text a driver or a child process wrote.
"""

from __future__ import annotations

import re
from urllib.parse import quote, quote_plus

from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import URL, make_url

from engine import one_line

HIDDEN = "***"
NOT_SHOWN = "(not shown: it does not parse as a URL)"
# Query keys whose values are secrets (psycopg takes password= and sslpassword= there); passfile is a path, shown.
SECRET_KEY = re.compile(r"pass(word|wd)|secret|token", re.IGNORECASE)
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")
_HOST = re.compile(r"[A-Za-z0-9._-]+|\[[0-9A-Fa-f:.]+\]")
MIN_SCRUBBED = 3  # a shorter password cannot be told from ordinary letters in a message; hiding it would garble


def url_for_people(url: str | URL) -> str:
    """A database URL as it may be shown to people (pages, logs, errors): one printable line, its password
    hidden wherever it is (user:***@, ?password=***). Text that does not parse shows its scheme and host only."""
    if isinstance(url, str):
        try:
            url = make_url(url.strip())
        except (sa_exc.ArgumentError, ValueError):
            return _unparsed_for_people(url.strip())
    pairs = [(k, v) for k, vs in url.query.items() for v in ([vs] if isinstance(vs, str) else vs)]
    query = "&".join(f"{quote_plus(k)}={HIDDEN if SECRET_KEY.search(k) else quote_plus(v)}" for k, v in pairs)
    shown = url.set(query={}).render_as_string(hide_password=True)
    return one_line(f"{shown}?{query}" if query else shown)


def _unparsed_for_people(text: str) -> str:
    scheme = _SCHEME.match(text)
    if scheme is None:
        return NOT_SHOWN
    before_query = re.split(r"[?#]", text[scheme.end():], maxsplit=1)[0]
    after_userinfo = before_query.rsplit("@", 1)[-1]  # a password may hold / or :, never an unquoted @
    host = _HOST.match(after_userinfo.split("/", 1)[0])
    return one_line(f"{scheme.group(1)}://{host.group(0)}/..." if host else f"{scheme.group(1)}://...")


def secrets_of(url: str | URL) -> list[str]:
    """The password and secret query values in a URL (as given and URL-quoted), longest first."""
    if isinstance(url, str):
        try:
            url = make_url(url.strip())
        except (sa_exc.ArgumentError, ValueError):
            found = re.search(r"(?:^|//)[^@/?#:]*:([^@]+)@", url)  # user:PASSWORD@, as best it can be told
            return [found.group(1)] if found else []
    values = [url.password or ""]
    for k, v in url.query.items():
        if SECRET_KEY.search(k):
            values += [v] if isinstance(v, str) else list(v)
    quoted = [quote_plus(v) for v in values] + [quote(v, safe="") for v in values]
    return sorted({v for v in values + quoted if len(v) >= MIN_SCRUBBED}, key=len, reverse=True)


def scrub(text: str, url: str | URL) -> str:
    """text (a driver's message, a child's stderr) with the URL's secrets replaced by ***."""
    for secret in secrets_of(url):
        text = text.replace(secret, HIDDEN)
    return text


__all__ = ["HIDDEN", "NOT_SHOWN", "scrub", "secrets_of", "url_for_people"]
