"""The eBPF classifier: a large policy's rules as bit vectors in maps (issue 16).

``model`` reads each IR rule as per-field value sets, ``tables`` builds the lookup
tables and compressed vectors, ``plan`` lays them out for ``templates/ebpf/classify.c.j2``
and says when a policy takes this path (docs/ebpf.md "Large policies").
"""
