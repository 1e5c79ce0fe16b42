"""The public runtime: :func:`open_runtime` owns one run — its root nursery, bus, sinks and agents.

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
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import attrs
import trio

from runtime._logs import get_logger
from runtime.core._agent_types import AgentType, AgentTypes
from runtime.core._approvals import PermissionBroker
from runtime.core._bus import EventBus
from runtime.core._context import new_run_context
from runtime.core._errors import AgentsError, ConfigError
from runtime.core._events import RunFinished, RunStarted
from runtime.core._lazylog import LazyLogger
from runtime.core._limits import Limits
from runtime.core._permissions import PermissionPolicy
from runtime.core._provider import Provider
from runtime.core._runtime import Runtime
from runtime.core._sandbox import Sandbox
from runtime.core._secrets import (
    log_secrets,
    redactor_for,
    run_environ,
    scan_env,
    scan_run_environ,
)
from runtime.core._tool import ToolLimits
from runtime.providers._scenario import (
    Scenario,
    agent_types_from_scenario,
    scenario_from_mapping,
)
from runtime.providers._scripted import ScriptedProvider
from runtime.trace._sinks import JsonlSink, PipeSink, open_pipe_writer, open_trace_file

if TYPE_CHECKING:
    from runtime.cluster._placement import RayOptions
    from runtime.mcp import McpConfig
    from runtime.project import Project
    from tools import Tool

_CANCEL_BY = ("user", "control", "budget", "runtime")
# It picks its way when it logs (the application's structlog, or logging): one serves every run.
_LOG = get_logger("trio_agents")
DEFAULT_TRACE_DIR = Path(".trio-agents") / "traces"


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
    from tools import builtin_tools  # tools imports runtime modules

    return builtin_tools()


@asynccontextmanager
async def open_runtime(
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
    permission_timeout_s: float = 300.0,
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
    otlp: str | bool | None = None,
) -> AsyncGenerator[Runtime, None]:
    """Open a run: its bus, trace file, provider and root nursery. An async context manager::

        async with open_runtime("anthropic", workspace="repo") as rt:
            outcome = await rt.run("Find the TODOs")

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
            ``RAY_ADDRESS``; with neither, a local cluster is started for the run).
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
            ``RAY_ADDRESS``; with neither, a private local cluster is started for the run).
        ray: how the ``ray`` placement uses the cluster (hosts per node, spread or pack,
            timeouts): :class:`~runtime.cluster.RayOptions`.
        otlp: live OpenTelemetry spans (docs/observability.md): a collector's URL, ``False``
            for none, or None for what the ``OTEL_EXPORTER_OTLP_*`` variables of *env* say.
            Needs ``trio-agents[otel]`` (:class:`ConfigError` without it for a URL; a warning
            for the variables).

    On leaving the block, running root agents are awaited (leave by cancelling to stop them);
    then ``run_finished`` is emitted and the trace closed — also when the block raises or is
    cancelled, in which case every running node first ends ``cancelled``.
    """
    limits = limits or _default_limits()
    t0 = trio.current_time()
    run_id = run_id or new_run_id()
    # Setting up a run touches the disk a few times before anything runs; that is fine.
    ws = _path(_real_folder(workspace))
    if project is not None and project.workspace != ws:
        raise ConfigError(f"the project was loaded for {project.workspace}, not the workspace {ws}")
    scen: Scenario | None = None
    scen_types: Iterable[AgentType] = ()
    if isinstance(scenario, Mapping):
        scen, scen_types = scenario_from_mapping(scenario)  # checked once per distinct object
    elif scenario is not None:
        scen = scenario if isinstance(scenario, Scenario) else Scenario.load(scenario)
        scen_types = agent_types_from_scenario(scen)
    if provider is None:
        provider = "scripted" if scen is not None else "openai"
    tool_list = list(_default_tools() if tools is None else tools) + list(extra_tools)
    tool_map: dict[str, Tool] = {}
    for tool in tool_list:
        if tool.name in tool_map:
            raise ConfigError(f"two tools are named {tool.name!r}")
        tool_map[tool.name] = tool
    mcp_config = _mcp_config(mcp_servers)
    if project is not None and project.skills and "skill" not in tool_map:
        from tools import SkillTool

        tool_map["skill"] = SkillTool(project.skills)
    types = AgentTypes(scen_types)
    for t in project.agent_types if project is not None else ():
        # A definition file may name a tool this run lacks (an MCP server not configured):
        # the agent goes without it rather than the run failing on a file it cannot fix.
        # MCP names and globs are kept: their servers start below.
        tools_of = (
            None if t.tools is None else tuple(n for n in t.tools if tool_name_known(n, tool_map))
        )
        types.add(attrs.evolve(t, tools=tools_of))
    for t in agent_types:
        types.add(t)
    for t in types.values():
        if mcp_config is not None and t.placement == "ray" and t.tools is not None:
            _refuse_mcp_on_ray(t)
        for name in t.tools or ():
            if not tool_name_known(name, tool_map):  # MCP tools are known once their servers start
                raise ConfigError(
                    f"agent type {t.name!r} names unknown tool {name!r}; "
                    f"known tools: {', '.join(sorted(tool_map))}"
                )
    allow, deny = tuple(allow), tuple(deny)  # iterated twice: the policy and run_started
    # The process's environment (the default) is copied only for the parts that read it.
    given_env = None if env is None else dict(env)

    def base_env() -> dict[str, str]:
        return run_environ() if given_env is None else given_env

    allow_env = tuple(allow_env)
    # Scanned once per distinct environment in the process, not per run.
    if given_env is None:
        run_env, secret_list = scan_run_environ(allow_env)
    else:
        run_env, secret_list = scan_env(given_env, allow_env)
    trace_path: Path | None = None
    if trace is True:
        trace_path = Path(trace_dir or DEFAULT_TRACE_DIR) / f"{run_id}.jsonl"
    elif trace is not False:
        trace_path = Path(trace)
    # Files no tool may change, whatever the mode: .mcp.json (its commands run when the next
    # run starts) and this run's trace (the audit trail), wherever it lies.
    ws_str = str(ws)
    protected = [os.path.join(ws_str, ".mcp.json")]
    if trace_path is not None:
        protected.append(str(Path(os.path.abspath(trace_path))))  # noqa: ASYNC240 - no I/O
    policy = PermissionPolicy(
        mode=permission_mode,
        allow=allow,
        deny=deny,
        workspace=ws,
        protected=tuple(protected),
    )
    box: Sandbox | None = None
    if sandbox:
        box = sandbox if isinstance(sandbox, Sandbox) else Sandbox()
        # The runtime's own files stay read-only to sandboxed commands.
        own = [str(ws / ".trio-agents"), str(ws / ".mcp.json")]
        if trace_path is not None:
            own.append(str(trace_path.parent.resolve()))
        box = attrs.evolve(box, read_only=(*box.read_only, *own))
        await trio.to_thread.run_sync(box.check, ws)

    async with AsyncExitStack() as stack:
        if isinstance(provider, str):
            if provider == "scripted":
                if scen is None:
                    raise ConfigError("the scripted provider needs a scenario (--scenario FILE)")
                prov: Provider = ScriptedProvider(scen)
            else:
                from runtime.providers import open_provider  # httpx only when needed

                prov = await stack.enter_async_context(
                    open_provider(provider, model=model, env=base_env())
                )
        else:
            prov = provider
        mcp = None
        if mcp_config is not None:
            from runtime.mcp import open_mcp_servers  # the SDK is heavy: only when configured

            mcp = await stack.enter_async_context(
                open_mcp_servers(
                    mcp_config,
                    env=run_env,
                    environ=base_env(),
                    workspace=ws,
                    secrets=secret_list,
                )
            )
            for tool in mcp.tools:
                if tool.name in tool_map:
                    raise ConfigError(f"two tools are named {tool.name!r}")
                tool_map[tool.name] = tool
            secret_list = mcp.secrets
        placements: dict[str, Any] = {}
        if any(t.placement == "ray" for t in types.values()):
            from runtime.cluster._placement import (
                open_ray_placement,  # Ray is heavy: only for runs that use it
            )

            placements["ray"] = await stack.enter_async_context(
                open_ray_placement(
                    address=ray_address or base_env().get("RAY_ADDRESS"),
                    options=ray,
                )
            )
        # Every event's strings are masked at the bus; log lines too, while the run is open.
        bus = EventBus(run_id, redactor=redactor_for(secret_list))
        if secret_list:  # masking nothing changes nothing (most runs)
            stack.enter_context(log_secrets(secret_list))
        sinks: list[JsonlSink] = []
        trace_sink: JsonlSink | None = None
        if trace_path is not None:
            # Locked, 0600, never through a symlink (runtime/trace/_sinks.py).
            trace_file = open_trace_file(trace_path)
            trace_sink = JsonlSink(trace_file, name="trace", close_file=True, watch=trace_path)
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
        if on_event is not None:
            bus.add_tap(on_event)
        if otlp is not False:
            from runtime.core._propagation import propagating
            from runtime.trace._otel import open_live_spans  # the SDK only if spans go out

            live_spans = open_live_spans(otlp, base_env(), version=_version(), warn=_LOG.warning)
            if live_spans is not None:
                bus.add_tap(live_spans)
                stack.push_async_callback(live_spans.aclose)  # a bounded flush, after the run
                # Model calls carry a traceparent naming their chat span (docs/observability.md).
                stack.enter_context(propagating(live_spans.trace_headers))
        run = new_run_context(
            run_id=run_id,
            bus=bus,
            provider=prov,
            model=model or getattr(prov, "model", None) or "scripted",
            agent_types=types,
            tools=tool_map,
            tool_limits=tool_limits or _tool_limits(limits.max_tool_output_chars),
            limits=limits,
            workspace=ws,
            env=run_env,
            secrets=secret_list,
            broker=PermissionBroker(bus, policy, timeout_s=permission_timeout_s),
            log=LazyLogger(_LOG, run_id=run_id),
            sandbox=box,
            placements=placements,
            system_prompt=project.system_prompt() if project is not None else None,
        )
        runtime_box: list[Runtime] = []
        config = {
            **prov.describe(),
            "provider": prov.name,
            "model": run.model,
            "workspace": ws_str,
            "permission_mode": permission_mode,
            "limits": limits.public(),
            "agent_types": sorted(types),
            "sandbox": None if box is None else {"network": box.network},
            "permission_rules": {"allow": [str(r) for r in allow], "deny": [str(r) for r in deny]},
        }
        if mcp is not None:
            config["mcp_servers"] = mcp.describe()
        if project is not None:
            config["instructions"] = [str(f.path) for f in project.instructions]
            config["skills"] = sorted(skill.name for skill in project.skills)
        try:
            bus.emit_nowait(
                RunStarted,
                agent_id=None,
                parent_tool_use_id=None,
                version=_version(),
                config=config,
            )
            async with trio.open_nursery() as nursery:
                for writer in writers:
                    nursery.start_soon(writer.run)
                run.budget.serve_in(nursery)  # its task starts with the first budget

                def core_failed(exc: Exception) -> None:
                    nursery.cancel_scope.cancel(reason=f"the runtime failed: {exc!r}")

                bus.on_core_failure = core_failed
                rt = Runtime(run, nursery, trace_path)
                runtime_box.append(rt)
                try:
                    yield rt
                    await rt._wait_roots()
                finally:
                    rt._closing = True
                    if nursery.child_tasks:  # else nothing is left to stop (and no checkpoint
                        # follows in this scope): a cancel here would be pure cost (issue 20)
                        nursery.cancel_scope.cancel(reason="the run is over")
        finally:
            status = runtime_box[0].final_status() if runtime_box else "cancelled"
            if bus.core_error is not None:
                status = "failed"
            if not bus.closed:
                try:
                    bus.emit_nowait(
                        RunFinished,
                        agent_id=None,
                        parent_tool_use_id=None,
                        status=status,
                        duration_s=trio.current_time() - t0,
                    )
                finally:
                    bus.close()
        if bus.core_error is not None:
            raise AgentsError(
                f"the run failed: the runtime's own bookkeeping raised {bus.core_error!r}"
            ) from bus.core_error


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
    from runtime.core._version import VERSION as __version__

    return __version__
