"""Resource settings for Spark's driver and executors that fit the Kubernetes nodes seen.

Spark's defaults ask, per pod, 1 CPU and 1 GiB of heap plus 384 MiB of overhead,
for a driver and two executors. On a small cluster those requests cannot be
met: the executors stay Pending for good and the driver only logs "Initial job
has not accepted any resources". So ``plateau spark-conf`` reads the nodes'
allocatable CPU and memory and picks the first of a few profiles (``PROFILES``)
whose driver and executors fit. When the pods on the nodes can be listed,
what fits is what their requests leave free (``FREE_SHARE`` of it, a margin
for pods that start meanwhile), as the scheduler counts it; otherwise a share
of the allocatable (``CPU_SHARE``, ``MEMORY_SHARE``: the rest for the plateau
node itself, the system's pods and other work).

Every pod must fit on one node; in path mode every pod runs on the node that
holds the volume, so only that node counts. ``spark.executor.cores`` stays 1
(one task slot per executor): a fractional *request* only changes what the
scheduler reserves, and with no CPU limit set a pod still uses idle CPU.

Pure functions: objects in, settings out; no API server here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from decimal import Decimal, InvalidOperation
from typing import Any

CPU_SHARE = 0.5  # of a node's allocatable CPU that Spark's pods may request
MEMORY_SHARE = 0.5  # of its allocatable memory
FREE_SHARE = 0.8  # of what the pods' requests leave free on a node, when they are known
MIN_OVERHEAD_MIB = 384  # Spark's minimum memory overhead per pod (spark.*.minMemoryOverhead)
OVERHEAD_FACTOR = 0.1  # spark.{driver,executor}.memoryOverheadFactor's default


class SizingError(ValueError):
    """A size the user gave that Spark would refuse; one line, exit code 2."""


@dataclass(frozen=True)
class NodeCapacity:
    """A Kubernetes node's allocatable CPU (millicores) and memory (bytes)."""

    name: str
    cpu_millis: int
    memory_bytes: int
    schedulable: bool = True
    requested: tuple[int, int] | None = None  # its pods' requests (millicores, bytes), if known

    def budget(self) -> tuple[float, float]:
        """What Spark's pods may request here (millicores, MiB)."""
        if self.requested is None:
            return self.cpu_millis * CPU_SHARE, self.memory_bytes * MEMORY_SHARE / 2**20
        cpu = max(0, self.cpu_millis - self.requested[0]) * FREE_SHARE
        return cpu, max(0, self.memory_bytes - self.requested[1]) * FREE_SHARE / 2**20


@dataclass(frozen=True)
class Sizing:
    """The requests of the driver and of each executor, and how many executors."""

    profile: str
    driver_cores: str  # spark.kubernetes.driver.request.cores (a Kubernetes CPU quantity)
    executor_cores: str
    driver_memory: str  # spark.driver.memory (Spark's size syntax: 512m, 1g)
    executor_memory: str
    instances: int
    note: str = ""  # why this profile, or what went wrong finding one
    warn: bool = False  # note is a warning: the pods may not fit


# First fit wins. "spark-defaults" is what Spark asks when given nothing.
PROFILES = (
    Sizing("spark-defaults", "1", "1", "1g", "1g", 2),
    Sizing("medium", "0.5", "0.5", "1g", "1g", 2),
    Sizing("small", "0.25", "0.25", "512m", "512m", 1),
    Sizing("tiny", "0.1", "0.1", "512m", "512m", 1),
)
FALLBACK = PROFILES[2]  # when the nodes cannot be read

_CPU = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(m?)$")
_MEMORY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)([KMGTPE]i|[kMGTPE]|[eE][0-9]+)?$")
_SPARK_SIZE = re.compile(r"^([1-9][0-9]*)([kmgt]b?|b)?$", re.IGNORECASE)
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}
_SPARK_UNIT_MIB = {"k": 1 / 1024, "m": 1, "g": 1024, "t": 1024 * 1024, "b": 1 / 2**20}


def cpu_millis(quantity: str) -> int:
    """A Kubernetes CPU quantity (``2``, ``1500m``, ``0.25``) in millicores."""
    m = _CPU.match(str(quantity).strip())
    if not m:
        raise SizingError(f"not a CPU quantity: {quantity!r} (write 0.25, 1 or 250m)")
    value = Decimal(m.group(1))
    return int(value if m.group(2) else value * 1000)


def memory_bytes(quantity: str) -> int:
    """A Kubernetes memory quantity (``4Gi``, ``8010516Ki``, ``2G``, ``1e9``) in bytes."""
    m = _MEMORY.match(str(quantity).strip())
    if not m:
        raise SizingError(f"not a memory quantity: {quantity!r}")
    value, unit = Decimal(m.group(1)), m.group(2) or ""
    if unit in _BINARY:
        return int(value * _BINARY[unit])
    if unit in _DECIMAL:
        return int(value * _DECIMAL[unit])
    if unit[:1] in ("e", "E"):
        return int(value * Decimal(10) ** int(unit[1:]))
    return int(value)


def spark_size_mib(size: str) -> float:
    """Spark's size syntax for ``spark.*.memory`` (``512m``, ``2g``; no unit: MiB) in MiB."""
    m = _SPARK_SIZE.match(size.strip())
    if not m:
        raise SizingError(f"not a Spark memory size: {size!r} (write 512m or 2g)")
    unit = (m.group(2) or "m").lower()[0]
    return int(m.group(1)) * _SPARK_UNIT_MIB[unit]


def pod_memory_mib(heap: str) -> float:
    """What Spark asks of Kubernetes for a JVM heap: the heap plus its overhead."""
    mib = spark_size_mib(heap)
    return mib + max(MIN_OVERHEAD_MIB, mib * OVERHEAD_FACTOR)


def capacity_from_node(node: dict[str, Any]) -> NodeCapacity:
    """A ``Node`` object's allocatable; cordoned or ``NoSchedule``-tainted: not schedulable
    for pods without tolerations, which Spark's pods have none of."""
    status = node.get("status") or {}
    alloc = status.get("allocatable") or status.get("capacity") or {}
    spec = node.get("spec") or {}
    tainted = any(t.get("effect") in ("NoSchedule", "NoExecute") for t in spec.get("taints") or [])
    try:
        cpu = cpu_millis(alloc.get("cpu", "0"))
        memory = memory_bytes(alloc.get("memory", "0"))
    except (SizingError, InvalidOperation):
        cpu, memory = 0, 0  # a node reporting nonsense holds nothing
    name = (node.get("metadata") or {}).get("name", "")
    return NodeCapacity(name, cpu, memory, not spec.get("unschedulable") and not tainted)


def _fits(p: Sizing, per_pod: tuple[float, float], total: tuple[float, float]) -> bool:
    """Each pod fits one node's share, and all of them the cluster's (millicores, MiB)."""
    pods = [(cpu_millis(p.driver_cores), pod_memory_mib(p.driver_memory))]
    pods += [(cpu_millis(p.executor_cores), pod_memory_mib(p.executor_memory))] * p.instances
    return (
        all(cpu <= per_pod[0] and mib <= per_pod[1] for cpu, mib in pods)
        and sum(cpu for cpu, _ in pods) <= total[0]
        and sum(mib for _, mib in pods) <= total[1]
    )


def _describe(nodes: list[NodeCapacity]) -> str:
    cpu = sum(n.cpu_millis for n in nodes) / 1000
    gib = sum(n.memory_bytes for n in nodes) / 2**30
    what = f"node {nodes[0].name}" if len(nodes) == 1 else f"{len(nodes)} nodes"
    text = f"{what} ({cpu:g} CPU, {gib:.1f} GiB allocatable"
    known = [n.requested for n in nodes if n.requested is not None]
    if len(known) == len(nodes):
        used_cpu = sum(r[0] for r in known) / 1000
        used_gib = sum(r[1] for r in known) / 2**30
        text += f"; {used_cpu:g} CPU, {used_gib:.1f} GiB requested by its pods"
    return text + ")"


def pod_requests(pods: list[dict[str, Any]]) -> dict[str, tuple[int, int]]:
    """The CPU (millicores) and memory (bytes) the scheduler counts per node for ``pods``
    (bound, not finished): each pod's containers' requests, or its largest init container's."""
    out: dict[str, tuple[int, int]] = {}
    for pod in pods:
        spec = pod.get("spec") or {}
        node = spec.get("nodeName")
        if not node or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue

        def requests(containers: list[dict[str, Any]]) -> list[tuple[int, int]]:
            found = []
            for c in containers:
                r = (c.get("resources") or {}).get("requests") or {}
                try:
                    found.append(
                        (cpu_millis(r.get("cpu", "0")), memory_bytes(r.get("memory", "0")))
                    )
                except SizingError:
                    found.append((0, 0))
            return found

        main = requests(spec.get("containers") or [])
        init = requests(spec.get("initContainers") or [])
        cpu = max([sum(c for c, _ in main), *(c for c, _ in init)])
        mem = max([sum(m for _, m in main), *(m for _, m in init)])
        used = out.get(node, (0, 0))
        out[node] = (used[0] + cpu, used[1] + mem)
    return out


def choose(nodes: list[NodeCapacity], host: str | None = None) -> Sizing:
    """The first profile whose pods fit ``nodes`` (only ``host`` when the pods are pinned
    there); the smallest, with a warning in ``note``, when none does."""
    if host is not None:
        pool = [n for n in nodes if n.name == host]
        if not pool:
            return replace(FALLBACK, note=f"no Kubernetes node {host}: sized small", warn=True)
    else:
        pool = [n for n in nodes if n.schedulable] or nodes
    if not pool:
        return replace(FALLBACK, note="no Kubernetes node found: sized small", warn=True)
    budgets = [n.budget() for n in pool]
    per_pod = (max(cpu for cpu, _ in budgets), max(mib for _, mib in budgets))
    total = (sum(cpu for cpu, _ in budgets), sum(mib for _, mib in budgets))
    where = _describe(pool)
    for profile in PROFILES:
        if _fits(profile, per_pod, total):
            return replace(profile, note=f"sized '{profile.profile}' for {where}")
    smallest = PROFILES[-1]
    return replace(
        smallest,
        note=f"{where} is too small even for the '{smallest.profile}' sizing: "
        f"Spark's pods may stay Pending",
        warn=True,
    )


KEYS = {  # Spark's key: the SparkApplication's role and field
    "spark.executor.instances": ("executor", "instances"),
    "spark.driver.memory": ("driver", "memory"),
    "spark.executor.memory": ("executor", "memory"),
    "spark.kubernetes.driver.request.cores": ("driver", "coreRequest"),
    "spark.kubernetes.executor.request.cores": ("executor", "coreRequest"),
}


def settings(s: Sizing) -> dict[str, str]:
    values = (s.instances, s.driver_memory, s.executor_memory, s.driver_cores, s.executor_cores)
    return {key: str(v) for key, v in zip(KEYS, values, strict=True)}


def overrides(
    *,
    instances: int | None = None,
    driver_memory: str | None = None,
    executor_memory: str | None = None,
    driver_cores: str | None = None,
    executor_cores: str | None = None,
) -> dict[str, str]:
    """The sizes the user gave, each checked as Spark would read it, by Spark's key."""
    for size in (driver_memory, executor_memory):
        if size is not None:
            spark_size_mib(size)
    for cores in (driver_cores, executor_cores):
        if cores is not None and cpu_millis(cores) <= 0:
            raise SizingError(f"a CPU request must be above 0, not {cores!r}")
    if instances is not None and instances < 1:
        raise SizingError(f"--executor-instances must be at least 1, not {instances}")
    given = (instances, driver_memory, executor_memory, driver_cores, executor_cores)
    return {key: str(v) for key, v in zip(KEYS, given, strict=True) if v is not None}


def sparkapplication(values: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Sizing settings as a ``SparkApplication``'s ``driver`` and ``executor`` fields."""
    out: dict[str, dict[str, Any]] = {}
    for key, value in values.items():
        role, field = KEYS[key]
        out.setdefault(role, {})[field] = int(value) if field == "instances" else value
    return out
