"""Target ``nft``: an nftables ruleset. ``backend`` (the target) → ``lower`` (IR rules →
``expr`` terms that print as text and JSON; ``redirect`` as payload statements); ``run``
loads it in a throw-away namespace."""
