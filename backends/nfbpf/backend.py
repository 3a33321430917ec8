"""Target ``nfbpf``: a netfilter filter block (``raw prerouting``, ``prerouting``,
``input``, ``forward``, ``raw output``, ``output``, ``postrouting``) as a
``BPF_PROG_TYPE_NETFILTER`` program (``SEC("netfilter")``, Linux 6.4), attached by a
bpf link at the block's hook and priority (``compiler/frontend/firewall/hooks.py``
BLOCKS: raw -300, filter 0, postrouting -150), once per IP family.

The program gets ``struct bpf_nf_ctx`` (the hook state and the skb): it reads the IP
packet through a dynptr (``bpf_dynptr_from_skb``, a kfunc), the mark and the devices'
names from the kernel's structures (CO-RE), and returns NF_DROP or NF_ACCEPT. It is
stateless: what needs conntrack (``ct``), NAT, ``notrack``, the route (``dst-type``)
or the link layer (``ether-*``) is a capability error, and so are ``reject`` and
``mark ... to N`` (a netfilter program may only return a verdict: it can neither send
a packet nor write the skb) and ``log`` (not carried yet). docs/nfbpf.md.
"""

from __future__ import annotations

from pfc.backends.base import Artifact, Backend, Options
from pfc.backends.ebpf import backend as ebpf
from pfc.backends.ebpf import plan as ebpf_plan
from pfc.frontend import ir
from pfc.frontend.firewall.hooks import BLOCKS
from pfc.oracle import packets

# The blocks this target carries, and the hook each becomes (``nf-`` + the block name).
CARRIED = ("raw prerouting", "prerouting", "input", "forward", "raw output", "output",
           "postrouting")
HOOKS = tuple("nf-" + name.replace(" ", "-") for name in CARRIED)
BLOCK_OF = dict(zip(HOOKS, CARRIED, strict=True))
DEFAULT_FIRST = ("nf-input", *(h for h in HOOKS if h != "nf-input"))  # a v1 list: input
# NF_INET_* (include/uapi/linux/netfilter.h)
HOOKNUM = {"prerouting": 0, "input": 1, "forward": 2, "output": 3, "postrouting": 4}
SUPPORTS = frozenset(("count", "payload", "ipv6", "non-ip", "limit", "pass-limit", "iface",
                      "icmp-code", "mark"))
_STATE = "a netfilter program sees one packet: no connection state"
REASONS = {"ct": _STATE, "ct-status": _STATE, "ct-mark": _STATE, "nat": _STATE,
           "notrack": _STATE,
           "reject": "a netfilter program only returns a verdict and cannot send a reply",
           "set-mark": "the packet is read-only to a netfilter program",
           "redirect": "the packet is read-only to a netfilter program",
           "ether": "a netfilter program gets the packet from its IP header",
           "ether-type": "a netfilter program gets the packet from its IP header",
           "vlan-id": "a netfilter program gets the packet from its IP header",
           "addr-type": "a netfilter program has no route lookup",
           "log": "not carried yet",
           "iif-post": "not carried yet (the host's own packets have no input device "
           "there: `!iif X` holds on them)",
           "audit": "not carried yet"}
DESCRIPTION = ("eBPF netfilter program (BPF_PROG_TYPE_NETFILTER on a bpf link, Linux 6.4) "
               "per filter block; C and ELF object")


def program_name(hook: str) -> str:
    return "pfc_" + hook.replace("-", "_")


def netfilter(hook: str) -> dict:
    """Where the program goes (``meta["netfilter"]``): the NF_INET hook number, its
    name, the priority, and the IP versions it is linked for."""
    block = BLOCKS[BLOCK_OF[hook]]
    return {"hook": block.hook, "hooknum": HOOKNUM[block.hook], "priority": block.priority,
            "versions": [4, 6]}


def emit(policy: ir.Policy, options: Options) -> Artifact:
    hook = options.hook or DEFAULT_FIRST[0]
    if hook not in BLOCK_OF:
        raise ValueError(f"nfbpf: no hook `{hook}`; hooks: {', '.join(HOOKS)}")
    plan = ebpf_plan.program_plan(policy, "nfbpf", program_name(hook))
    return ebpf.emit_plan(policy, options, hook, plan, {"netfilter": netfilter(hook)})


def view(hook: str, frame: bytes) -> bytes | None:
    """What a netfilter hook sees of a received frame: what IP input lets through
    (``packets.ip_input_view``: the Ethernet header, the packet trimmed to its length);
    the program reads from the IP header on."""
    return packets.ip_input_view(frame)


def _run(artifact: Artifact, frames: list[bytes]):
    from pfc.backends.ebpf import run as ebpf_run

    return ebpf_run.run(artifact, frames)


BACKENDS = (Backend(name="nfbpf", description=DESCRIPTION, supports=SUPPORTS,
                    formats=("o", "c"), hooks=DEFAULT_FIRST, emit=emit, passes=ebpf._passes(),
                    binary_formats=frozenset(("o",)), run=_run, view=view,
                    carries=dict(zip(CARRIED, HOOKS, strict=True)), reasons=REASONS),)
