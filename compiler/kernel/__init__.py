"""The kernel and its tools, thinly wrapped: libbpf (``bpf``, ``bpf_attach``), clang
(``toolchain``), throw-away network namespaces (``netns``), the IP-input lab of the
netfilter runners (``iplab``) and what a kernel run observed (``observation``).

Nothing here knows a policy's meaning; backends and the deploy layer build on it.
"""
