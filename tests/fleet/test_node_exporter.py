"""
A real node_exporter (Debian's prometheus-node-exporter) serves a converged node's textfile, as on
a real node: its textfile collector alone (`--collector.disable-defaults --collector.textfile`)
reads the node's metrics dir, on the node's own loopback address, port 9100; the test scrapes it
over HTTP and finds the enforcer's metrics with the values the run wrote. Needs the fleet's
prerequisites and prometheus-node-exporter; in CI a missing one fails, never skips.
"""

from __future__ import annotations

import os
import selectors
import socket
import subprocess
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from fleet.conftest import pyinfra, report
from fleet.harness import FleetNode
from prometheus_client.parser import text_string_to_metric_families

from enforcer.metrics import FILE

FLEET_SIZE = 1  # node1: the seed story (Ascend 310P, zombie vNPUs), reached as root
PORT = 9100
START_TIMEOUT = 60.0  # bounds a broken start on a loaded machine; orders nothing


def samples(text: str) -> dict[tuple[str, tuple], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def listening(address: str) -> bool:
    try:
        with socket.create_connection((address, PORT), timeout=1):
            return True
    except OSError:
        return False


def wait_serving(process: subprocess.Popen[bytes], address: str) -> None:
    """Until node_exporter logs that it listens (its own readiness line), bounded; its log says
    why when it exits or never does."""
    assert process.stderr is not None
    log = b""
    ready = f'msg="Listening on" address={address}:{PORT}'.encode()
    deadline = time.monotonic() + START_TIMEOUT
    with selectors.DefaultSelector() as selector:
        selector.register(process.stderr, selectors.EVENT_READ)
        while ready not in log and (left := deadline - time.monotonic()) > 0:
            if not selector.select(timeout=left):
                break
            chunk = os.read(process.stderr.fileno(), 65536)
            if not chunk:  # exited
                break
            log += chunk
    if ready not in log:
        raise AssertionError(f"node_exporter on {address}:{PORT} is not serving:\n{log.decode()}")


@pytest.fixture
def served(fleet, node_exporter) -> Iterator[tuple[FleetNode, str]]:
    """node1 converged once over SSH, and a node_exporter serving its metrics dir (the state
    dir: enforcer_metrics_dir unset) at node1's address."""
    run = pyinfra(fleet)
    assert run.rc == 0, run.output
    (node,) = fleet.nodes.values()
    if listening(node.address):  # another's node_exporter would answer for this one
        raise RuntimeError(f"{node.address}:{PORT} is already in use")
    argv = [
        node_exporter,
        "--collector.disable-defaults",
        "--collector.textfile",
        f"--collector.textfile.directory={node.state_dir}",
        f"--web.listen-address={node.address}:{PORT}",
    ]
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_serving(process, node.address)
        yield node, f"http://{node.address}:{PORT}/metrics"
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_node_exporter_serves_the_enforcer_textfile_with_the_values_the_run_wrote(served):
    node, url = served
    with urllib.request.urlopen(url, timeout=30) as answer:
        scraped = samples(answer.read().decode())
    textfile = node.state_dir / FILE
    written = samples(textfile.read_text())
    ours = {k: v for k, v in scraped.items() if k[0].startswith("partition_enforcer_")}
    assert ours == written
    verdicts = Counter((v["partition"]["kind"], v["status"]) for v in report(node)["verdicts"])
    assert verdicts, "the seed story's node lists vNPUs"
    for (kind, status), n in verdicts.items():
        assert scraped[("partition_enforcer_verdicts", (("kind", kind), ("verdict", status)))] == n
    assert scraped[("partition_enforcer_last_run_success", ())] == 1
    # The textfile collector read it without error, and its mtime is the file's: what the
    # PartitionEnforcerNotRunning alert (enforcer alerts) reads.
    assert scraped[("node_textfile_scrape_error", ())] == 0
    mtimes = {k: v for k, v in scraped.items() if k[0] == "node_textfile_mtime_seconds"}
    assert list(mtimes.values()) == [int(textfile.stat().st_mtime)], mtimes
    (labels,) = [dict(k[1]) for k in mtimes]
    assert Path(labels["file"]).name == FILE
