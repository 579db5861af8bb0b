"""
The packaged deploys (pyinfra's `@deploy`): what deploy.py, drain.py, undrain.py and schedule.py
run, importable from the installed package. No file of this repository is needed:

    pyinfra inventory.py enforcer.deploys.converge -y
    pyinfra inventory.py enforcer.deploys.converge --dry
    pyinfra inventory.py enforcer.deploys.drain --limit node3 -y
    pyinfra inventory.py enforcer.deploys.undrain --limit node3 -y
    pyinfra inventory.py enforcer.deploys.schedule -y
    pyinfra inventory.py enforcer.deploys.collect -y

or a deploy file of two lines:

    from enforcer.deploys import converge
    converge()

Each reads the current host's data (the policy) as the repository's deploy files do; the logic
stays in operations/ (converge.py, drain.py, schedule.py, collect.py). Wiring only: the decision
code in enforcer/ imports no pyinfra.
"""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import deploy

# Each deploy imports its own wiring when it first runs: a converge run of a large fleet does not
# pay for schedule's (pyinfra's systemd and files operations) or collect's imports.


@deploy()
def converge() -> None:
    """Destroy the partitions proven orphaned on the host, keep everything else."""
    from operations import converge as converging

    converging.converge(host)


@deploy()
def drain() -> None:
    """Pre-maintenance drain: wait for the claims to leave, destroy every free partition."""
    from operations import drain as draining

    draining.drain(host)


@deploy()
def undrain() -> None:
    """End a drain: uncordon (when the drain cordoned) and remove the drain marker."""
    from operations import drain as draining

    draining.undrain(host)


@deploy()
def schedule() -> None:
    """Install (or, with enforcer_schedule: absent, remove) the scheduled convergence."""
    from operations import schedule as scheduling

    scheduling.schedule(host)


@deploy()
def collect() -> None:
    """Keep in this control node's fleet view the report each node's own scheduled run kept."""
    from operations import collect as collecting

    collecting.collect(host)
