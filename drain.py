"""
Pre-maintenance drain: wait for the pods that claim partitions to leave and their holders to
exit, destroy every partition that is not pinned, held or claimed, verify none is left, and mark
the node drained (operations/drain.py says how, enforcer/drain.py what it decides).

    pyinfra inventory.py drain.py --limit node3 -y
    pyinfra inventory.py drain.py --limit node3 -y --data enforcer_drain_cordon=true  # cordon too
    pyinfra inventory.py enforcer.deploys.drain --limit node3 -y   # from the installed package
    pyinfra inventory.py undrain.py --limit node3 -y   # when the maintenance is done
"""

from enforcer.deploys import drain

drain()
