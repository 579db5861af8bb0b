"""
The MIG model of the simulated node, one for each vendor over the same state store: NVIDIA GPUs
(state "gpus", nvidia-smi's; output in nvidia_smi.py) and T-Head PPUs (state "ppus", ppu-smi's;
output in ppu_smi.py). The profiles and placements are mig.py's; what differs between the two
vendors (device and capability files, the refusals' wording, the profile functions, gpustack's
record) is a `Vendor`.

    <node>/rootfs/dev/nvidia<minor>                  one regular file per GPU
    <node>/rootfs/dev/nvidia-caps/nvidia-cap<N>      config (1), monitor (2), and the access
                                                     capability of every existing GI and CI
    <node>/proc-driver/nvidia-caps/mig-minors        bind-mounted over /proc/driver by the
    <node>/proc-driver/nvidia/gpus/<bus>/information   namespace agent (namespace.py)
    <node>/rootfs/dev/alixpu, alixpu_ctl, alixpu_ppu<minor>, alixpu-caps/alixpu-cap<N>   a PPU's
    <node>/proc-driver/alixpu/capabilities/ppu<minor>/mig/gi<G>[/ci<C>]/access
    <pods root>/<podUID>/c-<ctr>/{nvidia,thead}-mig-<card UUID>.json   gpustack's MIG markers
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from simulator import mig, procs
from simulator.mig import CiProfile, GiProfile, MigError
from simulator.state import (
    GPUSTACK_PODS,
    PROC_DRIVER,
    State,
    Store,
    publish_marker,
    write_atomic,
)

# One NVIDIA H100 80GB HBM3 in MIG mode, as SimNode.create takes a GPU (gpus=(H100,)). The UUID
# is the prickle-exporter capture's card; mig.gpu_state fills in the rest.
H100: dict[str, Any] = {
    "index": 0,
    "uuid": "GPU-0d0831da-0c98-2717-6446-8acd91d39b65",
    "name": "NVIDIA H100 80GB HBM3",
    "bus_id": "00000000:16:00.0",
    "memory_mib": 81559,
    "mig": True,
}
# One T-Head PPU-ZW810E (96 GiB) in MIG mode, as SimNode.create takes a PPU (ppus=(PPU,)): the
# T-Head SAIL PPU-SMI reference's PPU 0 (UUID, bus id); mig.ppu_state fills in the rest.
PPU: dict[str, Any] = {
    "index": 0,
    "uuid": "GPU-019ea108-c110-0828-0000-0000c07e1a46",
    "name": "PPU-ZW810E",
    "bus_id": "00000000:08:00.0",
    "memory_mib": 98304,
    "mig": True,
}
PPU_SMI = {"smi_version": "1.28", "driver_version": "2.1.0-dbda51", "hggc_version": "13.0"}
# fail_gis of `dgi`/`dci`, per tool: state["faults"][key] = {"dgi": [[card, gi]...], "dci": ...}.
# ppu-smi's key is made on its first use, so a node that never had one is stored as before.
PPU_MIG_FAIL = "ppu_mig_fail"
MIG_FAIL_KEYS = {"nvidia-smi": "mig_fail", "ppu-smi": PPU_MIG_FAIL}


def _ppu_at(state: State, index: int) -> State:
    """A PPU by index; ppu-smi's "No devices were found" (UNVERIFIED: nvidia-smi's) if none."""
    for ppu in state.get("ppus", []):
        if ppu["index"] == index:
            return ppu
    raise MigError("No devices were found", mig.NOT_FOUND, mig.EXIT_NOT_FOUND)


def _mig_ppu(state: State, index: int) -> State:
    ppu = _ppu_at(state, index)
    if not ppu["mig"]:
        raise MigError(mig.NO_MIG, mig.NOT_FOUND, mig.EXIT_NOT_FOUND)
    return ppu


def _nvidia_record(g: State, inst: State, gp: GiProfile, gi: int, ci: int) -> State:
    """gpustack's migMarker (allocator/nvidia): its fields in declaration order."""
    return {
        "card": g["uuid"],
        "profile": gp.name,
        "giID": gi,
        "ciID": ci,
        "migUUID": mig.mig_uuid(g, gi, ci),
        "computeSlices": gp.compute,
        "start": inst["start"],
        "length": inst["size"],
    }


def _thead_record(p: State, inst: State, gp: GiProfile, gi: int, ci: int) -> State:
    """
    gpustack's T-Head migMarker (allocator/thead/mig.go): "profile" is ppu-smi's name without
    "MIG " ("4g48gb": nodefeature keeps T-Head's own separator-less spelling internally and
    publishes "4g.48gb" only in resource keys; the caller's spelling was not traced) and
    "profileID" its -lgi profile id (gpustack records the driver's raw id); "computeSlices" is
    the GI's slice count ("2g" -> 2), UNVERIFIED (gpustack takes it from the detector's profile
    record, not read here).
    """
    return {
        "card": p["uuid"],
        "profile": gp.name,
        "profileID": gp.id,
        "giID": gi,
        "ciID": ci,
        "migUUID": mig.mig_uuid(p, gi, ci),
        "computeSlices": gp.size,
        "start": inst["start"],
        "length": inst["size"],
    }


def _lay_out_gpus(model: MigModel, gpus: Sequence[State]) -> None:
    """The GPUs' device files and the driver's procfs files (mig-minors, information)."""
    caps = model.store.rootfs / "dev" / "nvidia-caps"
    caps.mkdir(parents=True, exist_ok=True)
    for minor in (1, 2):  # config and monitor: nvidia-modprobe makes them with MIG
        (caps / f"nvidia-cap{minor}").write_bytes(b"")
    proc = model.store.path / PROC_DRIVER
    (proc / "nvidia-caps").mkdir(parents=True, exist_ok=True)
    write_atomic(proc / "nvidia-caps" / "mig-minors", mig.render_mig_minors())
    for gpu in gpus:
        model.devfile(gpu["minor"]).write_bytes(b"")
        info = proc / "nvidia" / "gpus" / mig.proc_bus_dir(gpu["bus_id"]) / "information"
        info.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(info, mig.render_information(gpu))


def _lay_out_ppus(model: MigModel, ppus: Sequence[State]) -> None:
    """
    The PPUs' device files, where gpustack's T-Head allocator looks (RECORD-FORMATS.md:
    thead/mig_visibility.go): `/dev/alixpu`, `/dev/alixpu_ctl`, `/dev/alixpu_ppu<minor>`, and
    per existing GI and CI `/dev/alixpu-caps/alixpu-cap<minor>` whose minor the driver's
    `/proc/driver/alixpu/capabilities/ppu<minor>/mig/gi<G>[/ci<C>]/access` gives in its
    `DeviceFileMinor:` line (`<node>/proc-driver/alixpu/...`). Made and removed with the
    instances, as nvidia-caps' are; the minors (mig.ppu_cap_minor) and that file's other
    lines (none written here) are UNVERIFIED: no public listing of either exists.
    """
    dev = model.store.rootfs / "dev"
    (dev / "alixpu-caps").mkdir(parents=True, exist_ok=True)
    (model.store.path / PROC_DRIVER / "alixpu" / "capabilities").mkdir(parents=True, exist_ok=True)
    for name in ("alixpu", "alixpu_ctl"):
        (dev / name).write_bytes(b"")
    for ppu in ppus:
        model.devfile(ppu["minor"]).write_bytes(b"")


class Vendor(NamedTuple):
    """What one vendor's MIG model needs that the other's does not share."""

    tool: str  # its faults' tool name
    devices: str  # the state's list of its cards
    processes: str  # the state's list of its process rows and holders
    card: str  # the refusals' word for a card: "GPU", "PPU"
    at: Callable[[State, int], State]  # a card by index, or the tool's refusal
    mig_at: Callable[[State, int], State]  # a card in MIG mode, or the tool's refusal
    create_gi: Callable[[State, GiProfile, int | None], State]
    find_ci_profile: Callable[[GiProfile, str | int | None], CiProfile | None]
    create_ci: Callable[[Mapping[str, Any], State, CiProfile], State]
    ci_profile_of: Callable[[GiProfile, Mapping[str, Any]], CiProfile]
    listed_gis: Callable[[Mapping[str, Any]], list[State]]  # its -lgi order
    readings: Sequence[str]
    devfile: str  # `<rootfs>/dev/<devfile><minor>`
    caps: str  # `<rootfs>/dev/<caps>/<cap><N>`
    cap: str
    cap_minor: Callable[..., int]
    access_files: bool  # the driver's capabilities/.../access files (T-Head)
    # refusals, formatted with index, gi, ci, profile
    no_gi_profile: str
    no_ci_profile: str
    ci_in_use: str
    gi_in_use: str
    marker: str  # gpustack's record: `<marker>-mig-<card UUID>.json`
    marker_mode: int
    marker_record: Callable[[State, State, GiProfile, int, int], State]
    lay_out: Callable[[MigModel, Sequence[State]], None]  # the cards' files at `create`
    first_keys: tuple[str, ...] = ()  # a process row's keys before "gpu"


NVIDIA = Vendor(
    tool="nvidia-smi",
    devices="gpus",
    processes="gpu_processes",
    card="GPU",
    at=mig.gpu_at,
    mig_at=mig.mig_gpu,
    create_gi=mig.create_gi,
    find_ci_profile=mig.find_ci_profile,
    create_ci=mig.create_ci,
    ci_profile_of=mig.ci_profile_of,
    listed_gis=mig.listed_gis,
    readings=tuple(mig.READINGS),
    devfile="nvidia",
    caps="nvidia-caps",
    cap="nvidia-cap",
    cap_minor=mig.cap_minor,
    access_files=False,
    no_gi_profile="Unable to create a GPU instance on GPU {index:2d} using profile {profile}",
    no_ci_profile=(
        "Unable to create a compute instance on GPU {index:2d} GPU instance ID {gi:2d} "
        "using profile {profile}"
    ),
    ci_in_use=(
        "Unable to destroy compute instance ID {ci:2d} from GPU {index:2d} GPU instance ID {gi:2d}"
    ),
    gi_in_use="Unable to destroy GPU instance ID {gi:2d} from GPU {index:2d}",
    marker="nvidia",
    marker_mode=0o644,
    marker_record=_nvidia_record,
    lay_out=_lay_out_gpus,
)
# The refusals' wording on a PPU is UNVERIFIED: nvidia-smi's with "PPU".
THEAD = Vendor(
    tool="ppu-smi",
    devices="ppus",
    processes="ppu_processes",
    card="PPU",
    at=_ppu_at,
    mig_at=_mig_ppu,
    create_gi=mig.ppu_create_gi,
    find_ci_profile=mig.ppu_find_ci_profile,
    create_ci=mig.ppu_create_ci,
    ci_profile_of=mig.ppu_ci_profile_of,
    listed_gis=lambda p: sorted(p["gis"], key=lambda g: g["id"]),
    readings=tuple(mig.PPU_READINGS),
    devfile="alixpu_ppu",
    caps="alixpu-caps",
    cap="alixpu-cap",
    cap_minor=mig.ppu_cap_minor,
    access_files=True,
    no_gi_profile="Unable to create a GPU instance on PPU {index} using profile {profile}",
    no_ci_profile=(
        "Unable to create a compute instance on PPU {index} GPU instance ID {gi} "
        "using profile {profile}"
    ),
    ci_in_use="Unable to destroy compute instance ID {ci} from PPU {index} GPU instance {gi}",
    gi_in_use="Unable to destroy GPU instance ID {gi} from PPU {index}",
    marker="thead",
    marker_mode=0o600,
    marker_record=_thead_record,
    lay_out=_lay_out_ppus,
    first_keys=("ppu",),
)


class MigModel:
    """One vendor's MIG cards, GPU and compute instances and processes, in `store`'s state."""

    def __init__(self, store: Store, vendor: Vendor):
        self.store = store
        self.vendor = vendor

    # --- files -----------------------------------------------------------------------------------

    def lay_out(self, cards: Sequence[State]) -> None:
        """The cards' device files and driver files, as the node is created."""
        self.vendor.lay_out(self, cards)

    def devfile(self, minor: int) -> Path:
        """`<rootfs>/dev/nvidia<minor>` (a PPU's: `alixpu_ppu<minor>`), the card's device file."""
        return self.store.rootfs / "dev" / f"{self.vendor.devfile}{minor}"

    def _cap_path(self, card: Mapping[str, Any], gi: int, ci: int | None = None) -> Path:
        minor = self.vendor.cap_minor(card["minor"], gi, ci)
        return self.store.rootfs / "dev" / self.vendor.caps / f"{self.vendor.cap}{minor}"

    def _access_path(self, card: Mapping[str, Any], gi: int, ci: int | None = None) -> Path:
        folder = self.store.path / PROC_DRIVER / "alixpu" / "capabilities"
        folder = folder / f"ppu{card['minor']}" / "mig" / f"gi{gi}"
        return (folder if ci is None else folder / f"ci{ci}") / "access"

    def _make_cap(self, card: Mapping[str, Any], gi: int, ci: int | None = None) -> None:
        self._cap_path(card, gi, ci).write_bytes(b"")
        if self.vendor.access_files:
            access = self._access_path(card, gi, ci)
            access.parent.mkdir(parents=True, exist_ok=True)
            minor = self.vendor.cap_minor(card["minor"], gi, ci)
            write_atomic(access, f"DeviceFileMinor: {minor}\n")

    def _drop_cap(self, card: Mapping[str, Any], gi: int, ci: int | None = None) -> None:
        self.store._retire(self._cap_path(card, gi, ci))
        if self.vendor.access_files:
            access = self._access_path(card, gi, ci)
            access.unlink(missing_ok=True)
            with contextlib.suppress(OSError):  # a GI's folder goes with its last entry
                access.parent.rmdir()

    def cap_file(self, index: int, gi: int, ci: int | None = None) -> Path:
        """The access capability file of GI `gi` (`ci` None) or of its CI `ci` on a card."""
        return self._cap_path(self.vendor.at(self.store.state(), index), gi, ci)

    def access_file(self, index: int, gi: int, ci: int | None = None) -> Path:
        """The driver's `capabilities/ppu<minor>/mig/gi<G>[/ci<C>]/access` (DeviceFileMinor)."""
        return self._access_path(self.vendor.at(self.store.state(), index), gi, ci)

    # --- instances -------------------------------------------------------------------------------

    def create_gi(
        self, index: int, profile: str | int, *, ci: bool = True, start: int | None = None
    ) -> int:
        """A GPU instance (with its default compute instance when `ci`); returns its GI id."""
        with self.store._mutate() as state:
            card = self.vendor.mig_at(state, index)
            gp = mig.find_profile(card, profile)
            if gp is None:
                line = self.vendor.no_gi_profile.format(index=index, profile=profile)
                raise MigError(f"{line}: {mig.INVALID}", mig.INVALID, mig.EXIT_INVALID_ARGUMENT)
            new = self.vendor.create_gi(card, gp, start)
            self._make_cap(card, new["id"])
            if ci:
                self._new_ci(card, new, None)
            return int(new["id"])

    def create_ci(self, index: int, gi: int, profile: str | int | None = None) -> int:
        """A compute instance in GI `gi` (`profile` None: the whole GI); returns its CI id."""
        with self.store._mutate() as state:
            card = self.vendor.mig_at(state, index)
            return self._new_ci(card, mig.gi_at(card, gi), profile)

    def _new_ci(self, card: State, gi: State, profile: str | int | None) -> int:
        cp = self.vendor.find_ci_profile(mig.profile_of(card, gi), profile)
        if cp is None:
            line = self.vendor.no_ci_profile.format(
                index=card["index"], gi=gi["id"], profile=profile
            )
            raise MigError(f"{line}: {mig.INVALID}", mig.INVALID, mig.EXIT_INVALID_ARGUMENT)
        new = self.vendor.create_ci(card, gi, cp)
        self._make_cap(card, gi["id"], new["id"])
        return int(new["id"])

    def destroy_ci(self, index: int, gi: int, ci: int, *, honor_faults: bool = False) -> None:
        """
        Destroy a compute instance, or raise the tool's refusal: "In use by another client"
        while a listed process runs on it or a live process has its capability file open.
        `honor_faults` applies fail_gis of `dci` (the tool passes it).
        """
        with self.store._mutate() as state:
            card = self.vendor.mig_at(state, index)
            inst = mig.ci_at(card, gi, ci)
            failing = self._fails(state, "dci") if honor_faults else []
            cap = self._cap_path(card, gi, ci)
            listed = [
                p
                for p in self.listed_processes(state)
                if (p["gpu"], p["gi"], p["ci"]) == (index, gi, ci)
            ]
            if [index, gi] in failing or listed or procs.pids_holding(cap):
                line = self.vendor.ci_in_use.format(index=index, gi=gi, ci=ci)
                raise MigError(f"{line}: {mig.IN_USE}", mig.IN_USE, mig.EXIT_IN_USE)
            mig.gi_at(card, gi)["cis"].remove(inst)
            self._drop_cap(card, gi, ci)

    def destroy_gi(self, index: int, gi: int, *, honor_faults: bool = False) -> None:
        """
        Destroy a GPU instance, or raise the tool's refusal: "In use by another client" while
        it has compute instances, a listed process or a live process with its capability file
        open. `honor_faults` applies fail_gis of `dgi` (the tool passes it).
        """
        with self.store._mutate() as state:
            card = self.vendor.mig_at(state, index)
            inst = mig.gi_at(card, gi)
            failing = self._fails(state, "dgi") if honor_faults else []
            cap = self._cap_path(card, gi)
            listed = [p for p in self.listed_processes(state) if (p["gpu"], p["gi"]) == (index, gi)]
            if inst["cis"] or [index, gi] in failing or listed or procs.pids_holding(cap):
                line = self.vendor.gi_in_use.format(index=index, gi=gi)
                raise MigError(f"{line}: {mig.IN_USE}", mig.IN_USE, mig.EXIT_IN_USE)
            card["gis"].remove(inst)
            self._drop_cap(card, gi)

    def _fails(self, state: State, subcommand: str) -> list[list[int]]:
        key = MIG_FAIL_KEYS[self.vendor.tool]
        return list(state["faults"].get(key, {}).get(subcommand, []))

    def mig_uuid(self, index: int, gi: int, ci: int) -> str:
        """The MIG device UUID a CI at (card, GI id, CI id) has (and any successor there will)."""
        return mig.mig_uuid(self.vendor.at(self.store.state(), index), gi, ci)

    def instances(self, index: int) -> list[State]:
        """
        A card's instances in its -lgi order: each GI's stored fields plus "name" (its profile),
        its CIs by id with "name" and "uuid" (the MIG device UUID).
        """
        card = self.vendor.at(self.store.state(), index)
        found = []
        for gi in self.vendor.listed_gis(card):
            gp = mig.profile_of(card, gi)
            cis = [
                {
                    **ci,
                    "name": self.vendor.ci_profile_of(gp, ci).name,
                    "uuid": mig.mig_uuid(card, gi["id"], ci["id"]),
                }
                for ci in sorted(gi["cis"], key=lambda c: c["id"])
            ]
            found.append({**gi, "name": gp.name, "cis": cis})
        return found

    # --- processes -------------------------------------------------------------------------------

    def _process(self, index: int, gi: int | None, ci: int | None, pid: int, **row: Any) -> State:
        first = {key: index for key in self.vendor.first_keys}
        return {**first, "gpu": index, "gi": gi, "ci": ci, "pid": pid, **row}

    def hold(
        self,
        index: int,
        gi: int,
        ci: int = 0,
        *,
        lifetime: float = 600,
        detach: bool = False,
        pod_uid: str | None = None,
        listed: bool = True,
        memory_mib: int = 512,
    ) -> subprocess.Popen[bytes]:
        """
        Start a real process (`sleep`, bounded by `lifetime` seconds) with the CI's capability
        file and the card's device file open, as a CUDA process on a MIG device has; the tool
        lists it (type C) on that GI/CI while it holds them when `listed` (an unlisted one is
        a leaked handle, seen only by the fd scan). `detach`, `pod_uid`: as `hold()`.
        """
        with self.store._mutate() as state:
            card = self.vendor.mig_at(state, index)
            mig.ci_at(card, gi, ci)
            cap = self._cap_path(card, gi, ci)
            with open(cap, "rb") as cap_fd, open(self.devfile(card["minor"]), "rb") as dev_fd:
                proc = subprocess.Popen(
                    ["sleep", str(max(1, int(lifetime)))],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    pass_fds=(cap_fd.fileno(), dev_fd.fileno()),
                    start_new_session=detach,
                )
            state[self.vendor.processes].append(
                self._process(
                    index,
                    gi,
                    ci,
                    proc.pid,
                    name="sleep",
                    memory_mib=memory_mib,
                    type="C",
                    holder=True,
                    listed=listed,
                    cap=str(cap),
                    pod_uid=pod_uid,
                )
            )
        return proc

    def add_process(
        self,
        index: int,
        gi: int | None,
        ci: int | None,
        pid: int,
        name: str,
        memory_mib: int = 512,
        type: str = "C",  # noqa: A002 - the tools' column name
    ) -> None:
        """A process row the tool lists (any pid, nothing started); gi/ci None print N/A."""
        with self.store._mutate() as state:
            card = self.vendor.at(state, index)
            if gi is not None:
                mig.ci_at(card, gi, 0 if ci is None else ci)
            state[self.vendor.processes].append(
                self._process(
                    index,
                    gi,
                    ci,
                    pid,
                    name=name,
                    memory_mib=memory_mib,
                    type=type,
                    holder=False,
                    listed=True,
                    cap=None,
                    pod_uid=None,
                )
            )

    def holders(self, state: State) -> list[State]:
        """The `hold` holders still holding their CI (listed by the tool or not)."""
        return [
            p
            for p in state.get(self.vendor.processes, [])
            if p["holder"] and procs.holds(p, p["cap"])
        ]

    def listed_processes(self, state: State) -> list[State]:
        """The processes the tool lists: added ones, and listed holders while they hold."""
        return [
            p
            for p in state.get(self.vendor.processes, [])
            if not p["holder"] or (p["listed"] and procs.holds(p, p["cap"]))
        ]

    def set_readings(
        self, index: int, *, gi_memory_used_mib: Mapping[int, int] | None = None, **readings: Any
    ) -> None:
        """
        Fix what the default table shows for a card (mig.READINGS, mig.PPU_READINGS: temp_c,
        power_w, ..., memory_used_mib) and, per existing GI id, the GI's used memory, to
        reproduce a capture.
        """
        unknown = set(readings) - set(self.vendor.readings)
        if unknown:
            have = sorted(self.vendor.readings)
            raise ValueError(f"unknown readings {sorted(unknown)}; have {have}")
        with self.store._mutate() as state:
            card = self.vendor.at(state, index)
            card.update(readings)
            for gi, used in (gi_memory_used_mib or {}).items():
                mig.gi_at(card, gi)["memory_used_mib"] = used

    def write_marker(
        self,
        pod_uid: str,
        container: str,
        index: int,
        gi: int,
        ci: int = 0,
        *,
        root: str = GPUSTACK_PODS,
    ) -> Path:
        """
        gpustack's ownership record for the MIG device (card, GI, CI), as its writeMarker makes
        it: `<root>/<podUID>/c-<container>/<vendor>-mig-<card UUID>.json`, Go json.Marshal of
        its migMarker (compact, declaration order), temp file + chmod + rename: 0644 for NVIDIA,
        0600 for T-Head (osx.DurableWrite(path, data, 0o600)). The temp file is
        `.<vendor>-mig-*.tmp` for both; DurableWrite's own temp naming is unknown.
        """
        card = self.vendor.at(self.store.state(), index)
        inst = mig.gi_at(card, gi)
        mig.ci_at(card, gi, ci)
        gp = mig.profile_of(card, inst)
        record = {
            "podUID": pod_uid,
            "container": container,
            **self.vendor.marker_record(card, inst, gp, gi, ci),
        }
        folder = self.store.rootfs / root.lstrip("/") / pod_uid / f"c-{container}"
        return publish_marker(
            folder, self.vendor.marker, card["uuid"], record, self.vendor.marker_mode
        )

    # --- the node's events ---------------------------------------------------------------------

    def kill_holders(self, state: State) -> list[int]:
        """End the `hold` holders (reboot, unhold_all); the added rows stay."""
        killed = []
        for proc in [p for p in state.get(self.vendor.processes, []) if p["holder"]]:
            if procs.holds(proc, proc["cap"]):
                procs.kill(proc["pid"])
                killed.append(proc["pid"])
            state[self.vendor.processes].remove(proc)
        return killed

    def forget(self, state: State, pid: int) -> None:
        """Drop the process rows of `pid` (unhold, remove_process)."""
        if self.vendor.processes in state:
            rows = state[self.vendor.processes]
            state[self.vendor.processes] = [p for p in rows if p["pid"] != pid]

    def reboot(self, state: State) -> None:
        """MIG mode stays, its instances do not (a PPU's: UNVERIFIED, as NVIDIA's)."""
        for card in state.get(self.vendor.devices, []):
            for gi in card["gis"]:
                for ci in gi["cis"]:
                    self._drop_cap(card, gi["id"], ci["id"])
                self._drop_cap(card, gi["id"])
            card["gis"] = []
        if self.vendor.processes in state:
            state[self.vendor.processes] = []
