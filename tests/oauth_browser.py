"""A browser for the OAuth tests: follows an authorization URL as a person's browser would.

Run as a script (``python tests/oauth_browser.py URL``) it is the system browser of a test:
``BROWSER="python tests/oauth_browser.py %s"`` makes Python's :mod:`webbrowser` start it, as
it starts Firefox. Imported, :func:`play` does the same in-process.
"""

from __future__ import annotations

import re
import sys
from urllib.parse import urljoin

import httpx2

FORM = re.compile(r'<form[^>]*action="([^"]*)"[^>]*>(.*?)</form>', re.S)
FIELD = re.compile(r'<(?:input|button)[^>]*name="([^"]+)"[^>]*value="([^"]*)"')


def play(auth_url: str, *, approve: bool = True) -> str:
    """Follow *auth_url*: the redirects, then each form submitted with the values it holds (a
    consent page, a login page with its demo credentials; without the ``approve`` button when
    *not approve*), until a page without a form (the loopback listener's); returns that page."""
    with httpx2.Client(timeout=30) as client:
        response = client.get(auth_url)
        for _ in range(10):
            if response.status_code in (301, 302, 303, 307):
                response = client.get(urljoin(str(response.url), response.headers["location"]))
                continue
            assert response.status_code == 200, response.text
            form = FORM.search(response.text)
            if form is None:
                return response.text
            fields = dict(FIELD.findall(form[2]))
            if not approve:
                fields.pop("approve", None)
            response = client.post(urljoin(str(response.url), form[1]), data=fields)
    raise AssertionError("the browser went round in circles")


if __name__ == "__main__":
    # Started by webbrowser with the terminal's stdout: a word only when the login failed.
    page = play(sys.argv[1])
    if "Logged in" not in page:
        sys.exit(f"oauth_browser: the login did not end logged in: {page}")
