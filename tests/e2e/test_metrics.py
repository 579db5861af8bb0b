"""
The node_exporter textfile (enforcer.metrics): rendered by prometheus_client, written with the
ledger, touched by every node read; parsed back here with prometheus_client's own parser.
"""

from __future__ import annotations

import os
import time

from prometheus_client.parser import text_string_to_metric_families

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
    assert found[("partition_enforcer_last_run_success", ())] == 1
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
