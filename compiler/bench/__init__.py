"""``pfc bench``: what each hook costs per packet on this machine.

``measure`` runs every target and baseline in a throw-away namespace; ``traffic`` sends
frames and accounts CPU; ``naive`` builds the hand-written baselines; ``report`` prints
tables, JSON and plots.
"""
