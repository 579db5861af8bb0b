"""
Converge: destroy the partitions proven orphaned on each host, keep everything else.

    pyinfra inventory.py deploy.py -y                             # converge
    pyinfra inventory.py deploy.py --dry                          # show verdicts, change nothing
    pyinfra inventory.py deploy.py -y --data enforcer_mode=plan   # record streaks, destroy nothing
    pyinfra inventory.py enforcer.deploys.converge -y   # the same, from the installed package
"""

from enforcer.deploys import converge

converge()
