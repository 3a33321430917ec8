"""Target ``cgroup``: a policy for the sockets of one cgroup (v2), as bpfilter and
Cilium do per service. The ``input`` block becomes a ``cgroup_skb/ingress`` program
(the IP packets delivered to the cgroup's sockets), ``output`` a ``cgroup_skb/egress``
one (the packets they send); attached to a cgroup (``BPF_CGROUP_INET_INGRESS`` /
``_EGRESS``, ``bpf_attach.cgroup_attach``) they judge that cgroup's traffic alone.

The program reads the IP packet from its header (``skb->data`` at these hooks) through
a copy of its first bytes (``bpf_skb_load_bytes``), ``skb->mark``, and the device
(``iif``: ``skb->ingress_ifindex``, ``oif``: ``skb->ifindex``) through ``pfc_ifaces``,
filled at load as for tc; ``mark ... to N`` writes ``skb->mark``. It returns 1 (pass)
or 0 (drop). What it cannot carry is a capability error with the reason (``REASONS``):
``ct``, NAT, ``reject`` (a cgroup program cannot send), the link layer (``ether-*``,
``vlan-id``: no Ethernet header at these hooks), ``dst-type``/``src-type``, ``log`` and
``redirect``. docs/cgroup.md.
"""

from __future__ import annotations

from pfc.backends.base import Artifact, Backend, Options
from pfc.backends.ebpf import backend as ebpf
from pfc.backends.ebpf import plan as ebpf_plan
from pfc.frontend import ir
from pfc.oracle import packets

HOOKS = ("cgroup-ingress", "cgroup-egress")
ATTACH = {"cgroup-ingress": "ingress", "cgroup-egress": "egress"}
SUPPORTS = frozenset(("count", "payload", "ipv6", "non-ip", "limit", "pass-limit", "iface",
                      "icmp-code", "mark", "set-mark"))
_STATE = "a cgroup program sees one packet: no connection state"
_L2 = "there is no link layer at the cgroup hooks"
REASONS = {"ct": _STATE, "ct-status": _STATE, "ct-mark": _STATE, "nat": _STATE,
           "notrack": _STATE,
           "reject": "a cgroup program only returns a verdict and cannot send a reply",
           "redirect": "a cgroup program cannot rewrite the packet",
           "ether": _L2, "ether-type": _L2, "vlan-id": _L2,
           "addr-type": "a cgroup program has no route lookup",
           "log": "not carried yet",
           "audit": "not carried yet"}
DESCRIPTION = ("eBPF cgroup_skb ingress/egress programs for the sockets of one cgroup "
               "(input, output); C and ELF object")


def emit(policy: ir.Policy, options: Options) -> Artifact:
    hook = options.hook or HOOKS[0]
    if hook not in ATTACH:
        raise ValueError(f"cgroup: no hook `{hook}`; hooks: {', '.join(HOOKS)}")
    plan = ebpf_plan.program_plan(policy, hook)
    return ebpf.emit_plan(policy, options, hook, plan, {"cgroup_attach": ATTACH[hook]})


def view(hook: str, frame: bytes) -> bytes | None:
    """What a cgroup skb program sees of a frame: an IP packet IP input lets through
    (``packets.ip_input_view``; the program reads from the IP header on)."""
    return packets.ip_input_view(frame)


def _run(artifact: Artifact, frames: list[bytes]):
    from pfc.backends.ebpf import run as ebpf_run

    return ebpf_run.run(artifact, frames)


BACKENDS = (Backend(name="cgroup", description=DESCRIPTION, supports=SUPPORTS,
                    formats=("o", "c"), hooks=HOOKS, emit=emit, passes=ebpf._passes(),
                    binary_formats=frozenset(("o",)), run=_run, view=view,
                    carries={"input": "cgroup-ingress", "output": "cgroup-egress"},
                    reasons=REASONS),)
