"""The public runtime: :func:`open_runtime` owns one run — its root nursery, bus, sinks and agents.

Set-up is configuration → plan → open (docs/architecture.md#set-up-configuration--plan--open):
the keyword arguments make a :class:`RunConfig`; :func:`plan_run` checks and resolves it into
a :class:`RunPlan` without opening anything; :func:`open_run` opens what the plan names (the
provider, MCP servers, Ray, the bus and its sinks) and runs the run's nursery.

::

    async with open_runtime(scenario="demo.json", workspace="work") as rt:
        async with rt.subscribe() as events:   # optional: a live consumer
            handle = await rt.start("Summarise the repo")
            outcome = await handle.wait()
"""

from __future__ import annotations

import functools
import os
import secrets as _secrets
import threading
import time
from collections.abc import AsyncGenerator, Callable, Iterable, Mapping
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import attrs
import trio

from runtime._logs import get_logger
from runtime.core import (
    SCHEMA,
    AgentsError,
    AgentType,
    AgentTypes,
    ConfigError,
    EventBus,
    HookRunner,
    HookTable,
    LazyLogger,
    Limits,
    MiddlewareChain,
    MiddlewareProvider,
    PermissionBroker,
    PermissionPolicy,
    PriceTable,
    Provider,
    RunContext,
    RunFinished,
    RunResumed,
    RunStarted,
    Runtime,
    Sandbox,
    Secrets,
    ToolLimits,
    TraceError,
    check_prices,
    collector_for_runs,
    new_run_context,
    run_environ,
    scan_env,
    scan_run_environ,
)
from runtime.providers import (
    Scenario,
    ScriptedProvider,
    agent_types_from_scenario,
    scenario_from_mapping,
)
from runtime.trace import (
    JsonlSink,
    PipeSink,
    continue_trace_file,
    open_pipe_writer,
    open_trace_file,
)

if TYPE_CHECKING:
    import httpx

    from runtime.cluster import RayOptions
    from runtime.core import Tool
    from runtime.mcp import McpConfig
    from runtime.project import Project
    from runtime.providers import PoolLimits
    from runtime.replay import Resumer, ResumeState

_CANCEL_BY = ("user", "control", "budget", "runtime")
# It picks its way when it logs (the application's structlog, or logging): one serves every run.
_LOG = get_logger("trio_agents")
DEFAULT_TRACE_DIR = Path(".trio-agents") / "traces"
_PERMISSION_TIMEOUT_S: float = SCHEMA["permissions.timeout_s"].default


def new_run_id() -> str:
    """A run id that sorts by start time: ``20261129-193051-1a2b3c``."""
    global _stamp, _random
    now = int(time.time())
    if now != _stamp[0]:
        _stamp = (now, time.strftime("%Y%m%d-%H%M%S", time.gmtime(now)))
    with _random_lock:  # runs opened in two threads at once must not share a suffix
        if len(_random) < 3:  # the OS's random bytes, 768 at a time (one call, not one a run)
            _random = _secrets.token_bytes(768)
        suffix, _random = _random[:3], _random[3:]
    return f"{_stamp[1]}-{suffix.hex()}"


_stamp: tuple[int, str] = (-1, "")
_random = b""
_random_lock = threading.Lock()


def _forget_random() -> None:
    global _random
    _random = b""  # a forked child must not hand out its parent's next suffixes


os.register_at_fork(after_in_child=_forget_random)


@functools.lru_cache(maxsize=64)
def _path(real: str) -> Path:
    # A Path costs more to make than the realpath it holds (a third of the workspace check);
    # it is immutable, so runs in one workspace share one (issue 20).
    return Path(real)


@functools.lru_cache(maxsize=16)
def _tool_limits(max_output_chars: int) -> ToolLimits:
    # Frozen: runs with the same limits share one.
    return ToolLimits(max_output_chars=max_output_chars)


def _real_folder(workspace: str | os.PathLike[str]) -> str:
    """*workspace*'s real path (``~`` expanded, every symlink resolved), which must be a folder.

    On Linux the folder is opened (``O_PATH``: nothing is read) and the kernel's own name for
    it read back: three system calls in C, where ``os.path.isdir`` and ``os.path.realpath``
    stat every component in Python (issue 20: most of a small run's set-up). Anywhere that
    cannot (no ``O_PATH``, no ``/proc``, a folder deleted under us), the portable way.

    Raises:
        ConfigError: it is not a folder (or cannot be reached).
    """
    where = os.path.expanduser(os.fspath(workspace))
    if _O_PATH is not None and where:
        try:
            fd = os.open(where, _O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            fd = -1  # not a folder, or not reachable: the portable check says which
        if fd >= 0:
            try:
                real = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                real = ""
            finally:
                os.close(fd)
            if real.startswith("/") and not real.endswith(" (deleted)"):
                return real
    if not os.path.isdir(where):
        raise ConfigError(f"workspace {where!r} is not a folder")
    return os.path.realpath(where)


_O_PATH: int | None = getattr(os, "O_PATH", None) if os.path.isdir("/proc/self/fd") else None


@functools.cache
def _default_limits() -> Limits:
    # One instance for every run given none (frozen): made and checked once per process.
    return Limits()


def _default_tools() -> list[Tool]:
    from runtime._tools import builtin_tools  # tools imports runtime modules

    return builtin_tools()


def _tuple(value: Iterable[Any]) -> tuple[Any, ...]:
    return tuple(value)


def _optional_tuple(value: Iterable[Any] | None) -> tuple[Any, ...] | None:
    return None if value is None else tuple(value)


@attrs.frozen(kw_only=True)
class RunConfig:
    """A run's configuration: exactly :func:`~runtime.open_runtime`'s parameters (their meaning
    is documented there; a test keeps the two equal, names and defaults). Iterables are kept
    as tuples, so a configuration can be planned more than once."""

    provider: Provider | str | None = None
    scenario: Scenario | str | os.PathLike[str] | Mapping[str, Any] | None = None
    model: str | None = None
    agent_types: tuple[AgentType, ...] = attrs.field(default=(), converter=_tuple)
    tools: tuple[Tool, ...] | None = attrs.field(default=None, converter=_optional_tuple)
    extra_tools: tuple[Tool, ...] = attrs.field(default=(), converter=_tuple)
    workspace: str | os.PathLike[str] = "."
    trace: str | os.PathLike[str] | bool = True
    json_out: BinaryIO | None = None
    limits: Limits | None = None
    tool_limits: ToolLimits | None = None
    permission_mode: str = "deny"
    allow: tuple[str, ...] = attrs.field(default=(), converter=_tuple)
    deny: tuple[str, ...] = attrs.field(default=(), converter=_tuple)
    permission_timeout_s: float = _PERMISSION_TIMEOUT_S
    env: Mapping[str, str] | None = None
    allow_env: tuple[str, ...] = attrs.field(default=(), converter=_tuple)
    run_id: str | None = None
    on_event: Callable[[Any], None] | None = None
    ray_address: str | None = None
    mcp_servers: McpConfig | Mapping[str, Any] | None = None
    project: Project | None = None
    trace_dir: str | os.PathLike[str] | None = None
    sandbox: Sandbox | bool = False
    ray: RayOptions | None = None
    middleware: tuple[object, ...] = attrs.field(default=(), converter=_tuple)
    otlp: str | bool | None = None
    pool: PoolLimits | None = None
    http_client: httpx.AsyncClient | None = None
    prices: Mapping[str, Any] | None = None
    rate_limits: Mapping[str, Any] | None = None
    hooks: HookTable | Mapping[str, Any] | None = None
    resume: str | os.PathLike[str] | ResumeState | None = None


def open_runtime(
    provider: Provider | str | None = None,
    *,
    scenario: Scenario | str | os.PathLike[str] | Mapping[str, Any] | None = None,
    model: str | None = None,
    agent_types: Iterable[AgentType] = (),
    tools: Iterable[Tool] | None = None,
    extra_tools: Iterable[Tool] = (),
    workspace: str | os.PathLike[str] = ".",
    trace: str | os.PathLike[str] | bool = True,
    json_out: BinaryIO | None = None,
    limits: Limits | None = None,
    tool_limits: ToolLimits | None = None,
    permission_mode: str = "deny",
    allow: Iterable[str] = (),
    deny: Iterable[str] = (),
    permission_timeout_s: float = _PERMISSION_TIMEOUT_S,
    env: Mapping[str, str] | None = None,
    allow_env: Iterable[str] = (),
    run_id: str | None = None,
    on_event: Callable[[Any], None] | None = None,
    ray_address: str | None = None,
    mcp_servers: McpConfig | Mapping[str, Any] | None = None,
    project: Project | None = None,
    trace_dir: str | os.PathLike[str] | None = None,
    sandbox: Sandbox | bool = False,
    ray: RayOptions | None = None,
    middleware: Iterable[object] = (),
    otlp: str | bool | None = None,
    pool: PoolLimits | None = None,
    http_client: httpx.AsyncClient | None = None,
    prices: Mapping[str, Any] | None = None,
    rate_limits: Mapping[str, Any] | None = None,
    hooks: HookTable | Mapping[str, Any] | None = None,
    resume: str | os.PathLike[str] | ResumeState | None = None,
) -> AbstractAsyncContextManager[Runtime]:
    """Open a run: its bus, trace file, provider and root nursery. An async context manager::

        async with open_runtime("anthropic", workspace="repo") as rt:
            outcome = await rt.run("Find the TODOs")

    The keyword arguments are a :class:`~runtime.wiring.RunConfig`; ``open_run(config)`` is
    the same call with one already made.

    Args:
        provider: a :class:`Provider`, or ``"scripted"`` / ``"openai"`` / ``"anthropic"``.
            Default: ``scripted`` when a *scenario* is given.
        scenario: for the scripted provider: a :class:`Scenario`, a path, or a decoded object.
        model: the model to ask for (default: the provider's own default).
        agent_types: more agent types, beside the built-in ones (a type of the same name
            replaces one).
        tools: replaces the built-in tools; *extra_tools* adds to them.
        workspace: the folder the file tools and ``bash`` work in (they cannot leave it).
        trace: a JSONL path, ``True`` for a new file under ``.trio-agents/traces/``, or ``False``.
        json_out: also write every event as JSONL to this binary stream (``--json``).
        limits: run-wide limits (turns, depth, parallel sub-agents, …; default :class:`Limits`).
        tool_limits: the tools' own limits (timeouts, output sizes; default ``ToolLimits()``).
        permission_mode: ``ask``, ``auto-edit``, ``allow-all`` or ``deny``; *allow* / *deny*
            are rules such as ``bash(git status*)``.
        permission_timeout_s: how long a permission question waits for an answer.
        env: the environment tools see (default ``os.environ``, or the copy the CLI kept before
            sealing it, see ``runtime/core/_secrets.py``), secrets removed unless named in
            *allow_env*. Its secrets are masked in every event and log line of the run.
        run_id: the run's id (default: a new one, sortable by time); names the default trace.
        on_event: a tap installed before ``run_started`` (sees every event of the run).
        ray_address: the Ray cluster for agent types placed on ``ray`` (default
            ``RAY_ADDRESS``; with neither, a private local cluster is started for the run).
        mcp_servers: MCP servers whose tools the agents get (``mcp__SERVER__TOOL``): an
            :class:`~runtime.mcp.McpConfig`, or the ``mcpServers`` object of a ``.mcp.json``
            (docs/mcp.md). They start with the run, all at once, and close after its agents; a
            server that cannot start costs a warning, not the run.
        project: what :func:`runtime.project.load_project` read: its agent definitions come
            after the scenario's types and before *agent_types*; its skills add the ``skill``
            tool; every agent's system prompt gets the environment, the skill list and the
            instructions after its type's own prompt.
        trace_dir: the folder of the new trace file when *trace* is ``True``.
        sandbox: run every ``bash`` call under bubblewrap (``True``, or a :class:`Sandbox`
            for its options: network, more paths to hide); see ``runtime/core/_sandbox.py``.
            Checked once at start: :class:`ConfigError` when bwrap is missing or cannot work.
        ray: how the ``ray`` placement uses the cluster (hosts per node, spread or pack,
            timeouts): :class:`~runtime.cluster.RayOptions`.
        middleware: layers around every tool call and model call, the first outermost:
            objects with ``async tool_call(call, proceed)`` and/or ``model_call(request,
            proceed)`` (docs/python-api.md, "Middleware").
        pool: for ``"openai"``/``"anthropic"``: the endpoint's connection pool and calls in
            flight (:class:`~runtime.providers.PoolLimits`; docs/configuration.md,
            "Concurrency and the connection pool").
        http_client: for ``"openai"``/``"anthropic"``: a client of your own to send every model
            call through (its pool, proxies and TLS as you made them; left open on exit).
        rate_limits: for ``"openai"``/``"anthropic"``: the endpoints' limits, by ``openai``,
            ``anthropic`` or base URL: ``{"openai": {"rpm": 600, "tpm": 200_000}}`` or
            :class:`~runtime.providers.RateLimit` values; one limiter per endpoint, shared
            by every agent of the run, which also learns the limits from the server's headers
            (docs/rate-limits.md). :class:`ConfigError` for a bad entry, before anything opens.
        otlp: live OpenTelemetry spans (docs/observability.md): a collector's URL, ``False``
            for none, or None for what the ``OTEL_EXPORTER_OTLP_*`` variables of *env* say.
            Needs ``trio-agents[otel]`` (:class:`ConfigError` without it for a URL; a warning
            for the variables).
        prices: model prices over the built-in table, ``{"MODEL": {"input_per_mtok": …,
            "output_per_mtok": …, "cache_read_per_mtok": …, "cache_write_per_mtok": …}}``
            in dollars per million tokens, or :class:`~runtime.Price` values (docs/costs.md).
        hooks: hooks in Claude Code's format (docs/hooks.md): a
            :class:`~runtime.core.HookTable`, or the ``hooks`` object of a settings file
            (``{"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", ...}]}]}``).
            The command line reads them from the settings files.
        resume: a trace whose run was killed (or it, read: :func:`runtime.replay.load_resume`):
            the run goes on from it (docs/resume.md). Its run id, and by default its trace
            file, continued (*trace* a path: the whole run written there instead); start its
            agents with ``await rt.resume()``. A trace that finished, is being written, is
            another version's or is corrupt: :class:`ConfigError`.

    On leaving the block, running root agents are awaited (leave by cancelling to stop them);
    then ``run_finished`` is emitted and the trace closed — also when the block raises or is
    cancelled, in which case every running node first ends ``cancelled``.
    """
    config = RunConfig(
        provider=provider, scenario=scenario, model=model, agent_types=agent_types,
        tools=tools, extra_tools=extra_tools, workspace=workspace, trace=trace,
        json_out=json_out, limits=limits, tool_limits=tool_limits,
        permission_mode=permission_mode, allow=allow, deny=deny,
        permission_timeout_s=permission_timeout_s, env=env, allow_env=allow_env,
        run_id=run_id, on_event=on_event, ray_address=ray_address, mcp_servers=mcp_servers,
        project=project, trace_dir=trace_dir, sandbox=sandbox, ray=ray, middleware=middleware,
        otlp=otlp, pool=pool, http_client=http_client, prices=prices,
        rate_limits=rate_limits, hooks=hooks, resume=resume,
    )  # fmt: skip
    return open_run(config)  # its context manager itself: no second layer to enter per run


# -- the plan: what the run will be, decided before anything is opened ---------------------------


@attrs.frozen(kw_only=True)
class RunPlan:
    """A :class:`RunConfig` checked and resolved (:func:`plan_run`): names turned into objects,
    paths into real paths, the environment scanned for secrets. Nothing in it is open: no task,
    no connection, no file written; :func:`open_run` opens what it names.

    Attributes:
        provider: the provider object, or the name of one :func:`open_run` opens.
        tools: the run's tools by name before MCP (whose tools come when its servers start).
        env: the environment the tools see (secrets removed); *secrets*: the values masked.
        base_env: the environment providers and MCP servers read their keys from.
    """

    config: RunConfig
    run_id: str
    workspace: Path
    limits: Limits
    scenario: Scenario | None
    provider: Provider | str
    tools: Mapping[str, Tool]
    agent_types: AgentTypes
    mcp: McpConfig | None
    env: dict[str, str]
    base_env: Callable[[], dict[str, str]]
    secrets: Secrets
    trace_path: Path | None
    policy: PermissionPolicy
    sandbox: Sandbox | None
    prices: PriceTable = attrs.field(factory=PriceTable)
    hooks: HookTable = attrs.Factory(HookTable)
    """The configured hooks, checked (docs/hooks.md)."""
    resume: ResumeState | None = None


def plan_run(config: RunConfig) -> RunPlan:
    """Check *config* and resolve it into a :class:`RunPlan`: a synchronous step that opens
    nothing (it reads the workspace's path and a scenario file).

    Raises:
        ConfigError: a bad workspace, scenario, tool, agent type or price (one line naming
            it).
    """
    resume = _resume_state(config)
    run_id = resume.recording.run_id if resume is not None else config.run_id or new_run_id()
    if resume is not None and config.trace is True:
        config = attrs.evolve(config, trace=resume.path)  # the same file, continued
    prices = PriceTable(check_prices(config.prices)) if config.prices else PriceTable()
    # Setting up a run touches the disk a few times before anything runs; that is fine.
    ws = _path(_real_folder(config.workspace))
    project = config.project
    if project is not None and project.workspace != ws:
        raise ConfigError(f"the project was loaded for {project.workspace}, not the workspace {ws}")
    scen, scen_types = _scenario(config.scenario)
    provider = config.provider
    if provider is None:
        provider = "scripted" if scen is not None else "openai"
    tool_map = _tool_map(config)
    servers = _mcp_config(config.mcp_servers)
    if project is not None and project.skills and "skill" not in tool_map:
        from runtime._tools import SkillTool

        tool_map["skill"] = SkillTool(project.skills)
    types = _agent_types(config, scen_types, tool_map, has_mcp=servers is not None)
    if resume is not None:
        types = _resumed_locally(types)
    # The process's environment (the default) is copied only for the parts that read it.
    given_env = None if config.env is None else dict(config.env)

    def base_env() -> dict[str, str]:
        return run_environ() if given_env is None else given_env

    # Scanned once per distinct environment in the process, not per run.
    if given_env is None:
        run_env, secret_list = scan_run_environ(config.allow_env)
    else:
        run_env, secret_list = scan_env(given_env, config.allow_env)
    trace_path = _trace_path(config, run_id)
    if config.rate_limits is not None:
        from runtime.providers import check_rate_limits  # trio and attrs only

        check_rate_limits(config.rate_limits)  # a bad entry fails here, before anything opens
    return RunPlan(
        config=config,
        run_id=run_id,
        workspace=ws,
        limits=config.limits or _default_limits(),
        scenario=scen,
        provider=provider,
        tools=tool_map,
        agent_types=types,
        mcp=servers,
        env=run_env,
        base_env=base_env,
        # The run's one Secrets (runtime/core/_secrets.py): the bus, tools, MCP and logs mask
        # with it.
        secrets=Secrets.of(secret_list),
        trace_path=trace_path,
        policy=_policy(config, ws, trace_path),
        sandbox=_sandbox(config, ws, trace_path),
        prices=prices,
        hooks=_hooks(config.hooks),
        resume=resume,
    )


def _resumed_locally(types: AgentTypes) -> AgentTypes:
    """*types* with every one placed on Ray run in this process (docs/resume.md, "Ray"): its
    recorded turns come from the trace, which a host would ask its provider for again, and
    what goes on live runs as any local sub-agent (agent ids a host gave keep their form)."""
    if all(t.placement == "local" for t in types.values()):
        return types
    return AgentTypes(
        t if t.placement == "local" else attrs.evolve(t, placement="local") for t in types.values()
    )


def _resume_state(config: RunConfig) -> ResumeState | None:
    """The trace *config* resumes, read; None for a new run.

    Raises:
        ConfigError: the trace cannot be resumed (one line), or its run finished.
    """
    if config.resume is None:
        return None
    from runtime.replay import ResumeState, load_resume

    given = config.resume
    if isinstance(given, ResumeState):
        state = given
    else:
        try:
            state = load_resume(given)
        except TraceError as exc:
            raise ConfigError(str(exc)) from exc
    if state.finished:
        raise ConfigError(
            f"{state.path}: the run finished ({state.recording.status}); nothing to resume"
        )
    return state


def _hooks(given: HookTable | Mapping[str, Any] | None) -> HookTable:
    """``open_runtime(hooks=...)`` as a table: a settings file's ``hooks`` object is checked
    here, before anything opens (a malformed one: ``ConfigError`` naming its JSON path)."""
    if given is None or isinstance(given, HookTable):
        return given or HookTable()
    from runtime.project import hooks_from_mapping

    return HookTable(hooks_from_mapping(given, source="open_runtime(hooks=...)", where="hooks",
                                        warn=_LOG.warning))  # fmt: skip


def _scenario(
    scenario: Scenario | str | os.PathLike[str] | Mapping[str, Any] | None,
) -> tuple[Scenario | None, Iterable[AgentType]]:
    if isinstance(scenario, Mapping):
        return scenario_from_mapping(scenario)  # checked once per distinct object
    if scenario is None:
        return None, ()
    scen = scenario if isinstance(scenario, Scenario) else Scenario.load(scenario)
    return scen, agent_types_from_scenario(scen)


def _tool_map(config: RunConfig) -> dict[str, Tool]:
    tool_list = list(_default_tools() if config.tools is None else config.tools)
    tool_map: dict[str, Tool] = {}
    for tool in (*tool_list, *config.extra_tools):
        if tool.name in tool_map:
            raise ConfigError(f"two tools are named {tool.name!r}")
        tool_map[tool.name] = tool
    return tool_map


def _agent_types(
    config: RunConfig,
    scen_types: Iterable[AgentType],
    tool_map: Mapping[str, Tool],
    *,
    has_mcp: bool,
) -> AgentTypes:
    """The run's agent types: the scenario's, the project's files', then *config*'s own."""
    types = AgentTypes(scen_types)
    for t in config.project.agent_types if config.project is not None else ():
        # A definition file may name a tool this run lacks (an MCP server not configured):
        # the agent goes without it rather than the run failing on a file it cannot fix.
        # MCP names and globs are kept: their servers start below.
        tools_of = (
            None if t.tools is None else tuple(n for n in t.tools if tool_name_known(n, tool_map))
        )
        types.add(attrs.evolve(t, tools=tools_of))
    for t in config.agent_types:
        types.add(t)
    for t in types.values():
        if has_mcp and t.placement == "ray" and t.tools is not None:
            _refuse_mcp_on_ray(t)
        for name in t.tools or ():
            if not tool_name_known(name, tool_map):  # MCP tools are known once their servers start
                raise ConfigError(
                    f"agent type {t.name!r} names unknown tool {name!r}; "
                    f"known tools: {', '.join(sorted(tool_map))}"
                )
    return types


def _trace_path(config: RunConfig, run_id: str) -> Path | None:
    if config.trace is True:
        return Path(config.trace_dir or DEFAULT_TRACE_DIR) / f"{run_id}.jsonl"
    if config.trace is False:
        return None
    return Path(config.trace)


def _policy(config: RunConfig, ws: Path, trace_path: Path | None) -> PermissionPolicy:
    # Files no tool may change, whatever the mode: .mcp.json (its commands run when the next
    # run starts) and this run's trace (the audit trail), wherever it lies.
    protected = [os.path.join(str(ws), ".mcp.json")]
    if trace_path is not None:
        protected.append(str(Path(os.path.abspath(trace_path))))
    return PermissionPolicy(
        mode=config.permission_mode,
        allow=config.allow,
        deny=config.deny,
        workspace=ws,
        protected=tuple(protected),
    )


def _sandbox(config: RunConfig, ws: Path, trace_path: Path | None) -> Sandbox | None:
    if not config.sandbox:
        return None
    box = config.sandbox if isinstance(config.sandbox, Sandbox) else Sandbox()
    # The runtime's own files stay read-only to sandboxed commands.
    own = [str(ws / ".trio-agents"), str(ws / ".mcp.json")]
    if trace_path is not None:
        # A folder that holds the workspace cannot be read-only over it (the workspace
        # stays writable, docs/reliability.md): then the trace file itself is.
        folder = trace_path.parent.resolve()
        holds_ws = ws.resolve().is_relative_to(folder)
        own.append(str(trace_path.resolve() if holds_ws else folder))
    return attrs.evolve(box, read_only=(*box.read_only, *own))


# -- open: the provider, MCP servers, Ray, the bus and its sinks ---------------------------------


@attrs.frozen(kw_only=True)
class _Services:
    """What :func:`_open_services` opened for a plan (closed by its exit stack)."""

    provider: Provider
    tools: dict[str, Tool]
    mcp: Any
    placements: dict[str, Any]
    secrets: Secrets


@asynccontextmanager
async def open_run(config: RunConfig) -> AsyncGenerator[Runtime, None]:
    """:func:`open_runtime` for a :class:`RunConfig` already made: plan the run
    (:func:`plan_run`), then open its provider, MCP servers, Ray placement, bus and sinks, and
    run its nursery. Behaves as :func:`open_runtime` on leaving, raising and cancellation.

    Raises:
        ConfigError: a bad configuration, before anything is opened.
    """
    t0 = trio.current_time()
    plan = plan_run(config)
    if plan.sandbox is not None:
        await trio.to_thread.run_sync(plan.sandbox.check, plan.workspace)
    async with AsyncExitStack() as stack:
        stack.enter_context(collector_for_runs())  # many live agents: runtime/core/_collector.py
        services = await _open_services(plan, stack)
        resumer = None
        if plan.resume is not None:
            services, resumer = _resumed_services(plan.resume, services)
        # Every event's strings are masked at the bus; log lines too, while the run is open.
        bus = EventBus(
            plan.run_id,
            secrets=services.secrets,
            first_seq=plan.resume.last_seq if plan.resume is not None else 0,
        )
        if resumer is not None:  # the replayed prefix is in the trace already
            bus.set_filter(resumer.admit)
        if services.secrets:  # masking nothing changes nothing (most runs)
            stack.enter_context(services.secrets.in_logs())
        writers = _open_sinks(plan, bus, stack)
        if config.on_event is not None:
            bus.add_tap(config.on_event)
        run = _run_context(plan, services, bus)
        if resumer is not None:
            run = _resume_run(run, resumer)
        if services.mcp is not None:
            services.mcp.bind(run)  # the servers' sampling and questions go to this run
        started = _run_config_event(plan, services, run)
        if config.otlp is not False:
            from runtime.core import propagating
            from runtime.trace import open_live_spans  # the SDK only if spans go out

            live_spans = open_live_spans(
                config.otlp, plan.base_env(), version=_version(), warn=_LOG.warning
            )
            if live_spans is not None:
                bus.add_tap(live_spans)
                stack.push_async_callback(live_spans.aclose)  # a bounded flush, after the run
                # Model calls carry a traceparent naming their chat span (docs/observability.md).
                stack.enter_context(propagating(live_spans.trace_headers))
        runtime_box: list[Runtime] = []
        try:
            bus.emit_nowait(
                RunStarted(
                    agent_id=None,
                    parent_tool_use_id=None,
                    version=_version(),
                    config=started,
                )
                if resumer is None
                else _run_resumed(plan, resumer, started),
            )
            async with trio.open_nursery() as nursery:
                for writer in writers:
                    nursery.start_soon(writer.run)
                run.budget.serve_in(nursery)  # its task starts with the first budget

                def core_failed(exc: Exception) -> None:
                    nursery.cancel_scope.cancel(reason=f"the runtime failed: {exc!r}")

                bus.on_core_failure = core_failed
                rt = Runtime(run, nursery, plan.trace_path)
                rt.mcp_servers = services.mcp
                if plan.resume is not None:
                    rt.resume_roots = [(a.prompt, a.name) for a in plan.resume.recording.roots]
                runtime_box.append(rt)
                if run.hooks is not None and run.hooks.has("SessionStart"):
                    started_hooks = await run.hooks.run(
                        "SessionStart", {"source": "startup", "model": run.settings.model},
                        agent_id=None, parent_tool_use_id=None, match="startup",
                    )  # fmt: skip
                    run.hooks.session_context = started_hooks.context
                try:
                    yield rt
                    await rt._wait_roots()
                finally:
                    if run.hooks is not None and run.hooks.has("SessionEnd"):
                        # Bounded, also when the run is being cancelled (docs/hooks.md).
                        with trio.move_on_after(_SESSION_END_S, shield=True):
                            await run.hooks.run("SessionEnd", {"reason": "other"}, agent_id=None,
                                                parent_tool_use_id=None, match="other")  # fmt: skip
                    rt._closing = True
                    if nursery.child_tasks:  # else nothing is left to stop (and no checkpoint
                        # follows in this scope): a cancel here would be pure cost
                        nursery.cancel_scope.cancel(reason="the run is over")
        finally:
            _finish(bus, runtime_box[0] if runtime_box else None, t0)
        if bus.core_error is not None:
            raise AgentsError(
                f"the run failed: the runtime's own bookkeeping raised {bus.core_error!r}"
            ) from bus.core_error


_SESSION_END_S = 10.0
"""The most a run's end waits for its ``SessionEnd`` hooks (docs/hooks.md#events)."""


def _resumed_services(state: ResumeState, services: _Services) -> tuple[_Services, Resumer]:
    """The services of a resumed run: the replay of the recorded prefix in front of the
    provider and the tools (docs/resume.md)."""
    from runtime.replay import Resumer

    resumer = Resumer(state, live=services.provider, tools=services.tools)
    tools = {t.name: t for t in resumer.resume_tools(services.tools.values())}
    return attrs.evolve(services, provider=resumer, tools=tools), resumer


def _resume_run(run: RunContext, resumer: Resumer) -> RunContext:
    """*run* resumed: agents get their recorded ids again, calls their recorded permission
    decisions, and agents start from their recorded turns."""
    state = resumer.state
    run.scheduler.reuse_agent_ids(state.agent_ids, state.next_agent)
    run.broker.resume_from(state.decided, state.next_request)
    run = attrs.evolve(run, restore=resumer.restore)
    resumer.bind(run)
    return run


def _run_resumed(plan: RunPlan, resumer: Resumer, config: dict[str, Any]) -> RunResumed:
    state = resumer.state
    elsewhere = plan.trace_path is not None and os.path.realpath(
        plan.trace_path
    ) != os.path.realpath(state.path)
    return RunResumed(
        agent_id=None,
        parent_tool_use_id=None,
        version=_version(),
        gap_s=max(0.0, time.time() - state.last_ts),
        last_seq=state.last_seq,
        cut_bytes=state.cut_bytes,
        source=os.fspath(state.path) if elsewhere else None,
        config=config,
        rerun=list(resumer.rerun),
        interrupted=list(resumer.interrupted),
    )


def _finish(bus: EventBus, rt: Runtime | None, t0: float) -> None:
    """``run_finished`` (with the run's status) and the bus closed, whatever happened."""
    status = rt.final_status() if rt is not None else "cancelled"
    if bus.core_error is not None:
        status = "failed"
    if not bus.closed:
        try:
            bus.emit_nowait(
                RunFinished(
                    agent_id=None,
                    parent_tool_use_id=None,
                    status=status,
                    duration_s=trio.current_time() - t0,
                ),
            )
        finally:
            bus.close()


async def _open_services(plan: RunPlan, stack: AsyncExitStack) -> _Services:
    """Open the plan's provider, MCP servers and Ray placement on *stack*."""
    config = plan.config
    if isinstance(plan.provider, str):
        if plan.provider == "scripted":
            if plan.scenario is None:
                raise ConfigError("the scripted provider needs a scenario (--scenario FILE)")
            prov: Provider = ScriptedProvider(plan.scenario)
        else:
            from runtime.providers import open_provider  # httpx only when needed

            prov = await stack.enter_async_context(
                open_provider(
                    plan.provider, model=config.model, env=plan.base_env(), secrets=plan.secrets,
                    pool=config.pool, http_client=config.http_client,
                    rate_limits=config.rate_limits,
                )
            )
    else:
        prov = plan.provider
    tool_map = dict(plan.tools)
    secrets = plan.secrets
    mcp = None
    if plan.mcp is not None:
        from runtime.mcp import open_mcp_servers  # the SDK is heavy: only when configured

        mcp = await stack.enter_async_context(
            open_mcp_servers(
                plan.mcp,
                env=plan.env,
                environ=plan.base_env(),
                workspace=plan.workspace,
                secrets=secrets,
            )
        )
        for tool in mcp.tools:
            if tool.name in tool_map:
                raise ConfigError(f"two tools are named {tool.name!r}")
            tool_map[tool.name] = tool
        secrets = mcp.secrets
    placements: dict[str, Any] = {}
    if any(t.placement == "ray" for t in plan.agent_types.values()):
        from runtime.cluster import (
            open_ray_placement,  # Ray is heavy: only for runs that use it
        )

        placements["ray"] = await stack.enter_async_context(
            open_ray_placement(
                address=config.ray_address or plan.base_env().get("RAY_ADDRESS"),
                options=config.ray,
            )
        )
    return _Services(
        provider=prov, tools=tool_map, mcp=mcp, placements=placements, secrets=secrets
    )


def _open_sinks(
    plan: RunPlan, bus: EventBus, stack: AsyncExitStack
) -> list[JsonlSink | PipeSink]:
    """The trace file and ``--json`` writers, as taps or subscribers of *bus*; closed (flushed)
    by *stack* whatever happens. Returns the writers whose ``run`` the run nursery starts."""
    json_out = plan.config.json_out
    sinks: list[JsonlSink] = []
    trace_sink: JsonlSink | None = None
    if plan.trace_path is not None:
        # Locked, 0600, never through a symlink (runtime/trace/_sinks.py); a resumed run's
        # trace goes on after its recorded lines (docs/resume.md).
        resume = plan.resume
        trace_file = (
            open_trace_file(plan.trace_path)
            if resume is None
            else continue_trace_file(plan.trace_path, source=resume.path, keep=resume.keep)
        )
        trace_sink = JsonlSink(trace_file, name="trace", close_file=True, watch=plan.trace_path)
        sinks.append(trace_sink)
        # Nothing reaches --json or a subscriber before it is in the trace.
        bus.set_gate(trace_sink)
    writers: list[JsonlSink | PipeSink] = []
    json_pipe = open_pipe_writer(json_out) if json_out is not None else None
    if json_pipe is not None:
        # A subscriber, not a tap: a stalled reader makes the agents wait, not the loop.
        pipe_sink = PipeSink(json_pipe, bus, name="json")
        stack.callback(pipe_sink.close)  # owns the descriptor from here on
        writers.append(pipe_sink)
    elif json_out is not None:
        sinks.append(JsonlSink(json_out, name="json", interval_s=0.005, gate=trace_sink))
    for sink in sinks:
        # Sinks first: they see every event even if a user's tap misbehaves; and they are
        # closed (flushed) by the exit stack whatever happens below.
        bus.add_tap(sink)
        stack.callback(sink.close)
    writers += sinks
    return writers


def _run_context(plan: RunPlan, services: _Services, bus: EventBus) -> RunContext:
    config, limits, prov = plan.config, plan.limits, services.provider
    chain = MiddlewareChain(config.middleware)
    hooks = _hook_runner(plan, bus)
    broker = PermissionBroker(bus, plan.policy, timeout_s=config.permission_timeout_s)
    if hooks is not None and hooks.has("Notification"):
        broker.notify = hooks.permission_asked
    return new_run_context(
        run_id=plan.run_id,
        bus=bus,
        provider=MiddlewareProvider(prov, chain) if chain.model_layers else prov,
        model=config.model or getattr(prov, "model", None) or "scripted",
        agent_types=plan.agent_types,
        tools=services.tools,
        tool_limits=config.tool_limits or _tool_limits(limits.max_tool_output_chars),
        limits=limits,
        workspace=plan.workspace,
        env=plan.env,
        secrets=services.secrets,
        broker=broker,
        log=LazyLogger(_LOG, run_id=plan.run_id),
        sandbox=plan.sandbox,
        placements=services.placements,
        system_prompt=config.project.system_prompt() if config.project is not None else None,
        middleware=chain if chain.tool_layers else None,
        prices=plan.prices,
        hooks=hooks,
        expand_prompt=services.mcp.expand_prompt if services.mcp is not None else None,
    )


def _hook_runner(plan: RunPlan, bus: EventBus) -> HookRunner | None:
    """The runner of the configured hooks (docs/hooks.md), or None when there are none."""
    table = plan.hooks
    if not table:
        return None
    from runtime._tools import package
    from runtime.project import CLAUDE_TOOLS

    return HookRunner(
        table,
        bus=bus,
        workspace=plan.workspace,
        env=plan.base_env(),
        session_id=plan.run_id,
        transcript_path=str(plan.trace_path or ""),
        permission_mode=plan.config.permission_mode,
        tool_names=CLAUDE_TOOLS,
        log=_LOG,
        guard=package().warden(),  # a hook outlives no kill -9 of this process
    )


def _run_config_event(plan: RunPlan, services: _Services, run: RunContext) -> dict[str, Any]:
    """``run_started.config`` (docs/events.md): what the run runs with, never a secret."""
    config, prov, box = plan.config, services.provider, plan.sandbox
    out = {
        **prov.describe(),
        "provider": prov.name,
        "model": run.settings.model,
        "workspace": str(plan.workspace),
        # Where this very stream is kept, so a --json reader can follow or inspect it.
        "trace": None if plan.trace_path is None else os.fspath(plan.trace_path),
        "permission_mode": config.permission_mode,
        "limits": plan.limits.public(),
        "agent_types": sorted(plan.agent_types),
        "sandbox": None if box is None else {"network": box.network},
        "permission_rules": {
            "allow": [str(r) for r in config.allow],
            "deny": [str(r) for r in config.deny],
        },
    }
    if plan.prices.overrides:  # a replay costs its calls as this run did (docs/costs.md)
        out["prices"] = plan.prices.describe()
    if services.mcp is not None:
        out["mcp_servers"] = services.mcp.describe()
    if config.project is not None:
        out["instructions"] = [str(f.path) for f in config.project.instructions]
        out["skills"] = sorted(skill.name for skill in config.project.skills)
    return out


def _mcp_config(servers: McpConfig | Mapping[str, Any] | None) -> McpConfig | None:
    """The run's MCP configuration, or None when it has no server."""
    if servers is None:
        return None
    from runtime.mcp import McpConfig as _McpConfig

    config = servers if isinstance(servers, _McpConfig) else _McpConfig.from_mapping(servers)
    return config if config.servers or config.warnings else None


def _refuse_mcp_on_ray(atype: AgentType) -> None:
    """MCP connections live in this process and are not forwarded to Ray workers
    (docs/cluster.md): an agent type placed on Ray may not list MCP tools."""
    import fnmatch

    for name in atype.tools or ():
        globbed = any(c in name for c in "*?[") and fnmatch.fnmatchcase("mcp__s__t", name)
        if name.startswith("mcp__") or globbed:
            raise ConfigError(
                f"agent type {atype.name!r} is placed on ray and lists MCP tools ({name!r}); "
                "MCP servers run in the driver and their tools are not forwarded to Ray "
                "workers: place it locally or drop the MCP tools (docs/cluster.md)"
            )


def tool_name_known(name: str, tool_map: Mapping[str, Tool] | Mapping[str, object]) -> bool:
    """Whether a definition file's tool *name* can be served by this run (MCP tools and globs
    are known once their servers have started)."""
    return name in tool_map or name.startswith("mcp__") or any(c in name for c in "*?[")


def _version() -> str:
    from runtime.core import VERSION as __version__

    return __version__
