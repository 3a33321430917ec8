"""Target ``u32``: tc u32 filters with gact actions, as a ``tc -batch`` file; ``run``
drives them in a lab guest (cls_u32 and act_gact are modules)."""
