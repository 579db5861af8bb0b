"""
The Kubernetes node name of a host: `enforcer_node_name` when its host data sets it, else the
node's own name as kubelet registers it by default (no --hostname-override): the kernel's
hostname, trimmed and lowercased (kubelet's nodeutil.GetHostname, in
k8s.io/component-helpers/node/util; on Linux os.Hostname reads /proc/sys/kernel/hostname). The
inventory's host name is no default: `gpu-3.dc1.example.com` for the kubelet's `gpu-3` would make
the API list no pod on the node (issue 18, story 6a).

    resolve("gpu-3", None, "gpu-3.dc1.example.com") -> NodeName("gpu-3", "enforcer_node_name")
    resolve(None, <hostname section>, "@local")       -> NodeName("gpu-3", DEFAULTED)
"""

from __future__ import annotations

from dataclasses import dataclass

from pyinfra.api import FactBase

from enforcer.policy import NodePaths
from enforcer.shell import render
from facts.errors import ParseError
from facts.kubeapi import is_node_name
from facts.sections import Section

DEFAULTED = "the node's hostname; enforcer_node_name not set"


@dataclass(frozen=True)
class NodeName:
    """The name used, and why (said in the run output and the kubernetes-api health)."""

    name: str
    why: str
    problem: str = ""  # the node's own name could not be read: the API's silence proves nothing


def resolve(configured: str | None, section: Section | None, host_name: str) -> NodeName:
    """The configured name, else the node's hostname (`section`: the node read's `hostname`)."""
    if configured:
        return NodeName(configured, "enforcer_node_name")
    if section is None:
        return _unknown(host_name, "the node read has no section hostname")
    if section.rc != "0":
        return _unknown(host_name, section.failure())
    try:
        return NodeName(parse_hostname(section.stdout), DEFAULTED)
    except ParseError as error:
        return _unknown(host_name, f"{section.command}: {error}")


def _unknown(host_name: str, why: str) -> NodeName:
    problem = f"the node's hostname could not be read ({why}): set enforcer_node_name"
    return NodeName(host_name, "the inventory's host name, " + problem, problem)


def parse_hostname(text: str) -> str:
    """kubelet's default node name from the kernel's hostname: trimmed, lowercased, a valid
    Node name (a hostname kubelet could not register under is no name to ask the API for)."""
    name = text.strip().lower()
    if not is_node_name(name):
        raise ParseError("not a Kubernetes node name (DNS-1123 subdomain)", text.strip()[:80])
    return name


class NodeHostname(FactBase):
    """
    Only the node's hostname section, for a drain that cordons before it reads the node.

    .. code:: python

        Section(command="cat hostname", rc="0", stdout="gpu-3\\n", stderr="")
    """

    def command(self, paths: NodePaths) -> str:
        return render("hostname.sh.j2", paths=paths)

    def process(self, output: list[str]) -> Section:
        word, _, rest = "\n".join(output).partition(" ")
        if word == "hostname":
            return Section("cat hostname", "0", rest + "\n", "")
        return Section("cat hostname", "1", "", rest or "no output")
