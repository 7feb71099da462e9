"""``tune-agent doctor --ray-address``: the Ray cluster a study would run its trials on, its nodes,
their resources, and whether each has what a trial needs (tune-agent, torch, Lightning, the job's
module)."""

from __future__ import annotations

from importlib import metadata
from typing import Any

from agent.execution.options import ray_address_problem
from agent.ops.checks import FAIL, OK, WARN, Check


def _findable(module: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package that is not there
        return False


def _node_report(job_module: str | None = None) -> dict[str, Any]:
    """Run on each node: what a trial there needs, installed or not (found, not imported: a probe
    that imported torch would take seconds per node), and whether the job's module is found
    (in the shipped ``--ray-working-dir`` when there is one: the probe runs where a trial would)."""
    import socket

    report: dict[str, Any] = {"host": socket.gethostname()}
    if job_module is not None:
        report["job"] = _findable(job_module)
    missing = [m for m in ("agent", "torch", "lightning") if not _findable(m)]
    if missing:
        report["error"] = f"{', '.join(missing)} not installed (install tune-agent there)"
        return report
    import agent

    report.update(
        agent=getattr(agent, "__version__", "?"),
        torch=metadata.version("torch"),
        lightning=metadata.version("lightning"),
    )
    return report


def _job_module(job: str | None) -> str | None:
    """The module a ``--job`` spec needs on the workers (``pkg.mod:attr``); None for a built-in job."""
    from agent.jobs.registry import YAHPO_PREFIX

    if not job or ":" not in job or job.startswith(YAHPO_PREFIX):
        return None
    return job.split(":", 1)[0]


def ray_checks(
    address: str, timeout: float = 60.0, job: str | None = None, working_dir: str | None = None, resources: Any = None
) -> list[Check]:
    """The cluster at ``address``: nodes alive and their resources, how many trials of
    ``resources`` fit at once, then one task per node that looks for what a trial needs (every
    node needs tune-agent installed, and ``job``'s module, or ``working_dir`` shipped to it)."""
    from agent.execution.resources import TrialResources

    resources = resources or TrialResources()
    job_module = _job_module(job)
    problem = ray_address_problem(address)
    if problem is not None:
        return [Check("ray cluster", FAIL, problem)]
    import logging

    import ray

    logging.getLogger("ray").setLevel(logging.ERROR)
    started = ray.is_initialized()
    try:
        if not started:
            logging.getLogger("ray._private.runtime_env.packaging").setLevel(logging.WARNING)
            runtime_env = {"working_dir": working_dir} if working_dir else None
            ray.init(address=address, log_to_driver=False, configure_logging=False, runtime_env=runtime_env)
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        out = _cluster_checks(address, nodes, resources)
        reports = _probe_nodes(nodes, job_module, timeout)
    except Exception as exc:
        text = str(exc).strip()
        return [Check("ray cluster", FAIL, f"{address}: {text.splitlines()[0] if text else type(exc).__name__}")]
    finally:
        if not started and ray.is_initialized():
            ray.shutdown()
    return out + _node_checks(reports, job_module, working_dir)


def _cluster_checks(address: str, nodes: list[dict[str, Any]], resources: Any) -> list[Check]:
    """The cluster's nodes and resources, and how many trials of ``resources`` fit at once."""
    import ray

    from agent.execution.resources import trial_slots

    cpus = sum(n.get("Resources", {}).get("CPU", 0) for n in nodes)
    gpus = sum(n.get("Resources", {}).get("GPU", 0) for n in nodes)
    slots = trial_slots(nodes, resources)
    return [
        Check(
            "ray cluster",
            OK,
            f"{address}: ray {ray.__version__}, {len(nodes)} node(s) alive, {cpus:g} CPUs, {gpus:g} GPUs",
        ),
        Check(
            "ray trials at once",
            OK if slots else WARN,
            f"{slots} trial(s) of {resources.describe()} fit at once (--workers up to {slots})"
            if slots
            else f"no node has {resources.describe()} for a trial (--cpus-per-trial, --gpus-per-trial): a study's "
            "trials would wait for a node that has",
        ),
    ]


def _probe_nodes(nodes: list[dict[str, Any]], job_module: str | None, timeout: float) -> list[dict[str, Any]]:
    """Each node's :func:`_node_report`, from one task pinned to it; an error for one silent for ``timeout``."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    probe = ray.remote(num_cpus=0, max_retries=0)(_node_report)
    refs = [
        probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote(job_module)
        for n in nodes
    ]
    ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout)
    silent = f"no answer in {timeout:g} s (the probe needs no CPU: is the node overloaded?)"
    return [
        ray.get(r) if r in ready else {"host": n.get("NodeManagerAddress", "?"), "error": silent}
        for r, n in zip(refs, nodes)
    ]


def _node_checks(reports: list[dict[str, Any]], job_module: str | None, working_dir: str | None) -> list[Check]:
    """What the nodes' reports say: tune-agent, torch and Lightning installed there (and their
    versions against this machine's), and ``job_module`` found there when the job needs one."""
    import agent

    broken = [f"{r['host']}: {r['error']}" for r in reports if "error" in r]
    mine = (getattr(agent, "__version__", "?"), metadata.version("torch"))
    differ = sorted(
        {
            f"{r['host']}: tune-agent {r['agent']}, torch {r['torch']}"
            for r in reports
            if "error" not in r and (r["agent"], r["torch"]) != mine
        }
    )
    fine = len(reports) - len(broken)
    detail = f"tune-agent, torch and Lightning installed on {fine} of {len(reports)} node(s)"
    if broken:
        detail += f"; cannot run a trial on {'; '.join(broken)}"
    if differ:
        detail += f"; versions differ from this machine's (tune-agent {mine[0]}, torch {mine[1]}): {'; '.join(differ)}"
    out = [Check("ray nodes", FAIL if broken else WARN if differ else OK, detail)]
    if job_module is not None:
        lacking = [r["host"] for r in reports if r.get("job") is False]
        shipped = f" in the shipped {working_dir}" if working_dir else ""
        out.append(
            Check(
                "ray job code",
                FAIL if lacking else OK,
                f"module {job_module!r} not found{shipped} on {len(lacking)} of {len(reports)} node(s) "
                f"({', '.join(sorted(set(lacking)))}): install it there, or ship the folder that holds it with "
                "--ray-working-dir DIR"
                if lacking
                else f"module {job_module!r} found{shipped} on {len(reports)} of {len(reports)} node(s)",
            )
        )
    return out
