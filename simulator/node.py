"""
One simulated node in a folder (docs/INTERNALS.md, "The simulated node"): `SimNode`, the facade
the tests, stories and tools use, composing one model per vendor over one state store.

`<node>/state.json` is the whole truth (state.py): chips, vNPUs, GPUs and PPUs with their GPU and
compute instances, DCUs and vDCUs, vGPUs, processes, pods (the CRI view), kubelet checkpoint
entries and injected faults. The tools in `<node>/bin/` and these models read and change it under
an fcntl lock on `<node>/state.lock`, so the enforcer's destroy and a test's mutation can run at
the same time without losing either. Every change re-renders the kubelet checkpoint.

    ascend.py       chips, vNPUs (`<node>/rootfs/dev/vdavinci<id>`), npu-smi's process table
    mig_model.py    NVIDIA GPUs and T-Head PPUs in MIG mode: one model, a `Vendor` each
    hygon.py        Hygon DCUs and vDCUs, gpustack's vdev.conf and Hygon records
    vgpu_model.py   mdevs and vendor-VFIO VFs, VM processes, hypeman's records
    pods.py         pods, the kubelet checkpoint, gpustack's pod work trees
    faults.py       injected faults, and `answer` (how every tool prints)
    dra.py          NVIDIA's DRA kubelet plugin: its checkpoint, CDI specs, claims (`node.dra`)

What spans them is here: `create` (the folder's layout), `unhold`, `remove_process`, `reboot`
and `summary`.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from simulator import mig, procs, show, vgpu
from simulator.ascend import AscendModel, chip_state
from simulator.dra import DraModel
from simulator.dra_cd import ComputeDomainModel
from simulator.faults import FaultModel
from simulator.hygon import HygonModel, dcu_state
from simulator.mig_model import NVIDIA, PPU_SMI, THEAD, MigModel
from simulator.pods import PodModel
from simulator.state import (
    CHECKPOINT,
    LAYOUT_DIRS,
    PROC_DEVICES,
    STATE_FILE,
    TOOLS,
    State,
    new_state,
    write_atomic,
    write_tool,
)
from simulator.vgpu_model import VgpuModel


class SimNode(AscendModel, HygonModel, VgpuModel, PodModel, FaultModel):
    """A simulated node backed by `<path>/state.json`; every method persists its change."""

    def __init__(self, path: Path | str):
        super().__init__(path)
        self.nvidia = MigModel(self, NVIDIA)
        self.thead = MigModel(self, THEAD)
        self.dra = DraModel(self)
        self.dra_cd = ComputeDomainModel(self)

    @classmethod
    def create(
        cls,
        path: Path | str,
        chips: Sequence[Mapping[str, Any]],
        *,
        gpus: Sequence[Mapping[str, Any]] = (),
        boot_id: str | None = None,
        npu_smi_version: str = "25.5.2",
        mcu: bool = True,
        driver_version: str = "580.173.02",
        cuda_version: str = "13.0",
        nvidia_smi_time: str | None = None,
        ppus: Sequence[Mapping[str, Any]] = (),
        ppu_smi_time: str | None = None,
        dcus: Sequence[Mapping[str, Any]] = (),
    ) -> SimNode:
        """
        Lay out a new node folder (it must not hold a node yet) with `chips` and no vNPUs, and
        `gpus` (specs like `H100`) with no GPU instances. `nvidia_smi_time` fixes the default
        table's timestamp line ("Wed Jul 29 18:17:43 2026"); None prints the time of the call.
        `ppus` (specs like `PPU`): T-Head PPUs with no GPU instances, kept apart from the GPUs
        (state "ppus", ppu-smi's; `ppu_smi_time` as `nvidia_smi_time`). `dcus` (specs like
        `DCU`): Hygon DCUs with no vDCUs, index = position (state "dcus", hy-smi's).
        """
        root = Path(path).resolve()
        if (root / STATE_FILE).exists():
            raise FileExistsError(f"{root} already holds a simulated node")
        gpu_states = [mig.gpu_state(g, i, driver_version) for i, g in enumerate(gpus)]
        mig.check_gpus(gpu_states)
        ppu_states = [mig.ppu_state(p, i) for i, p in enumerate(ppus)]
        mig.check_gpus(ppu_states)
        dcu_states = [dcu_state(d, i) for i, d in enumerate(dcus)]
        bdfs = [d["bdf"] for d in dcu_states]
        if len(set(bdfs)) != len(bdfs):
            raise ValueError(f"a DCU bus id is listed twice: {bdfs}")
        for sub in (*LAYOUT_DIRS, Path(CHECKPOINT).parent):
            (root / sub).mkdir(parents=True, exist_ok=True)
        state = new_state(
            [chip_state(c, i) for i, c in enumerate(chips)], boot_id, npu_smi_version, mcu
        )
        state["gpus"] = gpu_states
        state["nvidia"] = {
            "driver_version": driver_version,
            "cuda_version": cuda_version,
            "time": nvidia_smi_time,
        }
        if ppu_states:  # only then: a node without PPUs is stored as before
            state.update(ppus=ppu_states, ppu_processes=[], thead={**PPU_SMI, "time": ppu_smi_time})
        if dcu_states:  # likewise: a node without DCUs is stored as before
            state["dcus"] = {"devices": dcu_states, "vdcus": [], "holders": []}
        write_atomic(root / STATE_FILE, json.dumps(state, indent=1))
        wanted = {
            "crictl": True,
            "npu-smi": bool(chips),
            "nvidia-smi": bool(gpus),
            "mdevctl": False,  # with the first vGPU parent (add_pf)
            "ppu-smi": bool(ppus),
            "hy-smi": bool(dcus),
        }
        for tool, module in TOOLS.items():
            if wanted[tool]:
                write_tool(root, tool, module)
        node = cls(root)
        if gpu_states:
            node.nvidia.lay_out(gpu_states)
        if ppu_states:
            node.thead.lay_out(ppu_states)
        if dcu_states:
            node._lay_out_dcus(dcu_states)
        with node._mutate():
            pass  # renders the (empty) checkpoint
        return node

    # --- what spans the vendors ----------------------------------------------------------------

    def unhold(self, proc: subprocess.Popen[bytes]) -> None:
        """End a holder started by a `hold*()` and drop it from the process tables."""
        procs.end_process(proc)
        with self._mutate() as state:
            state["processes"] = [p for p in state["processes"] if p["pid"] != proc.pid]
            self.nvidia.forget(state, proc.pid)
            self.thead.forget(state, proc.pid)
            if "dcus" in state:
                dcu = [p for p in state["dcus"]["holders"] if p["pid"] != proc.pid]
                state["dcus"]["holders"] = dcu

    def unhold_all(self) -> list[int]:
        """End every holder this node started (also detached ones); returns their pids."""
        with self._mutate() as state:
            return self._kill_holders(state)

    def _kill_holders(self, state: State) -> list[int]:
        return [
            *self._kill_vnpu_holders(state),
            *self.nvidia.kill_holders(state),
            *self.thead.kill_holders(state),
            *self._kill_dcu_holders(state),
            *self._kill_vms(state),
        ]

    def remove_process(self, pid: int) -> None:
        """Drop a listed process (npu-smi's, nvidia-smi's or ppu-smi's) with this pid."""
        with self._mutate() as state:
            state["processes"] = [p for p in state["processes"] if p["pid"] != pid]
            self.nvidia.forget(state, pid)
            self.thead.forget(state, pid)

    def reboot(self) -> str:
        """
        A reboot: new boot id, holders killed, every vNPU and MIG GPU/compute instance lost (no
        vnpu-cfg-recover; MIG mode stays, its instances do not), sandboxes NOTREADY and
        containers EXITED. The checkpoint file survives. vGPUs: hypervisors killed, mdevs and
        VF vGPU types gone, mdevctl's "auto" definitions started again (vgpu.reboot); VM
        records stay. The DRA driver is down until `dra.restart()`, its checkpoint as it was
        (stale boot id), its CDI specs gone with tmpfs (DraModel.reboot). Returns the new boot id.
        """
        with self._mutate() as state:
            self._kill_holders(state)
            for vnpu in state["vnpus"]:
                self._retire_devfile(vnpu["id"])
            self.nvidia.reboot(state)
            self.thead.reboot(state)
            self.dra.reboot(state)
            if "dcus" in state:  # vDCUs do not survive a reboot either (UNVERIFIED)
                state["dcus"]["vdcus"] = []
            if state.get("vgpu"):
                vgpu.reboot(vgpu.Tree(self.path), state["vgpu"])
            state.update(vnpus=[], processes=[], gpu_processes=[], boot_id=str(uuid.uuid4()))
            self._reboot_pods(state)
            return state["boot_id"]

    def summary(self) -> str:
        """A short human summary: chips and AI cores, vNPUs, pods, checkpoint, faults, vGPUs."""
        state = self.state()
        lines = vgpu.summary_lines(state.get("vgpu") or vgpu.new_state(), self._is_vm_process)
        return show.render_summary(self, state) + "".join(f"{line}\n" for line in lines)

    # --- NVIDIA MIG (mig_model.py, NVIDIA) -----------------------------------------------------

    def gpu_devfile(self, gpu_minor: int) -> Path:
        """`<rootfs>/dev/nvidia<minor>`, the GPU's device file."""
        return self.nvidia.devfile(gpu_minor)

    def cap_file(self, gpu: int, gi: int, ci: int | None = None) -> Path:
        """The access capability file of GI `gi` (`ci` None) or of its CI `ci` on GPU `gpu`."""
        return self.nvidia.cap_file(gpu, gi, ci)

    def declare_caps_major(self, major: int) -> None:
        """
        Give the node a /proc/devices of its own with the capability devices under `major`
        (the namespace agent mounts it when it starts): a real device of that major stands in
        for a capability node made inside a container, which the host's /dev has not.
        """
        write_atomic(self.path / PROC_DEVICES, mig.render_proc_devices(major))

    def create_gi(
        self, gpu: int, profile: str | int, *, ci: bool = True, start: int | None = None
    ) -> int:
        """
        A GPU instance of `profile` (id, "1g.10gb" or "MIG 1g.10gb") on GPU index `gpu`, at the
        slot the driver picks (or `start`), with its whole-GI compute instance when `ci` (-C).
        Returns its GI id; raises nvidia-smi's refusal (MigError) when it cannot be made.
        """
        return self.nvidia.create_gi(gpu, profile, ci=ci, start=start)

    def create_ci(self, gpu: int, gi: int, profile: str | int | None = None) -> int:
        """A compute instance in GI `gi` (`profile` None: the whole GI); returns its CI id."""
        return self.nvidia.create_ci(gpu, gi, profile)

    def destroy_ci(self, gpu: int, gi: int, ci: int, *, honor_faults: bool = False) -> None:
        """nvidia-smi's `-dci`, or its refusal (MigModel.destroy_ci)."""
        self.nvidia.destroy_ci(gpu, gi, ci, honor_faults=honor_faults)

    def destroy_gi(self, gpu: int, gi: int, *, honor_faults: bool = False) -> None:
        """nvidia-smi's `-dgi`, or its refusal (MigModel.destroy_gi)."""
        self.nvidia.destroy_gi(gpu, gi, honor_faults=honor_faults)

    def mig_uuid(self, gpu: int, gi: int, ci: int) -> str:
        """The MIG device UUID a CI at (GPU, GI id, CI id) has (and any successor there will)."""
        return self.nvidia.mig_uuid(gpu, gi, ci)

    def gpu_instances(self, gpu: int) -> list[State]:
        """GPU `gpu`'s instances in -lgi order (MigModel.instances)."""
        return self.nvidia.instances(gpu)

    def hold_mig(self, gpu: int, gi: int, ci: int = 0, **how: Any) -> subprocess.Popen[bytes]:
        """
        A real `sleep` with the CI's capability file and `/dev/nvidia<minor>` open, listed by
        nvidia-smi on that GI/CI when `listed` (MigModel.hold: lifetime, detach, pod_uid,
        listed, memory_mib).
        """
        return self.nvidia.hold(gpu, gi, ci, **how)

    def add_gpu_process(
        self,
        gpu: int,
        gi: int | None,
        ci: int | None,
        pid: int,
        name: str,
        memory_mib: int = 512,
        type: str = "C",  # noqa: A002 - nvidia-smi's column name
    ) -> None:
        """A process row nvidia-smi lists (any pid, nothing started); gi/ci None print N/A."""
        self.nvidia.add_process(gpu, gi, ci, pid, name, memory_mib, type)

    def gpu_holders(self, state: State) -> list[State]:
        """The `hold_mig` holders still holding their CI (listed in nvidia-smi or not)."""
        return self.nvidia.holders(state)

    def listed_gpu_processes(self, state: State) -> list[State]:
        """The processes nvidia-smi lists: added ones, and listed holders while they hold."""
        return self.nvidia.listed_processes(state)

    def set_readings(self, gpu: int, **readings: Any) -> None:
        """What the default table shows for GPU `gpu` (MigModel.set_readings)."""
        self.nvidia.set_readings(gpu, **readings)

    def write_marker(
        self, pod_uid: str, container: str, gpu: int, gi: int, ci: int = 0, **how: Any
    ) -> Path:
        """gpustack's NVIDIA ownership marker for (GPU, GI, CI) (MigModel.write_marker)."""
        return self.nvidia.write_marker(pod_uid, container, gpu, gi, ci, **how)

    # --- T-Head PPU MIG (mig_model.py, THEAD) --------------------------------------------------

    def ppu_devfile(self, ppu_minor: int) -> Path:
        """`<rootfs>/dev/alixpu_ppu<minor>`, the PPU's device file."""
        return self.thead.devfile(ppu_minor)

    def ppu_cap_file(self, ppu: int, gi: int, ci: int | None = None) -> Path:
        """`/dev/alixpu-caps/alixpu-cap<minor>` of GI `gi` (`ci` None) or its CI on PPU `ppu`."""
        return self.thead.cap_file(ppu, gi, ci)

    def ppu_access_file(self, ppu: int, gi: int, ci: int | None = None) -> Path:
        """The driver's `capabilities/ppu<minor>/mig/gi<G>[/ci<C>]/access` (DeviceFileMinor)."""
        return self.thead.access_file(ppu, gi, ci)

    def create_ppu_gi(
        self, ppu: int, profile: str | int, *, ci: bool = True, start: int | None = None
    ) -> int:
        """
        A GPU instance of `profile` (id, "2g24gb" or "MIG 2g24gb") on PPU index `ppu`, at the
        lowest free placement (or `start`), with its default compute instance when `ci` (-C).
        Returns its GI id; raises ppu-smi's refusal (MigError) when it cannot be made.
        """
        return self.thead.create_gi(ppu, profile, ci=ci, start=start)

    def create_ppu_ci(self, ppu: int, gi: int, profile: str | int | None = None) -> int:
        """A compute instance in PPU GI `gi` (`profile` None: the default, the whole GI)."""
        return self.thead.create_ci(ppu, gi, profile)

    def destroy_ppu_ci(self, ppu: int, gi: int, ci: int, *, honor_faults: bool = False) -> None:
        """ppu-smi's `-dci`, or its refusal (wording UNVERIFIED: nvidia-smi's with "PPU")."""
        self.thead.destroy_ci(ppu, gi, ci, honor_faults=honor_faults)

    def destroy_ppu_gi(self, ppu: int, gi: int, *, honor_faults: bool = False) -> None:
        """ppu-smi's `-dgi` (the doc destroys CIs with -dci first), or its refusal."""
        self.thead.destroy_gi(ppu, gi, honor_faults=honor_faults)

    def ppu_mig_uuid(self, ppu: int, gi: int, ci: int) -> str:
        """The MIG device UUID of the CI at (PPU, GI id, CI id): uuid5, as mig.mig_uuid."""
        return self.thead.mig_uuid(ppu, gi, ci)

    def ppu_instances(self, ppu: int) -> list[State]:
        """PPU `ppu`'s GIs by id, each with "name" and its CIs (by id) with "name" and "uuid"."""
        return self.thead.instances(ppu)

    def hold_ppu_mig(self, ppu: int, gi: int, ci: int = 0, **how: Any) -> subprocess.Popen[bytes]:
        """
        `hold_mig` for a PPU: a real `sleep` with the CI's `/dev/alixpu-caps/alixpu-cap<minor>`
        and `/dev/alixpu_ppu<minor>` open, listed by ppu-smi on that GI/CI when `listed`.
        """
        return self.thead.hold(ppu, gi, ci, **how)

    def add_ppu_process(
        self,
        ppu: int,
        gi: int | None,
        ci: int | None,
        pid: int,
        name: str,
        memory_mib: int = 512,
        type: str = "C",  # noqa: A002 - ppu-smi's column name
    ) -> None:
        """A process row ppu-smi lists (any pid, nothing started); gi/ci None print N/A."""
        self.thead.add_process(ppu, gi, ci, pid, name, memory_mib, type)

    def ppu_holders(self, state: State) -> list[State]:
        """The `hold_ppu_mig` holders still holding their CI (listed in ppu-smi or not)."""
        return self.thead.holders(state)

    def listed_ppu_processes(self, state: State) -> list[State]:
        """The processes ppu-smi lists: added ones, and listed holders while they hold."""
        return self.thead.listed_processes(state)

    def set_ppu_readings(self, ppu: int, **readings: Any) -> None:
        """`set_readings` for a PPU (mig.PPU_READINGS), to reproduce the doc's tables."""
        self.thead.set_readings(ppu, **readings)

    def write_ppu_marker(
        self, pod_uid: str, container: str, ppu: int, gi: int, ci: int = 0, **how: Any
    ) -> Path:
        """
        gpustack's T-Head ownership record for the PPU MIG device (PPU, GI, CI), as
        allocator/thead/mig.go writeMarker makes it: `thead-mig-<PPU UUID>.json`, mode 0600
        (MigModel.write_marker).
        """
        return self.thead.write_marker(pod_uid, container, ppu, gi, ci, **how)
