"""``pfc verify``: every compiled form of a policy against the reference interpreter.

``equiv`` is the one helper that judges a target's kernel run against the interpreter;
``run`` compiles, runs and reports for every requested target.
"""
