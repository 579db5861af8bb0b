"""
Converge: destroy the partitions proven orphaned on each host, keep everything else.

    pyinfra inventory.py deploy.py [-y] [--dry] [--data enforcer_mode=plan]
"""

from enforcer.deploys import converge

converge()
