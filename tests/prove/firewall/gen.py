"""Random rules over every v2 match and action, and random whole firewalls made of them:
for the firewall prover's generated checks (against the interpreter, and of the nft and
iptables artifacts)."""

from __future__ import annotations

import random

ANY = {"iif": ["iif eth0", "iif eth*", "!iif lo"], "mark": ["mark 7", "mark 1-9"],
       "ct": ["ct state new", "ct state established,related", "!ct state invalid"],
       "status": ["ct status dnat"], "ctmark": ["ct mark 5"], "dst-type": ["dst-type local"],
       "src-type": ["!src-type broadcast"], "src": ["src 10.0.0.0/8"],
       "ether": ["ether-src 02:00:00:00:00:01"]}
BY_PROTO = {"tcp": ["dport 22", "flags syn,!ack", "sport 1024-65535"], "udp": ["dport 53"],
            "icmp": ["icmp-code 3", "icmp-type echo-request"], "": []}
ACTIONS = ["pass", "drop", "reject", "reject with admin-prohibited", "mark", "pass-limit",
           "jump side"]


def random_rule(rng: random.Random) -> str:
    proto = rng.choice(list(BY_PROTO))
    words = [rng.choice(ANY[f]) for f in rng.sample(sorted(ANY), rng.randint(0, 2))]
    words += rng.sample(BY_PROTO[proto], min(len(BY_PROTO[proto]), rng.randint(0, 1)))
    action = rng.choice(ACTIONS)
    head = "pass" if action == "pass-limit" else action.split(" with ")[0].split()[0]
    tail = {"mark": " to 7", "pass-limit": " limit rate 5/second",
            "reject with admin-prohibited": " with admin-prohibited"}.get(action, "")
    chain = " side" if action == "jump side" else ""
    return " ".join(w for w in (head + chain, proto, *words) if w) + tail


def random_firewall(rng: random.Random) -> str:
    """A chain and input, forward and output blocks of random rules (each block jumps
    to the chain; output's interface and MAC matches become marks)."""
    def outbound(text: str) -> str:
        for old, new in (("!iif lo", "mark 4"), ("iif eth0", "mark 3"), ("iif eth*", "mark 5"),
                         ("ether-src 02:00:00:00:00:01", "mark 6")):
            text = text.replace(old, new)
        return text
    side = "\n".join("    " + outbound(random_rule(rng).replace("jump side", "pass"))
                     for _ in range(2))
    blocks = [f"chain side {{\n{side}\n}}\n"]
    for block in ("input", "forward", "output"):
        rules = [random_rule(rng) for _ in range(5)]
        rules.append("jump side " + rng.choice([m for ms in ANY.values() for m in ms]))
        if block == "forward":
            rules += ["pass oif eth1", "drop !oif eth*"]
        text = f"{block} {{\n    default {rng.choice(['pass', 'drop'])}\n" + "".join(
            f"    {r}\n" for r in rules) + "}\n"
        blocks.append(outbound(text) if block == "output" else text)
    return "\n".join(blocks)
