"""Model providers that call real APIs over HTTP: ``openai`` and ``anthropic``.

Both stream over one shared ``httpx.AsyncClient`` per endpoint (its pool and the bound on calls
in flight set by :class:`PoolLimits`) and parse server-sent events as they arrive; both retry
429, 5xx and lost connections (honouring ``Retry-After``) until the first item has been
yielded, and never show the API key. Open one with :func:`open_provider`.
"""

from __future__ import annotations

from ._anthropic import AnthropicProvider as AnthropicProvider
from ._factory import DEFAULT_MODELS as DEFAULT_MODELS
from ._factory import PROVIDER_NAMES as PROVIDER_NAMES
from ._factory import open_provider as open_provider
from ._http import RetryPolicy as RetryPolicy
from ._openai import OpenAIProvider as OpenAIProvider
from ._pool import PoolLimits as PoolLimits

__all__ = [
    "AnthropicProvider",
    "DEFAULT_MODELS",
    "OpenAIProvider",
    "PROVIDER_NAMES",
    "PoolLimits",
    "RetryPolicy",
    "open_provider",
]
