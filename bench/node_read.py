"""
The node read of a converge run alone, as deploy.py makes it (the same command, fact and parse),
nothing decided or kept: bench/fleet.py's middle run, between bare `exec -- true` and a converge
run, to tell the node read's cost from the rest of the run's.

    pyinfra -y INVENTORY bench/node_read.py
"""

from pyinfra import host

from facts.snapshot import NodeSnapshot
from operations.converge import host_policy

policy = host_policy(host)
asks = "kubelet-pod-resources" in policy.claim_sources
host.get_fact(NodeSnapshot, paths=policy.paths, pod_resources=asks, record=True)
