"""The library API in one page (docs/api.md): check, compile, frames, run, errors."""

import pfc

POLICY = """\
define dut = 192.168.0.79
default pass
drop udp dst $dut dport 12345
count icmp
"""

# 1. check: diagnostics as data
for d in pfc.check(POLICY + "drop udp dprot 53\n"):
    print(d.severity, d.message)

# 2. compile: one artifact per target
nft = pfc.compile(POLICY, target="nft", dev="eth0")
print(nft.text.splitlines()[1])
xdp = pfc.compile(POLICY, target="xdp")
print(sorted(xdp.files))

# 3. run: the reference interpreter on frames you built (or a pcap path)
frames = pfc.frames(POLICY, 100, seed=1)     # test frames aimed at the rules
outcomes, counters = pfc.run(POLICY, frames)
print(sum(o.verdict.value == "drop" for o in outcomes), "of", len(outcomes), "dropped")

# 4. errors carry the diagnostics
try:
    pfc.compile(POLICY + "redirect udp dport 53 to 10.0.0.1\n", target="iptables")
except pfc.CompileError as exc:
    print(exc.render())
