"""
The simulated node: a test double of the node the enforcer runs on, kept out of the wheel and
run from the checkout (`python -m simulator ...`). `SimNode` (node.py) composes one model per
vendor over one state store (state.py); docs/INTERNALS.md, "The simulated node".
"""
