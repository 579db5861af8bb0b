"""
Converge: destroy the partitions proven orphaned on each host, keep everything else.

    pyinfra inventory.py deploy.py [-y] [--dry] [--data enforcer_mode=plan]
    pyinfra inventory.py enforcer.deploys.converge ...   # the same, from the installed package
"""

from enforcer.deploys import converge

converge()
