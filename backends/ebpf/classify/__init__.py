"""The eBPF classifier: a large policy's rules as bit vectors in maps (issue 16).

``model`` reads each IR rule as per-field value sets, ``tables`` builds the class
vectors (and ``lookups`` the per-field value -> class lookups), ``plan`` says when a
policy takes this path and lays it out for ``templates/ebpf/classify.c.j2``
(docs/ebpf.md "Large policies").
"""
