"""An OAuth-protected MCP server and its authorization server, from the SDK's own server-side
auth pieces (``mcp.server.auth``), for the OAuth tests.

Run as a script: ``python tests/mcp_oauth_server.py [--expires-in N]`` serves, each on a free
loopback port, an authorization server (metadata per RFC 8414, dynamic client registration,
``/authorize`` with PKCE, ``/token`` with refresh-token rotation, ``/revoke``) and a resource
server (streamable HTTP at ``/mcp``, protected resource metadata per RFC 9728, bearer tokens
checked against the authorization server's), and prints ``AS_PORT RS_PORT`` on stdout.

The authorization endpoint sends the browser to a consent page (``GET /consent``) whose form
posts back (``POST /consent``) and is redirected to the client's redirect URI with the code, as
a real one does after its login page. ``GET /test/stats`` says what happened (registrations,
authorizations, token and refresh grants); ``POST /test/expire`` expires every access token
now. Tools: ``add`` and ``whoami`` (the request's ``Authorization`` header: a server echoing the
token, for the masking tests).
"""

from __future__ import annotations

import argparse
import secrets
import socket
import time
from typing import Any

import anyio
import uvicorn
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    ProviderTokenVerifier,
    RefreshToken,
    TokenError,
    construct_redirect_uri,
)
from mcp.server.auth.routes import create_auth_routes
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions, RevocationOptions
from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from pydantic import AnyHttpUrl
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route

SCOPE = "user"


class Provider:
    """An in-memory authorization server: clients, codes, tokens, and what was asked."""

    def __init__(self, issuer: str, expires_in: int) -> None:
        self.issuer = issuer
        self.expires_in = expires_in
        self.clients: dict[str, OAuthClientInformationFull] = {}
        self.pending: dict[str, AuthorizationParams | Any] = {}
        self.codes: dict[str, AuthorizationCode] = {}
        self.access: dict[str, AccessToken] = {}
        self.refresh: dict[str, RefreshToken] = {}
        self.stats = {"registrations": 0, "authorizations": 0, "codes": 0, "refreshes": 0}

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        assert client_info.client_id
        self.clients[client_info.client_id] = client_info
        self.stats["registrations"] += 1

    async def authorize(
        self, client: OAuthClientInformationFull, params: AuthorizationParams
    ) -> str:
        self.stats["authorizations"] += 1
        ticket = secrets.token_urlsafe(16)
        self.pending[ticket] = (client.client_id, params)
        return f"{self.issuer}/consent?ticket={ticket}"

    def consent(self, ticket: str) -> str:
        client_id, params = self.pending.pop(ticket)
        code = f"code_{secrets.token_hex(16)}"
        self.codes[code] = AuthorizationCode(
            code=code,
            scopes=params.scopes or [SCOPE],
            expires_at=time.time() + 300,
            client_id=client_id,
            code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource,
            subject="demo",
        )
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state)

    async def load_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: str
    ) -> AuthorizationCode | None:
        return self.codes.get(authorization_code)

    def _issue(self, client_id: str, scopes: list[str], resource: str | None) -> OAuthToken:
        access = f"at_{secrets.token_hex(24)}"
        refresh = f"rt_{secrets.token_hex(24)}"
        self.access[access] = AccessToken(
            token=access,
            client_id=client_id,
            scopes=scopes,
            expires_at=int(time.time()) + self.expires_in,
            resource=resource,
            subject="demo",
        )
        self.refresh[refresh] = RefreshToken(
            token=refresh, client_id=client_id, scopes=scopes, resource=resource, subject="demo"
        )
        return OAuthToken(
            access_token=access,
            expires_in=self.expires_in,
            scope=" ".join(scopes),
            refresh_token=refresh,
        )

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: AuthorizationCode
    ) -> OAuthToken:
        del self.codes[authorization_code.code]
        self.stats["codes"] += 1
        assert client.client_id
        return self._issue(client.client_id, authorization_code.scopes, authorization_code.resource)

    async def load_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: str
    ) -> RefreshToken | None:
        token = self.refresh.get(refresh_token)
        return token if token is not None and token.client_id == client.client_id else None

    async def exchange_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: RefreshToken, scopes: list[str]
    ) -> OAuthToken:
        if self.refresh.pop(refresh_token.token, None) is None:
            raise TokenError("invalid_grant", "refresh token already used")
        self.stats["refreshes"] += 1
        # Rotation: the old access tokens of this client stop working too.
        for token in [t for t, a in self.access.items() if a.client_id == client.client_id]:
            del self.access[token]
        assert client.client_id
        return self._issue(client.client_id, scopes or refresh_token.scopes, refresh_token.resource)

    async def load_access_token(self, token: str) -> AccessToken | None:
        access = self.access.get(token)
        if access is None or (access.expires_at is not None and access.expires_at < time.time()):
            return None
        return access

    async def revoke_token(self, token: AccessToken | RefreshToken) -> None:
        self.access.pop(token.token, None)
        self.refresh.pop(token.token, None)


def authorization_server(provider: Provider) -> Starlette:
    routes = create_auth_routes(
        provider=provider,
        issuer_url=AnyHttpUrl(provider.issuer),
        client_registration_options=ClientRegistrationOptions(
            enabled=True, valid_scopes=[SCOPE], default_scopes=[SCOPE]
        ),
        revocation_options=RevocationOptions(enabled=True),
    )

    async def consent_page(request: Request) -> Response:
        ticket = request.query_params.get("ticket", "")
        if ticket not in provider.pending:
            return Response("unknown ticket", status_code=400)
        return HTMLResponse(
            f'<form method="post" action="/consent"><input type="hidden" name="ticket" '
            f'value="{ticket}"><button name="approve" value="yes">Allow</button></form>'
        )

    async def consent(request: Request) -> Response:
        form = await request.form()
        ticket = str(form.get("ticket", ""))
        if ticket not in provider.pending:
            return Response("unknown ticket", status_code=400)
        if form.get("approve") != "yes":
            _, params = provider.pending.pop(ticket)
            return RedirectResponse(
                construct_redirect_uri(
                    str(params.redirect_uri), error="access_denied", state=params.state
                ),
                status_code=302,
            )
        return RedirectResponse(provider.consent(ticket), status_code=302)

    async def stats(_: Request) -> Response:
        return JSONResponse(provider.stats)

    async def expire(_: Request) -> Response:
        for token in provider.access.values():
            token.expires_at = int(time.time()) - 1
        return JSONResponse({"expired": len(provider.access)})

    routes += [
        Route("/consent", consent_page, methods=["GET"]),
        Route("/consent", consent, methods=["POST"]),
        Route("/test/stats", stats, methods=["GET"]),
        Route("/test/expire", expire, methods=["POST"]),
    ]
    return Starlette(routes=routes)


def resource_server(provider: Provider, url: str) -> Starlette:
    app = MCPServer(
        "protected",
        log_level="CRITICAL",
        token_verifier=ProviderTokenVerifier(provider),
        auth=AuthSettings(
            issuer_url=AnyHttpUrl(provider.issuer),
            required_scopes=[SCOPE],
            resource_server_url=AnyHttpUrl(url),
            validate_token_resource=False,
        ),
    )

    @app.tool()
    async def add(a: int, b: int) -> str:
        """Add two numbers (behind OAuth)."""
        return str(a + b)

    @app.tool()
    async def whoami(ctx: Context) -> str:
        """The request's Authorization header (a server that echoes the token)."""
        request = ctx.request_context.request
        headers = getattr(request, "headers", None) or {}
        return str(headers.get("authorization", "<none>"))

    return app.streamable_http_app()


def _listen() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


async def serve(expires_in: int) -> None:
    as_sock, rs_sock = _listen(), _listen()
    as_port, rs_port = as_sock.getsockname()[1], rs_sock.getsockname()[1]
    provider = Provider(f"http://127.0.0.1:{as_port}", expires_in)
    apps = [
        (authorization_server(provider), as_sock),
        (resource_server(provider, f"http://127.0.0.1:{rs_port}/mcp"), rs_sock),
    ]
    print(as_port, rs_port, flush=True)
    async with anyio.create_task_group() as tg:
        for app, sock in apps:
            server = uvicorn.Server(uvicorn.Config(app, log_level="critical"))
            tg.start_soon(server.serve, [sock])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--expires-in", type=int, default=3600)
    args = parser.parse_args()
    anyio.run(serve, args.expires_in)


if __name__ == "__main__":
    main()
