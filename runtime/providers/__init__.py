"""Model providers that call real APIs over HTTP: ``openai`` and ``anthropic``.

Both stream over one shared ``httpx.AsyncClient`` per endpoint (its pool and the bound on calls
in flight set by :class:`PoolLimits`) and parse server-sent events as they arrive; both retry
5xx and lost connections (honouring ``Retry-After``) until the first item has been yielded,
leave 429s to the endpoint's limiter (:class:`EndpointLimiter`: docs/rate-limits.md), and never
show the API key. Open one with :func:`open_provider`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runtime._lazy import lazy_exports

if TYPE_CHECKING:
    from ._anthropic import AnthropicProvider as AnthropicProvider
    from ._factory import DEFAULT_MODELS as DEFAULT_MODELS
    from ._factory import PROVIDER_NAMES as PROVIDER_NAMES
    from ._factory import open_provider as open_provider
    from ._http import RetryPolicy as RetryPolicy
    from ._openai import OpenAIProvider as OpenAIProvider
    from ._pool import PoolLimits as PoolLimits
    from ._ratelimit import MAX_PAUSE_S as MAX_PAUSE_S
    from ._ratelimit import EndpointLimiter as EndpointLimiter
    from ._ratelimit import RateLimit as RateLimit
    from ._ratelimit import Ticket as Ticket
    from ._ratelimit import check_rate_limits as check_rate_limits
    from ._scenario import Scenario as Scenario
    from ._scenario import agent_types_from_scenario as agent_types_from_scenario
    from ._scenario import scenario_from_mapping as scenario_from_mapping
    from ._scripted import ScriptedProvider as ScriptedProvider
    from ._scripted import chunk_text as chunk_text
    from ._scripted import default_summary as default_summary
    from ._scripted import estimate_input_tokens as estimate_input_tokens

_LAZY: dict[str, str] = {
    "AnthropicProvider": "._anthropic",
    "DEFAULT_MODELS": "._factory",
    "EndpointLimiter": "._ratelimit",
    "MAX_PAUSE_S": "._ratelimit",
    "OpenAIProvider": "._openai",
    "PROVIDER_NAMES": "._factory",
    "PoolLimits": "._pool",
    "RateLimit": "._ratelimit",
    "RetryPolicy": "._http",
    "Scenario": "._scenario",
    "ScriptedProvider": "._scripted",
    "Ticket": "._ratelimit",
    "agent_types_from_scenario": "._scenario",
    "check_rate_limits": "._ratelimit",
    "chunk_text": "._scripted",
    "default_summary": "._scripted",
    "estimate_input_tokens": "._scripted",
    "open_provider": "._factory",
    "scenario_from_mapping": "._scenario",
}

__all__ = sorted(_LAZY)
__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
