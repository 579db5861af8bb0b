"""
The ComputeDomain kubelet plugin (`compute-domain.nvidia.com`) on the simulated node: the second
container of the NVIDIA DRA chart's kubelet-plugin DaemonSet, enabled by default beside the GPU
plugin (deployments/helm/dra-driver-nvidia-gpu values.yaml:79-83, templates/kubeletplugin.yaml:
86-209). State: `state["dra_cd"]` (absent until `install`). Sources: kubernetes-sigs/dra-driver-
nvidia-gpu at the tag named, paths under cmd/compute-domain-kubelet-plugin/:

    <rootfs>/var/lib/kubelet/plugins_registry/compute-domain.nvidia.com-reg.sock
    <rootfs>/var/lib/kubelet/plugins/compute-domain.nvidia.com/{checkpoint.json,dra.sock,pu.lock}

- checkpoint.json: the same checkpoint manager, layout and checksums as the GPU plugin's
  (simulator.dra.render_checkpoint); its claims' devices are IMEX channels and daemons
  (prepared.go:26-44, deviceinfo.go:26-48), a group's configState `{Type, ComputeDomain}`
  (device_state.go:56-60, no JSON tags). v0.4.1 names the claim on its PrepareCompleted record
  too and leaves a PrepareAborted one after unpreparing a Started claim (device_state.go:221-254,
  312-328, 431-447); v0.4.x records the boot id (:139-185). Empty: `{V2:{NodeBootID}}`.
- CDI ids (cdi.go:270-282): a channel `k8s.compute-domain.nvidia.com/claim=<uid>-channel-0`
  (written when the node has a clique id, as here), a daemon also `…/device=all`. The CDI spec
  files themselves are not written (nothing here reads them).
- Its ResourceSlices: simulator/dra_slices.cd_slices.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from simulator import dra_slices
from simulator.dra import COMPLETED, STARTED, DraError, render_checkpoint
from simulator.state import State

DRIVER = "compute-domain.nvidia.com"
RELEASES = ("v25.3.2", "v25.8.1", "v0.4.1")
ABORTED = "PrepareAborted"
CDI_VENDOR = "k8s." + DRIVER
KUBELET = "var/lib/kubelet"
ABORTED_AT = "2026-06-10T12:00:00Z"  # metav1.Now() of an abort (the simulated clock is not Go's)


class ComputeDomainModel:
    """The ComputeDomain plugin of one simulated node (`SimNode.dra_cd`)."""

    def __init__(self, node: Any):
        self.node = node
        kubelet = node.rootfs / KUBELET
        self.plugin_dir = kubelet / "plugins" / DRIVER  # Config.DriverPluginPath(), main.go:82
        self.checkpoint_path = self.plugin_dir / "checkpoint.json"
        self.registration = kubelet / "plugins_registry" / f"{DRIVER}-reg.sock"

    @contextmanager
    def _change(self) -> Iterator[State]:
        with self.node._mutate() as state:
            if "dra_cd" not in state:
                raise DraError(f"the DRA driver {DRIVER} is not installed")
            yield state["dra_cd"]
            self._write(state["dra_cd"])

    def _write(self, cd: State) -> None:
        data = render_checkpoint(cd)
        if self.checkpoint_path.exists() and self.checkpoint_path.read_bytes() == data:
            return
        handle, tmp = tempfile.mkstemp(prefix=".", dir=self.plugin_dir)  # FileStore: . + rename
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        os.chmod(tmp, 0o600)
        os.replace(tmp, self.checkpoint_path)

    def install(self, release: str = "v0.4.1") -> None:
        """The plugin's first start: its registration socket, folder and empty checkpoint."""
        if release not in RELEASES:
            raise ValueError(f"unknown release {release!r}; have {RELEASES}")
        with self.node._mutate() as state:
            if "dra_cd" in state:
                raise DraError(f"the DRA driver {DRIVER} is installed already")
            boot = state["boot_id"] if release == "v0.4.1" else ""
            state["dra_cd"] = {"release": release, "boot_id": boot, "claims": {}, "api": {}}
            self.registration.parent.mkdir(parents=True, exist_ok=True)
            self.registration.write_bytes(b"")
            self.plugin_dir.mkdir(parents=True, exist_ok=True)
            for name in ("dra.sock", "pu.lock"):
                (self.plugin_dir / name).write_bytes(b"")
            self._write(state["dra_cd"])

    def prepare(
        self,
        claim_uid: str,
        name: str,
        namespace: str,
        pod: tuple[str, str],
        kind: str,
        others: Sequence[State] = (),
    ) -> None:
        """NodePrepareResources of a claim of one channel or daemon (device_state.go:188-262):
        PrepareStarted, then PrepareCompleted with its device. `others`: the results of the
        claim's other requests (another driver's devices, a GPU's), after its own (as
        tests/fixtures/dra/checkpoint-cd-v0.4.1-gpu-result.json): the plugin keeps the claim's
        whole status (device_state.go:221-228, claim.Status as the API has it), so its record
        names those devices too."""
        if kind not in ("channel", "daemon"):
            raise ValueError(f"kind {kind!r}: channel or daemon")
        device = f"{kind}-0"
        pool = (
            self.node.dra.dra_state()["pool"] if "dra" in self.node.state() else self.node.path.name
        )
        own = {"request": kind, "driver": DRIVER, "pool": pool, "device": device}
        result = [own, *(dict(r) for r in others)]
        term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [pool]}]}
        status = {
            "allocation": {
                "devices": {"results": result},
                "nodeSelector": {"nodeSelectorTerms": [term]},
            },
            "reservedFor": [{"resource": "pods", "name": pod[0], "uid": pod[1]}],
        }
        named = {"name": name, "namespace": namespace}
        with self._change() as cd:
            cd["api"][claim_uid] = [name, namespace, status]
            if cd["release"] != "v25.3.2":
                cd["claims"][claim_uid] = {"checkpointState": STARTED, "status": status, **named}
        cdi = [f"{CDI_VENDOR}/claim={claim_uid}-{device}"]
        if kind == "daemon":
            cdi.insert(0, f"{CDI_VENDOR}/device=all")
        dev = {"Requests": [kind], "PoolName": pool, "DeviceName": device, "CDIDeviceIDs": cdi}
        entry = {"info": {"id": 0}, "device": dev}
        state = {"Type": kind, "ComputeDomain": dra_slices.NODE_UID}  # a ComputeDomain's uid
        groups = [
            {
                "devices": [
                    {
                        "channel": entry if kind == "channel" else None,
                        "daemon": entry if kind == "daemon" else None,
                    }
                ],
                "configState": state,
            }
        ]
        with self._change() as cd:
            done = {"checkpointState": COMPLETED, "status": status, "preparedDevices": groups}
            cd["claims"][claim_uid] = done | (named if cd["release"] == "v0.4.1" else {})

    def unprepare(self, claim_uid: str) -> None:
        """NodeUnprepareResources (device_state.go:264-342): a completed claim goes; a started one
        stays PrepareAborted (v0.4.1) for a while."""
        with self._change() as cd:
            claim = cd["claims"].get(claim_uid)
            if claim is None:
                return
            if claim["checkpointState"] == STARTED and cd["release"] == "v0.4.1":
                keep = {k: claim[k] for k in ("status", "name", "namespace")}
                aborted = {"checkpointState": ABORTED, **keep, "abortedAt": ABORTED_AT}
                cd["claims"][claim_uid] = aborted
            else:
                del cd["claims"][claim_uid]

    def resource_claims(self) -> list[dict[str, Any]]:
        """Its claims as the API server lists them (resource.k8s.io/v1 ResourceClaim)."""
        cd = self.node.state()["dra_cd"]
        return [
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": name, "namespace": namespace, "uid": uid},
                "status": status,
            }
            for uid, (name, namespace, status) in sorted(cd["api"].items())
        ]

    def resource_slices(self) -> list[dict[str, Any]]:
        state = self.node.state()
        pool = state["dra"]["pool"] if "dra" in state else self.node.path.name
        return dra_slices.cd_slices(pool)
