"""
The end of a drain: uncordon the node (with enforcer_drain_cordon) and remove its drain marker.

    pyinfra inventory.py undrain.py --limit node3 [-y]
"""

from enforcer.deploys import undrain

undrain()
