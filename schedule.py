"""
Scheduled convergence: install (or remove) a systemd service and timer that converge on a period
(operations/schedule.py says how, and which host data keys it reads).

    pyinfra inventory.py schedule.py -y                    # every node converges itself (@local)
    pyinfra @local schedule.py -y --data enforcer_schedule_on=control \\
        --data enforcer_schedule_inventory=$PWD/inventory.py   # this control node converges them
    pyinfra inventory.py schedule.py -y --data enforcer_schedule=absent   # remove it
    pyinfra inventory.py enforcer.deploys.schedule -y   # the same, from the installed package
"""

from enforcer.deploys import schedule

schedule()
