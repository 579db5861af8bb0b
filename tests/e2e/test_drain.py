"""
The pre-maintenance drain end to end: the real pyinfra CLI runs drain.py and undrain.py on the
seed story's node (simulator/scenarios/seed-310p.yaml) in its namespace, while the test plays
the cluster: pods leave (or do not), and a loopback API server answers the cordon.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import background
import pytest
from e2e.conftest import PYINFRA, REPO, Node
from e2e.test_fleet_view import enforcer
from e2e.test_kubernetes_api import kubeconfig

from operations.converge import report_file_name
from simulator import hygon_story, mig_story, vgpu_story
from simulator.barrier import Barrier

INFER_A = "8ad2a1b0-3c1e-4d1f-9f0e-2b7c1c0d9a11"  # Running, holds vNPU 100
INFER_B = "5c0e7f3a-91d2-4b8e-a6f1-3d7b2e9c4a20"  # Pending, allocated a vir02
TRAIN_C = "e1b94c6d-2a7f-4e35-8d0c-7f6a5b3e2d91"  # Pending, nothing allocated
NODE = "k3s-310p"


def drain_data(**data: object) -> dict:
    # A bound, not a measure: pods leave when the test says, on a loaded machine too.
    return {"enforcer_drain_timeout_seconds": 600, "enforcer_drain_poll_seconds": 0.5, **data}


def run(node: Node, deploy: str, *args: str) -> tuple[int, str]:
    done = node.ns.run([PYINFRA, "-y", str(node.inventory), deploy, *args], cwd=str(REPO))
    return done.returncode, done.stdout + done.stderr


def pods_leave(node: Node, *uids: str) -> None:
    """What an eviction does on the node: the processes exit, the runtime and kubelet let go."""
    if INFER_A in uids:
        end_holders = (
            f"from simulator.node import SimNode; SimNode({str(node.path)!r}).unhold_all()"
        )
        done = node.ns.run([sys.executable, "-c", end_holders], cwd=str(REPO))
        assert done.returncode == 0, done.stderr
        node.sim.detach(100)
    for uid in uids:
        node.sim.remove_pod(uid)
        node.sim.release(uid)


def marker(node: Node) -> dict | None:
    path = node.state_dir / "drain.json"
    return json.loads(path.read_text()) if path.exists() else None


def audit_events(node: Node) -> list[dict]:
    path = node.state_dir / "audit.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def until(predicate, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


@pytest.fixture
def api_node() -> Iterator[dict]:
    """A loopback API server that knows one Node and answers GET and PATCH as the API server
    does; `spec` is the Node's spec, `patches` what was sent."""
    seen: dict = {"spec": {}, "patches": []}

    class Handler(BaseHTTPRequestHandler):
        def _node(self) -> None:
            body = json.dumps(
                {
                    "kind": "Node",
                    "apiVersion": "v1",
                    "metadata": {"name": NODE},
                    "spec": seen["spec"],
                }
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            assert self.path == f"/api/v1/nodes/{NODE}", self.path
            self._node()

        def do_PATCH(self) -> None:  # noqa: N802
            patch = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen["patches"].append(patch)
            for key, value in patch["spec"].items():
                if value is None:
                    seen["spec"].pop(key, None)
                else:
                    seen["spec"][key] = value
            self._node()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    seen["url"] = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_clean_drain_cordons_waits_for_the_pods_destroys_everything_and_undrain_ends_it(
    seed_node, tmp_path, api_node
):
    seed_node.configure(
        **drain_data(
            enforcer_drain_cordon=True,
            enforcer_kubeconfig=kubeconfig(tmp_path / "kubeconfig", api_node["url"]),
        )
    )
    log = tmp_path / "drain.log"
    pid = background.start(seed_node, log, deploy="drain.py")
    until(lambda: "drain: waited" in log.read_text())  # what it prints once it waits
    assert api_node["spec"] == {"unschedulable": True}  # cordoned before it waits
    assert seed_node.vnpus() == {100, 101, 102}  # nothing destroyed while pods claim
    pods_leave(seed_node, INFER_A, INFER_B, TRAIN_C)
    rc = seed_node.ns.wait(pid)
    output = log.read_text()
    assert rc == 0, output
    assert "ascend-vnpu npu:0:0 100 (vir02): held" in output  # the progress said what it waited for
    assert seed_node.vnpus() == set()
    drained = marker(seed_node)
    assert drained["state"] == "drained" and drained["cordoned"] is True
    assert {d["id"] for d in drained["destroyed"]} == {"100", "101", "102"}
    # Its start is its first read's clock, its end the clock of the read that found the node
    # free, which may have read the clock before the pods left (a read is not one instant).
    assert "@" in drained["by"] and drained["started_at"] <= drained["drained_at"]
    destroys = [e for e in audit_events(seed_node) if e["event"] == "destroy"]
    assert {(e["partition"]["id"], e["mode"]) for e in destroys} == {
        ("100", "drain"),
        ("101", "drain"),
        ("102", "drain"),
    }

    converged = seed_node.enforce()
    assert converged.rc == 0, converged.output
    assert converged.report["drain"]["state"] == "drained"
    assert "DRAINED by" in converged.output

    rc, output = run(seed_node, "undrain.py")
    assert rc == 0, output
    assert marker(seed_node) is None
    assert api_node["spec"] == {}  # uncordoned as kubectl does: the field removed
    assert api_node["patches"] == [
        {"spec": {"unschedulable": True}},
        {"spec": {"unschedulable": None}},
    ]
    converged = seed_node.enforce()
    assert converged.rc == 0, converged.output
    assert converged.report["drain"] is None


def test_drain_blocked_by_a_pod_that_never_leaves_fails_listing_it_and_keeps_what_it_claims(
    seed_node,
):
    seed_node.configure(**drain_data(enforcer_drain_timeout_seconds=2))
    pods_leave(seed_node, INFER_B, TRAIN_C)  # infer-a stays, and its process holds vNPU 100
    rc, output = run(seed_node, "drain.py")
    assert rc != 0, output
    assert "the drain timed out; still there:" in output
    assert "ascend-vnpu npu:0:0 100 (vir02): held" in output
    assert seed_node.vnpus() == {100}  # the free zombies went, the held vNPU stayed
    unfinished = marker(seed_node)
    assert unfinished["state"] == "draining" and unfinished["drained_at"] is None
    assert {d["id"] for d in unfinished["destroyed"]} == {"101", "102"}

    converged = seed_node.enforce()
    assert converged.rc == 0, converged.output
    assert converged.report["drain"]["state"] == "draining"
    assert converged.verdict(100) == "held"
    assert "DRAINING" in converged.output


def test_a_drain_that_timed_out_needs_a_person_in_the_fleet_view_until_it_is_over(
    seed_node, tmp_path
):
    seed_node.configure(**drain_data(enforcer_drain_timeout_seconds=0))
    pods_leave(seed_node, INFER_B, TRAIN_C)  # infer-a stays, and its process holds vNPU 100
    reports = tmp_path / "reports"
    kept = reports / "drain" / report_file_name("@local")
    rc, output = run(seed_node, "drain.py")
    assert rc != 0 and "the drain timed out" in output, output
    view = enforcer("report", str(reports), "--json")
    assert view.returncode == 1, view.stdout + view.stderr
    (row,) = json.loads(view.stdout)["rows"]
    assert (row["file"], row["mode"], row["counts"]["held"]) == (
        "drain/@local.json",
        "drain, draining",
        1,
    )
    (need,) = row["needs"]
    assert (
        need.startswith("drain not finished: run it again: ") and "enforcer.deploys.undrain" in need
    )

    assert seed_node.enforce().rc == 0  # its report says the drain's state now
    assert not kept.exists()
    (row,) = json.loads(enforcer("report", str(reports), "--json").stdout)["rows"]
    assert row["file"] == "@local.json" and "drain not finished" in row["needs"][0]

    assert run(seed_node, "drain.py")[0] != 0 and kept.exists()
    rc, output = run(seed_node, "undrain.py")
    assert rc == 0 and not kept.exists(), output

    pods_leave(seed_node, INFER_A)
    rc, output = run(seed_node, "drain.py")
    assert rc == 0, output
    assert "Keep the drain in the fleet view" in output and not kept.exists()


def test_drain_interrupted_half_way_and_run_again_finishes_and_records_every_destroy(
    seed_node, tmp_path
):
    seed_node.configure(**drain_data())
    pods_leave(seed_node, INFER_A, INFER_B, TRAIN_C)
    first, second = Barrier(tmp_path / "first"), Barrier(tmp_path / "second")
    seed_node.sim.set_fault("npu-smi", "destroy-vnpu", barrier=str(first))
    pid = background.start(seed_node, tmp_path / "drain.log", deploy="drain.py")
    first.wait(1)
    seed_node.sim.set_fault("npu-smi", "destroy-vnpu", barrier=str(second))  # the next one waits
    first.close()
    held = second.wait(1)  # the first destroy is done, the second has not destroyed
    background.drop(seed_node, pid, *background.arrivals(held))  # the control node goes away
    second.close()
    assert marker(seed_node)["state"] == "draining"
    assert len(seed_node.vnpus()) == 2  # it did not finish

    seed_node.sim.clear_faults()
    rc, output = run(seed_node, "drain.py")
    assert rc == 0, output
    assert seed_node.vnpus() == set()
    drained = marker(seed_node)
    assert drained["state"] == "drained"
    assert {d["id"] for d in drained["destroyed"]} == {"100", "101", "102"}


def test_a_dry_drain_reads_once_and_changes_nothing(seed_node, tmp_path, api_node):
    config = kubeconfig(tmp_path / "kubeconfig", api_node["url"])
    seed_node.configure(**drain_data(enforcer_drain_cordon=True, enforcer_kubeconfig=config))
    pods_leave(seed_node, INFER_B, TRAIN_C)
    rc, output = run(seed_node, "drain.py", "--dry")
    assert rc == 0, output
    assert "would cordon node k3s-310p" in output and api_node["patches"] == []
    assert "orphan (would destroy)" in output and "drain: waited" not in output
    assert seed_node.vnpus() == {100, 101, 102} and marker(seed_node) is None


def test_not_pinned_a_drain_frees_nothing_while_the_ledger_is_not_read(seed_node):
    """The ledger holds rule 4's memory (partitions kept while their advertiser is away) and the
    drain waives the grace that covers its loss: one that cannot be read frees nothing."""
    seed_node.configure(**drain_data())
    pods_leave(seed_node, INFER_B, TRAIN_C)
    (seed_node.state_dir / "ledger.json").mkdir(parents=True)
    rc, output = run(seed_node, "drain.py", "--dry")
    assert rc == 0, output
    assert "would destroy" not in output, output
    assert "inconclusive" in output and "ledger: not read: cat ledger.json exited 1" in output
    assert "rule 4's memory of desired partitions, could not be read: cat ledger.json" in output
    assert seed_node.vnpus() == {100, 101, 102} and marker(seed_node) is None


def test_a_host_in_plan_mode_is_not_drained(seed_node):
    seed_node.configure(**drain_data(enforcer_mode="plan"))
    pods_leave(seed_node, INFER_B, TRAIN_C)
    rc, output = run(seed_node, "drain.py")
    assert rc != 0 and "enforcer_mode is plan" in output, output
    assert seed_node.vnpus() == {100, 101, 102} and marker(seed_node) is None


def end_holders(node: Node) -> None:
    """Every process the simulator started that holds a partition exits (in the namespace)."""
    script = f"from simulator.node import SimNode; SimNode({str(node.path)!r}).unhold_all()"
    done = node.ns.run([sys.executable, "-c", script], cwd=str(REPO))
    assert done.returncode == 0, done.stderr


def test_drain_of_the_h100_waits_for_llm_a_then_destroys_every_gpu_instance(mig_node):
    data = {**mig_story.HOST_DATA, **drain_data(enforcer_drain_timeout_seconds=1)}
    mig_node.configure(enforcer_tools=mig_story.tools(mig_node.path), **data)
    rc, output = run(mig_node, "drain.py")
    assert rc != 0 and f"nvidia-mig gpu:{mig_node.sim.state()['gpus'][0]['uuid']}" in output
    assert mig_node.instances() == {mig_node.gis["a"], mig_node.gis["b"]}  # the leak went

    end_holders(mig_node)
    for uid in (mig_story.LLM_A, mig_story.LLM_B):
        mig_node.sim.remove_pod(uid)
        mig_node.sim.release(uid)
    mig_node.sim.remove_marker_dir(mig_story.LLM_A)
    rc, output = run(mig_node, "drain.py")
    assert rc == 0, output
    assert mig_node.instances() == set()
    assert len(marker(mig_node)["destroyed"]) == 3


def test_drain_of_the_vm_host_keeps_a_persistent_mdev_and_destroys_the_rest(vgpu_node):
    kept = vgpu_node.sim.create_mdev(vgpu_story.T4, "nvidia-230")
    vgpu_node.sim.define_mdev(kept, vgpu_story.T4, "nvidia-230")  # the operator's: pinned
    vgpu_node.configure(**drain_data(enforcer_drain_timeout_seconds=1))
    rc, output = run(vgpu_node, "drain.py")
    assert rc != 0, output  # web runs, booting has claimed its VF
    assert {vgpu_node.vgpus["web"], vgpu_node.vgpus["booting"], kept} <= vgpu_node.present()

    end_holders(vgpu_node)  # the VMs are shut down and the VMM forgets them
    for instance in (vgpu_story.WEB, vgpu_story.BATCH, vgpu_story.RESTORED, vgpu_story.BOOTING):
        vgpu_node.sim.remove_vm_metadata(instance)
    rc, output = run(vgpu_node, "drain.py")
    assert rc == 0, output
    assert vgpu_node.present() == {kept}
    assert marker(vgpu_node)["state"] == "drained"


def test_drain_of_the_hygon_node_destroys_whole_dcus_and_waits_for_the_others(dcu_node):
    """The leaked DCU goes at once; llm-b's DCU, with a leak beside its vDCU, once llm-b left."""
    data = {**hygon_story.host_data(dcu_node.path), **drain_data(enforcer_drain_timeout_seconds=1)}
    dcu_node.configure(**data)
    rc, output = run(dcu_node, "drain.py")
    assert rc != 0 and "hygon-vdcu dcu:0000:3e:00.0 2" in output  # the leak beside llm-b's
    a, b, leak1 = (dcu_node.vdcus[k][0] for k in ("a", "b", "leak1"))
    assert dcu_node.listed() == {a, b, leak1}  # DCU 2's two leaked vDCUs went together

    end_holders(dcu_node)
    for uid in (hygon_story.LLM_A, hygon_story.LLM_B):
        dcu_node.sim.remove_pod(uid)
        dcu_node.sim.release(uid)
        dcu_node.sim.remove_marker_dir(uid)
    rc, output = run(dcu_node, "drain.py")
    assert rc == 0, output
    assert dcu_node.listed() == set()
    assert len(marker(dcu_node)["destroyed"]) == 5
