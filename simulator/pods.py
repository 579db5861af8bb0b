"""
The pods of the simulated node as the CRI shows them (crictl's; output in crictl.py), the
kubelet device-plugin checkpoint entries, and gpustack's per-pod work trees.
"""

from __future__ import annotations

import hashlib
import shutil
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from simulator.state import GPUSTACK_PODS, State, Store

# Pod phase -> (sandbox state, container state), as kubelet drives the CRI; None: not created yet.
PHASES: dict[str, tuple[str | None, str | None]] = {
    "Pending": (None, None),  # admitted (devices allocated), no sandbox yet
    "ContainerCreating": ("SANDBOX_READY", "CONTAINER_CREATED"),
    "Running": ("SANDBOX_READY", "CONTAINER_RUNNING"),
    "Terminating": ("SANDBOX_READY", "CONTAINER_RUNNING"),  # inside the grace period
    "Succeeded": ("SANDBOX_NOTREADY", "CONTAINER_EXITED"),
    "Failed": ("SANDBOX_NOTREADY", "CONTAINER_EXITED"),
}
DEFAULT_IMAGE = "docker.io/library/ubuntu:22.04"


def _hex_id(*parts: object) -> str:
    """A stable 64-hex CRI id, so a scenario builds the same ids every time."""
    return hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest()


def _apply_phase(pod: State, sandbox_state: str | None, container_state: str | None) -> None:
    now = time.time_ns()
    if sandbox_state is None:
        pod["sandbox"] = None
    elif pod["sandbox"] is None:
        pod["sandbox"] = {
            "id": _hex_id("sandbox", pod["uid"], 0),
            "state": sandbox_state,
            "attempt": 0,
            "created_at": max(now, pod["created_at"]),
        }
    else:
        pod["sandbox"]["state"] = sandbox_state
    for ctr in pod["containers"]:
        if container_state is None:
            ctr.update(id=None, state=None)
        elif ctr["id"] is None:
            ctr.update(
                id=_hex_id("container", pod["uid"], ctr["name"], ctr["attempt"]),
                state=container_state,
                created_at=pod["sandbox"]["created_at"] + 1,
            )
        else:
            ctr["state"] = container_state


class PodModel(Store):
    """The pods, checkpoint entries and registered devices of the node's state."""

    def add_pod(
        self,
        uid: str,
        name: str,
        namespace: str = "default",
        phase: str = "Running",
        *,
        containers: Sequence[str] = ("main",),
        annotations: Mapping[str, str] | None = None,
        labels: Mapping[str, str] | None = None,
        image: str = DEFAULT_IMAGE,
        created_at: int | None = None,
    ) -> None:
        """A pod on this node, its sandbox and containers in the states kubelet gives `phase`."""
        with self._mutate() as state:
            if any(p["uid"] == uid for p in state["pods"]):
                raise ValueError(f"pod {uid} exists")
            pod = {
                "uid": uid,
                "name": name,
                "namespace": namespace,
                "phase": phase,
                "annotations": dict(annotations or {}),
                "labels": dict(labels or {}),
                "image": image,
                "created_at": created_at or time.time_ns(),
                "sandbox": None,
                "containers": [
                    {"name": c, "id": None, "state": None, "attempt": 0, "created_at": None}
                    for c in containers
                ],
            }
            _apply_phase(pod, *_phase_states(phase))
            state["pods"].append(pod)

    def set_pod_state(
        self,
        uid: str,
        phase: str,
        *,
        sandbox_state: str | None = None,
        container_state: str | None = None,
    ) -> None:
        """Move a pod to `phase`; the keyword arguments override the sandbox/container state."""
        sandbox, container = _phase_states(phase)
        with self._mutate() as state:
            pod = _pod(state, uid)
            pod["phase"] = phase
            _apply_phase(pod, sandbox_state or sandbox, container_state or container)

    def retry_containers(self, uid: str) -> None:
        """kubelet's next attempt at a pod's containers: a new CRI id each, created now."""
        with self._mutate() as state:
            pod = _pod(state, uid)
            for ctr in pod["containers"]:
                attempt = ctr["attempt"] + 1
                ctr.update(
                    id=_hex_id("container", uid, ctr["name"], attempt),
                    attempt=attempt,
                    state="CONTAINER_CREATED",
                    created_at=time.time_ns(),
                )

    def remove_pod(self, uid: str) -> None:
        """The pod leaves the CRI (its checkpoint entries stay: see `release()`)."""
        with self._mutate() as state:
            state["pods"].remove(_pod(state, uid))

    def sandbox_id(self, uid: str) -> str | None:
        sandbox = _pod(self.state(), uid)["sandbox"]
        return sandbox["id"] if sandbox else None

    def container_id(self, uid: str, name: str | None = None) -> str | None:
        """The 64-hex CRI id of a pod's container (default: its first); None: not created."""
        for ctr in _pod(self.state(), uid)["containers"]:
            if name is None or ctr["name"] == name:
                return ctr["id"]
        raise KeyError(f"pod {uid} has no container {name}")

    # --- kubelet checkpoint -------------------------------------------------------------------

    def allocate(
        self,
        pod_uid: str,
        container: str,
        resource: str,
        device_ids: Sequence[str],
        envs: Mapping[str, str],
        *,
        devices: Sequence[str] = (),
        annotations: Mapping[str, str] | None = None,
        permissions: str = "rw",
        alloc_resp: str | None = None,
    ) -> None:
        """
        A checkpoint entry, as kubelet records an Allocate(); replaces the same key's entry.
        `permissions`: its DeviceSpecs' (KubeVirt's and GKE's plugins write "mrw").
        `alloc_resp`: the response as the plugin encoded it (simulator.device_plugins), which
        the checkpoint then holds instead of one made from `envs`, `devices`, `annotations`.
        """
        entry = {
            "pod_uid": pod_uid,
            "container": container,
            "resource": resource,
            "device_ids": list(device_ids),
            "envs": dict(envs),
            "devices": list(devices),
            "annotations": dict(annotations or {}),
            "permissions": permissions,
        }
        if alloc_resp is not None:
            entry["alloc_resp"] = alloc_resp
        key = (pod_uid, container, resource)
        with self._mutate() as state:
            state["checkpoint"] = [e for e in state["checkpoint"] if _entry_key(e) != key]
            state["checkpoint"].append(entry)

    def release(self, pod_uid: str) -> None:
        """Drop every checkpoint entry of a pod (kubelet does when the pod is deleted)."""
        with self._mutate() as state:
            state["checkpoint"] = [e for e in state["checkpoint"] if e["pod_uid"] != pod_uid]

    def register(self, resource: str, device_ids: Sequence[str]) -> None:
        """The device plugin's registered ids (the checkpoint's RegisteredDevices)."""
        self.list_and_watch(resource, device_ids)

    # Kubelet's device manager, as it writes RegisteredDevices (kubernetes/kubernetes
    # pkg/kubelet/cm/devicemanager/manager.go @7510f32987feb7efbaced9aec1ca15303dea252b):
    # writeCheckpoint (490-508) writes each resource's healthy devices only. State "unhealthy"
    # holds its unhealthyDevices, which the file never shows.

    def list_and_watch(
        self, resource: str, healthy: Sequence[str], unhealthy: Sequence[str] = ()
    ) -> None:
        """
        A plugin's ListAndWatch answer (genericDeviceUpdateCallback, 267-320): its devices as it
        calls them, Healthy or Unhealthy; the checkpoint is written with the healthy ones. A
        plugin (re)connecting sends its whole list this way.
        """
        with self._mutate() as state:
            state["registered"][resource] = list(healthy)
            state.setdefault("unhealthy", {})[resource] = list(unhealthy)

    def mark_unhealthy(self, resource: str, device_ids: Sequence[str]) -> None:
        """The plugin calls these devices Unhealthy (a health check, an XID): gone from the file."""
        state = self.state()
        healthy = [d for d in state["registered"].get(resource, []) if d not in device_ids]
        before = state.get("unhealthy", {}).get(resource, [])
        self.list_and_watch(resource, healthy, [*before, *device_ids])

    def plugin_disconnected(self, resource: str) -> None:
        """
        The plugin goes away (PluginDisconnected, 241-253; markResourceUnhealthy, 415-426): every
        device of its resource unhealthy, the resource listed with no device at the next write
        (any plugin's update, an allocation), here at once.
        """
        state = self.state()
        devices = [
            *state["registered"].get(resource, []),
            *state.get("unhealthy", {}).get(resource, []),
        ]
        self.list_and_watch(resource, [], devices)

    def plugin_expired(self, resource: str) -> None:
        """
        The plugin has been gone longer than endpointStopGracePeriod (5 minutes, types.go:119
        @28f88c77b624e791a77e34a1bee006efccda3ae2): GetCapacity (428-488) deletes the resource
        and writes the checkpoint without it.
        """
        with self._mutate() as state:
            state["registered"].pop(resource, None)
            state.setdefault("unhealthy", {}).pop(resource, None)

    def unregister(self, resource: str) -> None:
        """kubelet forgets a resource whose plugin has been gone past its grace (5 minutes:
        devicemanager's endpointStopGracePeriod); its entries stay."""
        with self._mutate() as state:
            state["registered"].pop(resource, None)

    def annotate_in_api(self, uid: str, annotations: Mapping[str, str]) -> None:
        """
        Annotations written to the pod in the API server after its sandbox was made (a device
        plugin's): the API shows them, the CRI sandbox keeps what kubelet gave it.
        """
        with self._mutate() as state:
            _pod(state, uid).setdefault("api_annotations", {}).update(annotations)

    # --- gpustack's pod work trees ----------------------------------------------------------------

    def marker_dir(self, pod_uid: str, root: str = GPUSTACK_PODS) -> Path:
        """`<rootfs><root>/<podUID>`: a pod's work tree in gpustack's device plugin."""
        return self.rootfs / root.lstrip("/") / pod_uid

    def remove_marker_dir(self, pod_uid: str, root: str = GPUSTACK_PODS) -> None:
        """gpustack's GC of a pod gone from the live set: `<root>/<podUID>` removed."""
        shutil.rmtree(self.marker_dir(pod_uid, root), ignore_errors=True)

    def _reboot_pods(self, state: State) -> None:
        """Sandboxes NOTREADY and containers EXITED (kubelet restarts them)."""
        for pod in state["pods"]:
            _reboot_pod(pod)


# --- state helpers -------------------------------------------------------------------------------


def _phase_states(phase: str) -> tuple[str | None, str | None]:
    if phase not in PHASES:
        raise ValueError(f"unknown pod phase {phase!r}; one of {list(PHASES)}")
    return PHASES[phase]


def _reboot_pod(pod: State) -> None:
    if pod["sandbox"] is not None:
        pod["sandbox"]["state"] = "SANDBOX_NOTREADY"
    for ctr in pod["containers"]:
        if ctr["id"] is not None:
            ctr["state"] = "CONTAINER_EXITED"


def _pod(state: State, uid: str) -> State:
    for pod in state["pods"]:
        if pod["uid"] == uid:
            return pod
    raise KeyError(f"no pod {uid}")


def _entry_key(entry: Mapping[str, Any]) -> tuple[str, str, str]:
    return entry["pod_uid"], entry["container"], entry["resource"]
