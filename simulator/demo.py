"""
`make demo`: the seed story on a simulated 310P node, then the MIG story on a simulated H100 node
(simulator.mig_story), the DRA story on an H100 node with NVIDIA's DRA driver
(simulator.dra_story), the MIG story on a simulated T-Head PPU (simulator.ppu_story), the
leaked-vDCU story on a simulated Hygon DCU node (simulator.hygon_story), then the vGPU story on a
VM host (simulator.vgpu_story), each converged by the real pyinfra CLI.

Runs inside its own PID and mount namespace (python -m simulator.namespace -- ...), so the fd
scan sees the nodes' processes only. The seed story: infer-a runs on vNPU 100; two zombies (101,
102) were left by failed container creates of a deleted pod; infer-b is admitted; train-c waits
for four AI cores. After the first run infer-b's container is created and the runtime makes its
vNPU, which no process opens.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from enforcer.fleet import executable
from enforcer.policy import DEFAULTS
from enforcer.report import table
from simulator import dra_story, hygon_story, mig_story, ppu_story, scenario, vgpu_story
from simulator.namespace import mount_proc_driver, unmount_proc_driver
from simulator.node import SimNode
from simulator.show import render_summary

REPO = Path(__file__).resolve().parents[1]
STATE_DIR = DEFAULTS["enforcer_state_dir"]
SEED = REPO / "simulator" / "scenarios" / "seed-310p.yaml"
INFER_B = "5c0e7f3a-91d2-4b8e-a6f1-3d7b2e9c4a20"
TRAIN_C = "e1b94c6d-2a7f-4e35-8d0c-7f6a5b3e2d91"


def infer_b_starts(node: SimNode) -> int:
    """kubelet creates infer-b's container; ascend-docker-runtime makes its vNPU (returned)."""
    node.set_pod_state(INFER_B, "ContainerCreating")
    return node.create_vnpu(0, 0, "vir02")


def say(text: str) -> None:
    print(f"\n=== {text}", flush=True)


def enforce(node: Path, run: int, inventory: str = "demo.py") -> None:
    """One `pyinfra -y inventories/<inventory> deploy.py`; its full output goes to a log file."""
    pyinfra = str(Path(sys.executable).with_name("pyinfra"))
    argv = [pyinfra, "-y", str(REPO / "inventories" / inventory), "deploy.py"]
    log = node / f"pyinfra-run-{run}.log"
    with log.open("w") as out:
        done = subprocess.run(
            argv,
            cwd=REPO,
            env={**os.environ, "DEMO_NODE": str(node)},
            stdout=out,
            stderr=subprocess.STDOUT,
            check=False,
        )
    if done.returncode != 0:
        raise SystemExit(f"pyinfra exited {done.returncode}: see {log}")
    report = json.loads((node / "rootfs/var/lib/partition-enforcer/report.json").read_text())
    print(table(report))
    print(f"(pyinfra's own output: {log.relative_to(node.parent)})")


def main(node_dir: str, runs: int = 5) -> int:
    node_path = Path(node_dir).resolve()
    node = scenario.build(scenario.load(SEED), node_path)
    say("the node, as the seed story leaves it (train-c needs vir04: 4 AI cores)")
    print(render_summary(node, node.state()))
    for run in range(1, runs + 1):
        say(f"partition-enforcer run {run} of {runs} (grace: 3 runs and 2 s)")
        enforce(node_path, run)
        print("vNPUs now:", sorted(v["id"] for v in node.state()["vnpus"]))
        if run == 1:
            made = infer_b_starts(node)
            say(f"infer-b's container is created, and with it its vNPU {made}; not opened yet")
        time.sleep(1)
    say("train-c is scheduled now that four AI cores are free")
    made = node.create_vnpu(0, 0, "vir04")
    node.set_pod_state(TRAIN_C, "ContainerCreating")
    print(f"vNPU {made} (vir04) created for train-c")
    print(render_summary(node, node.state()))
    SimNode(node_path).unhold_all()
    kinds = ("h100", "dra", "ppu", "dcu", "vmhost")
    others = [node_path.with_name(f"{node_path.name}-{k}") for k in kinds]
    for story, path in zip((mig, dra, thead, hygon, vm_host), others, strict=True):
        story(path, runs)
    summary([node_path, *others])
    return 0


def summary(nodes: list[Path]) -> None:
    """What the runs did on each node, from its audit log and last report: every partition,
    destroyed or kept with the reason; then what next, as commands that run as printed here."""
    say("summary: destroyed, and kept with the reason")
    for node in nodes:
        print("\n".join(node_summary(node / "rootfs" / STATE_DIR.lstrip("/"), node.name)))
    report = nodes[0] / "rootfs" / STATE_DIR.lstrip("/") / "report.json"
    kept = [v for v in json.loads(report.read_text())["verdicts"] if v["status"] in KEPT]
    one = kept[0]["partition"]["id"] if kept else "ID"
    enforcer, pyinfra = executable("enforcer"), executable("pyinfra")
    print(
        f"\nNext: why one was kept, `{enforcer} explain {_here(report)} {one}`;\n"
        f"      on a node of yours, read-only first: `{pyinfra} <node> enforcer.deploys.converge "
        "--dry`\n"
        "      (README.md, A first run on one node)."
    )


KEPT = ("held", "claimed", "pinned")  # the summary's `explain` names the first one of these


def node_summary(state: Path, name: str) -> list[str]:
    """Every partition of the node's runs: destroyed (the audit log's verified outcomes), then
    each verdict of the last report: destroyed by that run (verified by the next one), or kept."""
    log = state / "audit.jsonl"  # none: no run proved anything
    events = [json.loads(line) for line in (log.read_text().splitlines() if log.exists() else [])]
    gone = [e["partition"] for e in events if e["event"] == "destroyed"]
    lines = [f"{name}: destroyed {', '.join(_named(p) for p in gone) or 'nothing'}"]
    report = json.loads((state / "report.json").read_text())
    for v in report["verdicts"]:
        if v["status"] == "destroyed":
            continue  # in the audit log's outcomes above
        if v["status"] == "orphan" and report["mode"] == "converge":
            lines.append(f"  destroyed {_named(v['partition'])} by the last run (not verified yet)")
            continue
        reason = v["reason"] if len(v["reason"]) <= 90 else v["reason"][:87] + "..."
        lines.append(f"  kept {_named(v['partition'])}: {v['status']}: {reason}")
    return lines


def _here(path: Path) -> str:
    """A path as printed for the current directory: relative when under it."""
    return str(path.relative_to(Path.cwd())) if path.is_relative_to(Path.cwd()) else str(path)


def _named(p: dict) -> str:
    return f"{p['kind']} {p['id']}"


def mig(node_path: Path, runs: int) -> None:
    """The MIG story: a GC-deleted record, a partition not opened yet, a true leak."""
    node, gis = mig_story.build(node_path)
    mount_proc_driver(node_path)  # this namespace's /proc/driver: the simulated GPU's
    node.hold_mig(0, gis["a"], detach=True, pod_uid=mig_story.LLM_A)
    say(
        f"the H100 node: llm-a runs on GI {gis['a']}; llm-b was granted GI {gis['b']}, and the "
        f"device plugin's GC deleted its ownership record; GI {gis['leak']} leaked from a failed "
        "create"
    )
    print(render_summary(node, node.state()))
    for run in range(1, runs + 1):
        say(f"partition-enforcer run {run} of {runs} on the H100 node")
        enforce(node_path, run, "demo_mig.py")
        print("GPU instances now:", sorted(int(g["id"]) for g in node.gpu_instances(0)))
        if run == 2:
            node.hold_mig(0, gis["b"], detach=True, pod_uid=mig_story.LLM_B)
            node.set_pod_state(mig_story.LLM_B, "Running")
            say(f"llm-b's container runs and opens GI {gis['b']}")
        time.sleep(1)
    node.unhold_all()
    unmount_proc_driver(node_path)  # the next node has no NVIDIA driver


def dra(node_path: Path, runs: int) -> None:
    """The DRA story: a claim prepared for a pod in its init container, a GI the driver leaked."""
    node, gis = dra_story.build(node_path)
    mount_proc_driver(node_path)  # this namespace's /proc/driver: this node's simulated GPU
    say(
        f"the H100 node with NVIDIA's DRA driver {dra_story.RELEASE} (dynamic MIG): llm-a's claim "
        f"was prepared on GI {gis['a']} while llm-a is still in its init container; batch-b's "
        f"claim was unprepared but the driver left its GI {gis['leak']}; eval-c's unprepare "
        f"failed half way: GI {gis['halfway']} has no CI left, its claim is still prepared"
    )
    print(render_summary(node, node.state()))
    print("the DRA driver's checkpoint holds:", *dra_story.claims(node), sep="\n")
    for run in range(1, runs + 1):
        say(f"partition-enforcer run {run} of {runs} on the DRA node")
        enforce(node_path, run, "demo_dra.py")
        print("GPU instances now:", sorted(int(g["id"]) for g in node.gpu_instances(0)))
        if run == 2:
            dra_story.retry_unprepare(node)
            say(
                f"the kubelet retries eval-c's unprepare: the driver deletes GI {gis['halfway']} "
                "and forgets the claim"
            )
        time.sleep(1)
    unmount_proc_driver(node_path)  # the next node has no NVIDIA driver


def thead(node_path: Path, runs: int) -> None:
    """The MIG story on a T-Head PPU: records `thead-mig-*.json`, capability devices, no env."""
    node, gis = ppu_story.build(node_path)
    mount_proc_driver(node_path)  # now the simulated PPU's /proc/driver (alixpu capabilities)
    node.hold_ppu_mig(0, gis["a"], detach=True, pod_uid=ppu_story.LLM_A)
    say(
        f"the T-Head PPU node: llm-a runs on GI {gis['a']}; llm-b was granted GI {gis['b']} "
        "(its checkpoint entry holds the GI's capability devices), and the GC deleted its "
        f"ownership record; GI {gis['leak']} leaked from a failed create"
    )
    print(render_summary(node, node.state()))
    for run in range(1, runs + 1):
        say(f"partition-enforcer run {run} of {runs} on the T-Head PPU node")
        enforce(node_path, run, "demo_ppu.py")
        print("GPU instances now:", sorted(int(g["id"]) for g in node.ppu_instances(0)))
        time.sleep(1)
    node.unhold_all()
    unmount_proc_driver(node_path)  # the next node has no PPU driver


def hygon(node_path: Path, runs: int) -> None:
    """Leaked vDCUs on a Hygon node: destroyed a whole DCU at a time, never beside a live pod's."""
    node, vdcus = hygon_story.build(node_path)
    node.hold_dcu(0, detach=True, pod_uid=hygon_story.LLM_A)
    say(
        f"the Hygon DCU node: llm-a runs on vDCU {vdcus['a'][0]} (DCU 0); llm-b was given vDCU "
        f"{vdcus['b'][0]} on DCU 1, beside vDCU {vdcus['leak1'][0]}, leaked; vDCUs "
        f"{' and '.join(map(str, vdcus['leak2']))} on DCU 2 leaked from a failed create. "
        "hy-smi destroys every vDCU of a DCU at once"
    )
    print(render_summary(node, node.state()))
    for run in range(1, runs + 1):
        say(f"partition-enforcer run {run} of {runs} on the Hygon DCU node")
        enforce(node_path, run, "demo_hygon.py")
        print("vDCUs now:", sorted(node.vdcus()))
        if run == 1:
            (late,) = node.create_vdcus(2, [(10, 4096)])
            say(f"a create on DCU 2 for a pod that then fails leaves vDCU {late}, a later leak")
        if run == 2:
            node.remove_pod(hygon_story.LLM_B)
            node.release(hygon_story.LLM_B)
            node.remove_marker_dir(hygon_story.LLM_B)
            say("llm-b is deleted: its checkpoint entry and its vdev record go with it")
        time.sleep(1)
    node.unhold_all()


def vm_host(node_path: Path, runs: int) -> None:
    """The vGPU story: VMs whose VMM failed to clean up, and a leak with no record at all."""
    node, vgpus = vgpu_story.build(node_path)
    with node.kernel():  # answers the sysfs writes of the destroys, as the kernel would
        vgpu_story.start(node, node, vgpus)
        say(
            f"the VM host: web runs on mdev {vgpus['web']}; batch's hypervisor exited, its "
            f"record still names mdev {vgpus['batch']}; restored's record names a PID another "
            f"process has now (VF {vgpus['restored']}); booting has no PID yet (VF "
            f"{vgpus['booting']}); mdev {vgpus['leak']} leaked with no record"
        )
        print(node.summary())
        for run in range(1, runs + 1):
            say(f"partition-enforcer run {run} of {runs} on the VM host")
            enforce(node_path, run, "demo_vgpu.py")
            vfs = sorted(vf for vf, t in node.vgpu_types().items() if t)
            print("mdevs now:", sorted(node.mdevs()), "VF vGPUs now:", vfs)
            time.sleep(1)
        node.unhold_all()
    node.remove_socket_dir()


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:2]))
