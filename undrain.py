"""
The end of a drain: uncordon the node (with enforcer_drain_cordon) and remove its drain marker.

    pyinfra inventory.py undrain.py --limit node3 -y
    pyinfra inventory.py enforcer.deploys.undrain --limit node3 -y   # from the installed package
"""

from enforcer.deploys import undrain

undrain()
