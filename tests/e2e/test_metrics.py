"""
The node_exporter textfile (enforcer.metrics): rendered by prometheus_client, written with the
ledger, touched by every node read; parsed back here with prometheus_client's own parser.
"""

from __future__ import annotations

import os
import subprocess
import time

import pytest
from e2e import test_dra
from prometheus_client.parser import text_string_to_metric_families

import kinds
from enforcer.metrics import FILE, VERSION


def samples(node) -> dict[tuple[str, tuple], float]:
    text = (node.state_dir / FILE).read_text()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_the_textfile_counts_verdicts_destroys_and_stuck_claims(vgpu_node):
    vgpu_node.configure(enforcer_vm_stuck_seconds=0)
    vgpu_node.converge(3)
    found = samples(vgpu_node)
    assert found[("partition_enforcer_verdicts", (("kind", "mdev"), ("verdict", "orphan")))] == 2
    assert found[("partition_enforcer_verdicts", (("kind", "mdev"), ("verdict", "held")))] == 1
    assert found[("partition_enforcer_destroys_total", (("kind", "mdev"),))] == 2
    assert found[("partition_enforcer_destroys_total", (("kind", "nvidia-vfio"),))] == 1
    assert found[("partition_enforcer_stuck_claims", ())] == 1
    assert found[("partition_enforcer_breaker_tripped", ())] == 0
    assert found[("partition_enforcer_last_run_success", ())] == 0  # the stuck claim: a person
    assert (vgpu_node.state_dir / FILE).stat().st_mode & 0o777 == 0o644


def test_a_run_that_changes_nothing_only_touches_the_textfile(vgpu_node):
    vgpu_node.converge(5)  # everything destroyed and confirmed: nothing changes any more
    prom = vgpu_node.state_dir / FILE
    before = prom.read_bytes()
    an_hour_ago = time.time() - 3600
    os.utime(prom, (an_hour_ago, an_hour_ago))
    run = vgpu_node.enforce()
    assert run.rc == 0 and "No changes" in run.output, run.output
    assert prom.read_bytes() == before
    assert prom.stat().st_mtime > an_hour_ago + 1800  # the read's heartbeat touched it


def test_the_textfile_says_the_host_s_schedule_period_and_a_new_one_rewrites_it(vgpu_node):
    """PartitionEnforcerNotRunning pages after three of it, as the fleet view judges."""
    vgpu_node.converge(5)  # settled: a run that changes nothing writes nothing
    period = ("partition_enforcer_schedule_period_seconds", ())
    assert samples(vgpu_node)[period] == 300  # the default 5min
    vgpu_node.configure(enforcer_schedule_period="1h")
    assert vgpu_node.enforce().rc == 0
    assert samples(vgpu_node)[period] == 3600


def test_the_destroy_counters_keep_their_totals_after_the_partitions_are_forgotten(vgpu_node):
    vgpu_node.converge(3)  # the third run starts the destroys
    started = samples(vgpu_node)
    vgpu_node.configure(enforcer_mode="plan")
    vgpu_node.converge(2)  # the destroys confirmed, their entries gone; another mode, no destroy
    found = samples(vgpu_node)
    for kind, n in (("mdev", 2), ("nvidia-vfio", 1)):
        assert started[("partition_enforcer_destroys_total", (("kind", kind),))] == n
        assert found[("partition_enforcer_destroys_total", (("kind", kind),))] == n
        assert found[("partition_enforcer_destroy_failures_total", (("kind", kind),))] == 0
    info = [k for k in found if k[0] == "partition_enforcer_info"]
    assert info == [("partition_enforcer_info", (("mode", "plan"), ("version", VERSION)))]
    assert found[info[0]] == 1


# --- every kind's textfile, as Prometheus' own linter reads it --------------------------------

build = test_dra.build  # the DRA stories' fixture (an H100 with NVIDIA's DRA driver)
# Each story's node and the partition kinds its textfile counts: together, every kind there is.
STORIES = {
    "seed_node": {"ascend-vnpu"},
    "mig_node": {"nvidia-mig"},
    "ppu_node": {"thead-ppu"},
    "dcu_node": {"hygon-vdcu"},
    "vgpu_node": {"mdev", "nvidia-vfio"},
    "dra": {"nvidia-mig"},
}


def dra_node(build) -> test_dra.DraNode:
    """batch-b's claim prepared (its GI claimed), train-c running; a GI no claim names (a leak)."""

    def lay_out(node: test_dra.DraNode) -> None:
        node.sim.add_pod(test_dra.TRAIN_C, "train-c", phase="Running")
        node.sim.add_pod(test_dra.BATCH_B, "batch-b", phase="Running")
        node.gis["b"] = node.prepare(
            test_dra.CLAIM_B, "batch-b-gpu", "batch-b", test_dra.BATCH_B, 0, 0
        )
        node.gis["leak"] = node.sim.create_gi(0, "1g.10gb")

    return build(lay_out)


def test_every_kind_is_a_story_here():
    assert set().union(*STORIES.values()) == set(kinds.NAMES)


@pytest.mark.parametrize("story", sorted(STORIES))
def test_promtool_check_metrics_passes_every_kinds_textfile(promtool, request, story):
    node = dra_node(request.getfixturevalue("build")) if story == "dra" else None
    node = node or request.getfixturevalue(story)
    node.converge(3)  # candidates, then destroys: the verdicts and counters of a whole story
    text = (node.state_dir / FILE).read_text()
    counted = {
        s.labels["kind"]
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "partition_enforcer_verdicts"
    }
    assert counted == STORIES[story], text
    done = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=120
    )
    assert (done.returncode, done.stdout + done.stderr) == (0, ""), text
