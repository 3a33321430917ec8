"""User-space verdicts: ``pfc decide``, the program behind ``queue`` rules (docs/queue.md).

``analyse``: the deciders (the seeds' payload pattern search, a Python plug-in);
``nfqueue``: an NFQUEUE client over raw netlink; ``ctmark``: the verdict cache in the
connection's mark (ctnetlink); ``loop``: reading, deciding, answering, caching;
``watch``: the watchdog that makes a stuck decider fail like a killed one.
"""
