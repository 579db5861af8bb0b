"""
Scenarios: a simulated node described in YAML (simulator/scenario.schema.json), built into a folder.

Build order follows the story a node lives: chips, registered devices, pods (their CRI states),
vNPUs in the order listed (so the driver's lowest-free-id rule gives the ids written), attaches,
checkpoint entries, then holder processes for `held` vNPUs.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml
from jsonschema import Draft202012Validator, ValidationError

from simulator.node import SimNode
from simulator.state import ToolError

SCHEMA = Path(__file__).with_name("scenario.schema.json")
DEFAULT_HOLD_SECONDS = 3600


class ScenarioError(ValueError):
    """A scenario that cannot be built; each problem names the path of the bad key."""

    def __init__(self, problems: list[str]):
        super().__init__("\n".join(problems))
        self.problems = problems


def _key_path(error: ValidationError) -> str:
    """The JSON path of the offending key: for a missing or unknown key, the key itself."""
    path = error.json_path
    instance = error.instance if isinstance(error.instance, dict) else {}
    if error.validator == "required":
        missing = [k for k in error.validator_value if k not in instance]
        return f"{path}.{missing[0]}" if missing else path
    if error.validator == "additionalProperties":
        known = set(error.schema.get("properties", {}))
        extra = sorted(set(instance) - known)
        return f"{path}.{extra[0]}" if extra else path
    return path


def validate(doc: Any) -> None:
    schema = json.loads(SCHEMA.read_text())
    errors = sorted(Draft202012Validator(schema).iter_errors(doc), key=lambda e: e.json_path)
    if errors:
        raise ScenarioError([f"{_key_path(e)}: {e.message}" for e in errors])
    _check_references(doc)


def load(path: Path | str) -> dict[str, Any]:
    """Read and validate a scenario file."""
    try:
        doc = yaml.safe_load(Path(path).read_text())
    except yaml.YAMLError as err:
        raise ScenarioError([f"$: not YAML ({err})"]) from err
    validate(doc)
    return doc


# --- checks the schema cannot express ---------------------------------------------------------


def _duplicates(values: Iterable[Any]) -> list[Any]:
    seen: set[Any] = set()
    dups = []
    for value in values:
        if value in seen:
            dups.append(value)
        seen.add(value)
    return dups


def _check_references(doc: Mapping[str, Any]) -> None:
    problems: list[str] = []
    chips = {(c["card"], c["chip"]): c for c in doc["chips"]}
    pods = {p["name"]: p for p in doc.get("pods", [])}
    if dup := _duplicates((c["card"], c["chip"]) for c in doc["chips"]):
        problems.append(f"$.chips: card/chip listed twice: {dup}")
    for key, values in (
        ("uid", [p["uid"] for p in pods.values()]),
        ("name", [p["name"] for p in doc.get("pods", [])]),
    ):
        if dup := _duplicates(values):
            problems.append(f"$.pods: {key} listed twice: {dup}")
    for i, vnpu in enumerate(doc.get("vnpus", [])):
        problems += _vnpu_problems(f"$.vnpus[{i}]", vnpu, chips, pods)
    for i, alloc in enumerate(doc.get("allocations", [])):
        problems += _allocation_problems(f"$.allocations[{i}]", alloc, pods)
    if problems:
        raise ScenarioError(problems)


def _vnpu_problems(
    where: str,
    vnpu: Mapping[str, Any],
    chips: Mapping[tuple[int, int], Any],
    pods: Mapping[str, Any],
) -> list[str]:
    chip = chips.get((vnpu["card"], vnpu["chip"]))
    if chip is None:
        return [f"{where}.chip: no chip {vnpu['card']}:{vnpu['chip']} in $.chips"]
    if vnpu["template"] not in chip["templates"]:
        return [
            f"{where}.template: {vnpu['template']!r} is not a template of chip "
            f"{vnpu['card']}:{vnpu['chip']} ({sorted(chip['templates'])})"
        ]
    if "pod" not in vnpu:
        return []
    pod = pods.get(vnpu["pod"])
    if pod is None:
        return [f"{where}.pod: no pod named {vnpu['pod']!r} in $.pods"]
    if pod["state"] == "Pending":
        return [f"{where}.pod: pod {vnpu['pod']!r} is Pending: it has no container to attach"]
    if vnpu.get("container", _first_container(pod)) not in pod.get("containers", ["main"]):
        return [f"{where}.container: pod {vnpu['pod']!r} has no container {vnpu['container']!r}"]
    return []


def _allocation_problems(
    where: str, alloc: Mapping[str, Any], pods: Mapping[str, Any]
) -> list[str]:
    if "pod" not in alloc:
        return []
    pod = pods.get(alloc["pod"])
    if pod is None:
        return [f"{where}.pod: no pod named {alloc['pod']!r} in $.pods"]
    if alloc.get("container", _first_container(pod)) not in pod.get("containers", ["main"]):
        return [f"{where}.container: pod {alloc['pod']!r} has no container {alloc['container']!r}"]
    return []


def _first_container(pod: Mapping[str, Any]) -> str:
    return pod.get("containers", ["main"])[0]


# --- building ----------------------------------------------------------------------------------


def build(doc: Mapping[str, Any], node_dir: Path | str) -> SimNode:
    """Build a validated scenario into `node_dir` (which must not hold a node yet)."""
    node = SimNode.create(
        node_dir,
        doc["chips"],
        boot_id=doc.get("boot_id"),
        npu_smi_version=doc.get("npu_smi_version", "25.5.2"),
        mcu=doc.get("mcu", True),
    )
    for resource, ids in doc.get("registered", {}).items():
        node.register(resource, ids)
    pods = {p["name"]: p for p in doc.get("pods", [])}
    _add_pods(node, doc.get("pods", []))
    held = _add_vnpus(node, doc.get("vnpus", []), pods)
    _add_allocations(node, doc.get("allocations", []), pods)
    for vnpu_id, pod_uid in held:
        # The pod is recorded, but its process's cgroup cannot say so: only the namespace agent
        # may mount over /proc/<pid>/cgroup, and a build may run outside any namespace.
        node.hold(
            vnpu_id,
            lifetime=doc.get("hold_seconds", DEFAULT_HOLD_SECONDS),
            detach=True,
            pod_uid=pod_uid,
        )
    return node


def _add_pods(node: SimNode, pods: list[Mapping[str, Any]]) -> None:
    start = time.time_ns() - len(pods) * 60_000_000_000  # listed order = creation order
    for i, pod in enumerate(pods):
        node.add_pod(
            pod["uid"],
            pod["name"],
            pod.get("namespace", "default"),
            pod["state"],
            containers=pod.get("containers", ["main"]),
            annotations=pod.get("annotations"),
            labels=pod.get("labels"),
            created_at=start + i * 60_000_000_000,
            **({"image": pod["image"]} if "image" in pod else {}),
        )


def _add_vnpus(
    node: SimNode, vnpus: list[Mapping[str, Any]], pods: Mapping[str, Mapping[str, Any]]
) -> list[tuple[int, str | None]]:
    """Create and attach; returns the ids to hold (and their pods) once all else is in place."""
    held: list[tuple[int, str | None]] = []
    for i, spec in enumerate(vnpus):
        try:
            vnpu_id = node.create_vnpu(
                spec["card"],
                spec["chip"],
                spec["template"],
                spec.get("id"),
                vgroup=spec.get("vgroup"),
            )
        except ToolError as refusal:
            raise ScenarioError([f"$.vnpus[{i}]: npu-smi refuses: {refusal.message}"]) from None
        if "pod" in spec:
            pod = pods[spec["pod"]]
            ctr = node.container_id(pod["uid"], spec.get("container", _first_container(pod)))
            node.attach(vnpu_id, str(ctr))
        if spec.get("held"):
            held.append((vnpu_id, pods[spec["pod"]]["uid"] if "pod" in spec else None))
    return held


def _add_allocations(
    node: SimNode, allocations: list[Mapping[str, Any]], pods: Mapping[str, Mapping[str, Any]]
) -> None:
    for alloc in allocations:
        pod = pods.get(alloc.get("pod", ""))
        uid = pod["uid"] if pod else alloc["pod_uid"]
        container = alloc.get("container") or _first_container(pod or {})
        node.allocate(
            uid,
            container,
            alloc["resource"],
            alloc["device_ids"],
            alloc.get("envs", {}),
            devices=alloc.get("devices", ()),
            annotations=alloc.get("annotations"),
        )
