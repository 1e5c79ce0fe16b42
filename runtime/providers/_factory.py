"""Opening a model provider by name, configured from the environment.

===========  ======================  ===============================  ==================
provider     key variable            base URL variable (default)      default model
===========  ======================  ===============================  ==================
openai       ``OPENAI_API_KEY``      ``OPENAI_BASE_URL``              ``gpt-4.1``
                                     (``https://api.openai.com/v1``)
anthropic    ``ANTHROPIC_API_KEY``   ``ANTHROPIC_BASE_URL``           ``claude-sonnet-4-5``
                                     (``https://api.anthropic.com``)
===========  ======================  ===============================  ==================

A key is required, except when the base URL's host is loopback (``localhost``, ``127.0.0.1``,
``::1``): local servers such as Ollama, llama.cpp or vLLM usually take none, and whatever key
is set is still sent.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import AsyncGenerator, Mapping
from contextlib import asynccontextmanager
from typing import Final

import attrs
import httpx

from runtime.core import NO_SECRETS, ConfigError, Provider, Secrets

from . import _anthropic, _openai
from ._http import RetryPolicy, public_url
from ._pool import PoolLimits, open_client
from ._ratelimit import EndpointLimiter, RateLimit, check_rate_limits, endpoint_label, limit_for


@attrs.frozen
class _Wiring:
    key_var: str
    url_var: str
    default_url: str
    default_model: str


_WIRING: Final = {
    "anthropic": _Wiring(
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_BASE_URL",
        _anthropic.DEFAULT_BASE_URL,
        _anthropic.DEFAULT_MODEL,
    ),
    "openai": _Wiring(
        "OPENAI_API_KEY", "OPENAI_BASE_URL", _openai.DEFAULT_BASE_URL, _openai.DEFAULT_MODEL
    ),
}
PROVIDER_NAMES: Final = tuple(sorted(_WIRING))
DEFAULT_MODELS: Final = {name: wiring.default_model for name, wiring in _WIRING.items()}


@asynccontextmanager
async def open_provider(
    name: str,
    *,
    model: str | None = None,
    env: Mapping[str, str] | None = None,
    max_retries: int = 4,
    call_deadline_s: float | None = 600.0,
    connect_timeout_s: float = 10.0,
    read_timeout_s: float = 120.0,
    thinking_budget: int | None = None,
    secrets: Secrets = NO_SECRETS,
    pool: PoolLimits | None = None,
    http_client: httpx.AsyncClient | None = None,
    structured_output: bool = False,
    rate_limits: Mapping[str, RateLimit | Mapping[str, float]] | None = None,
    limiter: EndpointLimiter | None = None,
) -> AsyncGenerator[Provider, None]:
    """Open the HTTP client for provider ``name`` and yield the provider; close it on exit.

    One provider (and so one HTTP client and one connection pool) serves every agent of a
    runtime; parallel calls each take a connection of their own, and at most
    ``pool.concurrency`` calls are in flight at once (docs/configuration.md, "Concurrency and
    the connection pool").

    Args:
        name: ``"openai"`` or ``"anthropic"``.
        model: the model to ask for; default :data:`DEFAULT_MODELS` [name].
        env: where to read the key and base URL (see the module docstring); default
            ``os.environ``.
        max_retries: retries after a transient failure (429, 5xx, lost connection).
        call_deadline_s: bound on each whole ``stream()`` call, retries included; ``None`` for
            none.
        connect_timeout_s: bound on each connection attempt.
        read_timeout_s: bound on each wait for more of a reply (a silent server).
        thinking_budget: Anthropic only: enable extended thinking with this token budget.
        structured_output: OpenAI only: ask the server natively for a typed agent's output
            (``response_format``); see :class:`OpenAIProvider`.
        secrets: the run's secrets, masked (with the key) in the provider's error messages.
        pool: the connection pool and the calls in flight (default :class:`PoolLimits`: as
            many connections as the open-files limit leaves, at most 10,000, all kept alive, as
            many calls in flight).
        rate_limits: the endpoints' limits, by ``openai``, ``anthropic`` or base URL
            (:class:`RateLimit` or ``{"rpm": …, "tpm": …, "max_concurrent": …}``); the entry
            for this endpoint's base URL, else its provider's, sets its limiter
            (docs/rate-limits.md), which also learns the limits from the server's headers.
        http_client: a client of your own to send every call through (its pool, proxies and
            TLS settings as you made them; left open on exit); the timeouts above then do not
            apply, and ``pool`` bounds only the calls in flight.
        limiter: the endpoint's limiter, made elsewhere (a Ray host's link to the driver's
            limiter: docs/rate-limits.md, "Ray hosts"); *rate_limits* then do not apply here.

    Raises:
        ConfigError: an unknown name, a missing key (naming the variable), a bad base URL or
            a bad limit; raised before anything is opened.

    Cancellation: entering does no I/O. Leaving, even cancelled, closes every pooled
    connection (httpcore shields that close).
    """
    wiring = _WIRING.get(name)
    if wiring is None:
        raise ConfigError(f"unknown provider {name!r}: choose one of {', '.join(PROVIDER_NAMES)}")
    env = os.environ if env is None else env
    base_url = (env.get(wiring.url_var) or "").strip() or wiring.default_url
    host = _check_url(base_url, wiring.url_var)
    api_key = (env.get(wiring.key_var) or "").strip() or None
    if api_key is None and not _is_loopback(host):
        raise ConfigError(
            f"{name}: set {wiring.key_var} (only a server on localhost may go without a key)"
        )
    if max_retries < 0:
        raise ConfigError(f"max_retries must be 0 or more, not {max_retries}")
    if call_deadline_s is not None and call_deadline_s <= 0:
        raise ConfigError(f"call_deadline_s must be positive, not {call_deadline_s}")
    if thinking_budget is not None and name != "anthropic":
        raise ConfigError(f"thinking_budget is an anthropic setting, not {name}'s")
    if structured_output and name != "openai":
        raise ConfigError(f"structured_output is an openai setting, not {name}'s")
    limit = limit_for(check_rate_limits(rate_limits or {}), name, base_url)
    retry = RetryPolicy(max_retries=max_retries)
    # Writes are small JSON bodies; the pool wait is left to the call deadline, since many
    # parallel agents may queue for a connection.
    timeout = httpx.Timeout(connect=connect_timeout_s, read=read_timeout_s, write=30.0, pool=None)
    pool = pool or PoolLimits()
    # One limiter for the endpoint, so for every agent of the run (docs/rate-limits.md),
    # wherever the server is: its admission policy has no case by host ("The first calls").
    limiter = limiter or EndpointLimiter(
        endpoint_label(public_url(base_url), api_key),
        limit=limit,
        max_concurrent=pool.concurrency,
    )
    async with _client(http_client, pool, timeout, base_url) as client:
        provider: Provider
        if name == "openai":
            provider = _openai.OpenAIProvider(
                client=client,
                model=model or wiring.default_model,
                base_url=base_url,
                api_key=api_key,
                secrets=secrets,
                retry=retry,
                call_deadline_s=call_deadline_s,
                limiter=limiter,
                structured_output=structured_output,
            )
        else:
            provider = _anthropic.AnthropicProvider(
                client=client,
                model=model or wiring.default_model,
                base_url=base_url,
                api_key=api_key,
                secrets=secrets,
                retry=retry,
                call_deadline_s=call_deadline_s,
                thinking_budget=thinking_budget,
                limiter=limiter,
            )
        yield provider


@asynccontextmanager
async def _client(
    given: httpx.AsyncClient | None, pool: PoolLimits, timeouts: httpx.Timeout, base_url: str
) -> AsyncGenerator[httpx.AsyncClient, None]:
    if given is not None:
        yield given  # the caller's: the caller closes it
        return
    async with open_client(pool, timeouts, base_url) as client:
        yield client


def _check_url(url: str, variable: str) -> str:
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise ConfigError(f"{variable} is not a valid URL: {exc}") from exc
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise ConfigError(f"{variable} must be an http(s) URL with a host, not {public_url(url)!r}")
    return parsed.host


def _is_loopback(host: str) -> bool:
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
