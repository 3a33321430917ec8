"""An iptables whole-firewall artifact (the ``iptables-restore`` and
``ip6tables-restore`` files), executed symbolically per hook chain with the hook's
inputs (:mod:`.inputs`), IPv4 frames through the first file, IPv6 through the second.

Each block's rules are pfc's chain of its table (``PFC-INPUT`` of ``filter``, the nat
blocks' of ``nat``, ``raw``/``mangle`` for the others), jumped to first from the
built-in chain, whose policy accepts: ``RETURN`` or the chain's end is ``pass`` (in a
nat chain: no translation). :mod:`pfc.prove.targets.iptables` reads v1's matches; here
the ones whole firewalls add, read as their kernel modules do:

- ``-i``/``-o``: the name of the input's class (``eth+``: a prefix);
- ``-m conntrack --ctstate`` (``xt_conntrack``: the state's bit, ``SNAT``/``DNAT`` the
  connection's status bits, ``INVALID`` without a connection, ``UNTRACKED``);
  ``--ctstatus`` (any bit named); ``-m connmark --mark`` (a connection's mark);
  ``-m mark --mark``; ``-m addrtype --src-type/--dst-type``; ``-m mac --mac-source``
  (an Ethernet device's frames: not ``lo``'s); ``-m hashlimit``/``-m limit``: the input
  bit of the pfc rule the line belongs to (``meta["lines"]``);
- targets ``REJECT --reject-with``, ``DNAT``, ``SNAT``, ``MASQUERADE``, ``REDIRECT``
  (each ends the packet's way through the chain with its outcome), ``MARK
  --set-mark``/``--set-xmark`` and ``CT --notrack`` (go on).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field

import z3

from pfc.frontend import ir
from pfc.frontend.firewall.hooks import BLOCKS, allows_field
from pfc.prove.firewall.meaning import OUTCOME_BITS, HookMeaning, outcome_word
from pfc.prove.firewall.nft import Env
from pfc.prove.frame import Frame, bv
from pfc.prove.targets import iptables as v1
from pfc.prove.targets.cbpf import Unsupported

CTSTATES = {"INVALID": ("invalid",), "ESTABLISHED": ("established",),
            "RELATED": ("related",), "NEW": ("new",), "UNTRACKED": ("untracked",)}
CTSTATUS = {"EXPECTED": 1, "SEEN_REPLY": 2, "ASSURED": 4, "CONFIRMED": 8}
REJECT_WITH = {"icmp-port-unreachable": "port-unreachable",
               "icmp6-port-unreachable": "port-unreachable",
               "icmp-admin-prohibited": "admin-prohibited",
               "icmp6-adm-prohibited": "admin-prohibited",
               "icmp-host-unreachable": "host-unreachable",
               "icmp6-addr-unreachable": "host-unreachable",
               "icmp-net-unreachable": "no-route", "icmp6-no-route": "no-route",
               "tcp-reset": "tcp-reset"}
MODULES = ("u32", "set", "bpf", "length", "comment", "iprange", "conntrack", "connmark",
           "mark", "addrtype", "hashlimit", "limit", "mac")
LIMIT_OPTIONS = ("--hashlimit-burst", "--hashlimit-name", "--hashlimit-htable-expire",
                 "--hashlimit-mode", "--hashlimit-srcmask", "--hashlimit-dstmask",
                 "--limit-burst")


def table_of(block: str) -> tuple[str, str]:
    """(table, pfc chain) of a block (``backends/iptables``: ``meta["places"]``)."""
    b = BLOCKS[block]
    table = {"raw": "raw", "nat": "nat"}.get(b.kind) or (
        "filter" if b.hook in ("input", "forward", "output") else "mangle")
    return table, f"PFC-{b.hook.upper()}"


def parse_tables(text: str) -> dict[str, v1.Table]:
    """Each ``*table`` section's chains (``pfc.prove.targets.iptables.parse_restore``)."""
    out: dict[str, v1.Table] = {}
    for part in re.split(r"^\*", text, flags=re.M)[1:]:
        name, _, body = part.partition("\n")
        out[name.strip()] = v1.parse_restore(body)
    return out


@dataclass
class Walk:
    ctx: v1.Context
    env: Env
    table: v1.Table
    block: str
    mark: z3.BitVecRef
    notrack: z3.BoolRef = field(default_factory=lambda: z3.BoolVal(False))
    decided: list = field(default_factory=list)

    def code(self, word: str) -> z3.BitVecRef:
        return bv(self.env.outcomes.code(word), OUTCOME_BITS)

    def chain(self, name: str, cond: z3.BoolRef, owners: list, depth: int = 0) -> z3.BoolRef:
        """Run ``name`` from ``cond``: the condition of coming back (end or RETURN)."""
        if name not in self.table.chains:
            raise Unsupported(f"jump to chain `{name}`, which the file does not create")
        back = []
        lines = self.table.chains[name]
        for n, rule in enumerate(lines):
            owner = owners[n] if n < len(owners) else None
            held, target = self.matches(rule.args, owner)
            hit = z3.And(cond, held)
            cond = z3.And(cond, z3.Not(held))
            verb = target[0] if target else None
            if verb is None or verb in ("NFLOG", "LOG"):
                cond = z3.Or(cond, hit)
            elif verb in ("CT", "MARK"):
                self.carry_on(target, hit)
                cond = z3.Or(cond, hit)
            elif verb in ("ACCEPT", "DROP"):
                self.decided.append((hit, self.code("pass" if verb == "ACCEPT" else "drop")))
            elif verb == "RETURN":
                back.append(hit)
            elif verb in ("REJECT", "DNAT", "SNAT", "MASQUERADE", "REDIRECT"):
                self.decided.append((hit, self.code(_outcome(verb, target[1:],
                                                             self.ctx.family))))
            elif depth < v1.MAX_DEPTH:
                cond = z3.Or(cond, self.chain(verb, hit, [], depth + 1))
            else:
                raise Unsupported(f"chains nest deeper than {v1.MAX_DEPTH} jumps")
        return z3.Or(cond, *back)

    def carry_on(self, target: list[str], hit: z3.BoolRef) -> None:
        opts = dict(zip(target[1::2], target[2::2], strict=False))
        if target[0] == "CT":
            if "--notrack" not in target:
                raise Unsupported(f"CT target {' '.join(target[1:])}")
            self.notrack = z3.Or(self.notrack, hit)
            return
        self.env.inputs.read.add("mark")
        text = opts.get("--set-mark") or opts.get("--set-xmark")
        if text is None:
            raise Unsupported(f"MARK target {' '.join(target[1:])}")
        value, _, mask = text.partition("/")
        v, m = int(value, 0), int(mask or "0xffffffff", 0)
        new = (self.mark & ~m) | v if "--set-mark" in opts else (self.mark & ~m) ^ v
        self.mark = z3.If(hit, new, self.mark)

    # ---------------------------------------------------------------- matches

    def matches(self, args: list[str], owner) -> tuple[z3.BoolRef, list[str]]:
        terms, i, negate, module = [], 0, False, None
        while i < len(args):
            word = args[i]
            if word == "!":
                negate, i = True, i + 1
                continue
            if word in ("-j", "--jump"):
                return z3.And(*terms), args[i + 1:]
            if word in ("-g", "--goto"):
                raise Unsupported("`-g` in a whole firewall's chain")
            if word in ("-m", "--match"):
                module = args[i + 1]
                if module not in MODULES:
                    raise Unsupported(f"match module `{module}` is not modelled")
                term, i = None, i + 2
            else:
                term, i = self.option(args, i, module, owner)
            if term is not None:
                terms.append(z3.Not(term) if negate else term)
            negate = False
        return z3.And(*terms), []

    def option(self, args: list[str], i: int, module: str | None, owner):
        word, ins = args[i], self.env.inputs
        if word in ("-i", "--in-interface", "-o", "--out-interface"):
            return self.iface("iif" if word.startswith(("-i", "--in")) else "oif",
                              args[i + 1]), i + 2
        if word == "--ctstate":
            return self.ctstate(args[i + 1]), i + 2
        if word == "--ctstatus":
            bits = sum(CTSTATUS[s] for s in args[i + 1].split(","))
            status = ins._var("ct_status", lambda n: z3.BitVec(n, 32))
            ins.read.update(("ct", "ct-status"))
            return z3.And(self.tracked(), status & bits != 0), i + 2
        if word == "--mark":
            value, _, mask = args[i + 1].partition("/")
            m = int(mask or "0xffffffff", 0)
            if module == "connmark":
                return z3.And(self.tracked(), ins.ct_mark() & m == int(value, 0)), i + 2
            ins.read.add("mark")
            return self.mark & m == int(value, 0), i + 2
        if word in ("--src-type", "--dst-type"):
            field_ = "src-type" if word == "--src-type" else "dst-type"
            types = [t.lower() for t in args[i + 1].split(",")]
            if any(t not in ir.ADDR_TYPES for t in types):
                raise Unsupported(f"address type {args[i + 1]}")
            match = ir.AddrTypeMatch(field_, tuple(types))
            return ins.addr_type(match, z3.BoolVal(True)), i + 2
        if word == "--mac-source":
            return self.mac(args[i + 1]), i + 2
        if word in ("--hashlimit-upto", "--hashlimit-above", "--limit"):
            rule = self.env.rules.get(owner) if isinstance(owner, int) else None
            if rule is None or rule.limit is None:
                raise Unsupported("a rate limit that is not a pfc rule's")
            within = ins.within(rule)
            return (z3.Not(within) if word == "--hashlimit-above" else within), i + 2
        if word in LIMIT_OPTIONS:
            return None, i + 2
        return v1._option(self.ctx, args, i)

    def iface(self, field_: str, name: str) -> z3.BoolRef:
        ins = self.env.inputs
        ins.read.add(field_)
        if not allows_field(BLOCKS[self.block], field_):
            return z3.BoolVal(False)
        var = ins._var(field_, lambda n: z3.BitVec(n, 8))
        wild = name.endswith("+")
        hits = [k for k, n in enumerate(ins.names)
                if (n.startswith(name[:-1]) if wild else n == name)]
        return z3.Or(*[var == k for k in hits]) if hits else z3.BoolVal(False)

    def tracked(self) -> z3.BoolRef:
        state = self.env.inputs.ct_state_var
        return z3.Or(*[state == ir.CT_STATES.index(s) for s in ("established", "related",
                                                                 "new")])

    def ctstate(self, text: str) -> z3.BoolRef:
        ins = self.env.inputs
        ins.read.add("ct")
        state, terms = ins.ct_state_var, []
        for word in text.split(","):
            if word in CTSTATES:
                terms += [state == ir.CT_STATES.index(s) for s in CTSTATES[word]]
            elif word in ("SNAT", "DNAT"):
                ins.read.add("ct-status")
                status = ins._var("ct_status", lambda n: z3.BitVec(n, 32))
                bit = ir.CT_STATUSES[word.lower()]
                terms.append(z3.And(self.tracked(), status & bit != 0))
            else:
                raise Unsupported(f"--ctstate {word}")
        return z3.Or(*terms)

    def mac(self, text: str) -> z3.BoolRef:
        ins = self.env.inputs
        raw = int(text.replace(":", ""), 16)
        held = self.ctx.frame.bytes_(6, 6) == raw
        if "lo" in ins.names:
            var = ins._var("iif", lambda n: z3.BitVec(n, 8))
            held = z3.And(held, var != ins.names.index("lo"))
        return held


def _outcome(verb: str, args: list[str], family: int) -> str:
    opts = dict(zip(args[::2], args[1::2], strict=False))
    if verb == "REJECT":
        with_ = opts.get("--reject-with", "icmp-port-unreachable" if family == 4
                         else "icmp6-port-unreachable")
        return f"reject with {REJECT_WITH.get(with_, with_)}"
    if verb == "MASQUERADE":
        if opts:
            raise Unsupported(f"MASQUERADE {' '.join(args)}")
        return "masquerade"
    if verb == "REDIRECT":
        port = opts.get("--to-ports")
        return outcome_word(ir.Nat("redirect", None, int(port) if port else None))
    text = opts.get("--to-destination" if verb == "DNAT" else "--to-source", "")
    m = re.fullmatch(r"\[?([0-9a-fA-F:.]+?)\]?(?::(\d+))?", text)
    if m is None:
        raise Unsupported(f"{verb} {' '.join(args)}")
    address = ipaddress.ip_address(m.group(1))
    return outcome_word(ir.Nat(verb.lower(), address, int(m.group(2)) if m.group(2) else None))


def run(artifact, block: str, frame: Frame, env: Env) -> HookMeaning:
    """The block's pfc chain of both restore files on the frame, with the inputs."""
    table, chain = table_of(block)
    ipset = artifact.meta["files"].get("ipset")
    sets = v1.parse_ipset(artifact.files[ipset].decode()) if ipset else {}
    meaning = {}
    for family, key, label in ((4, "ipv4", "IPv4"), (6, "ipv6", "IPv6")):
        text = artifact.files[artifact.meta["files"][key]].decode()
        tables = parse_tables(text)
        ctx = v1.Context(frame, family, sets, None)
        walk = Walk(ctx, env, tables.get(table, v1.Table()), block, env.inputs.mark)
        owners = artifact.meta.get("lines", {}).get(label, {}).get(f"{chain}@{table}", [])
        back = walk.chain(chain, z3.BoolVal(True), owners) if chain in walk.table.chains \
            else z3.BoolVal(True)
        outcome = walk.code("pass")
        for cond, code in reversed([(back, walk.code("pass")), *walk.decided]):
            outcome = z3.If(cond, code, outcome)
        meaning[family] = (outcome, walk.mark, walk.notrack)
    v4 = frame.u16(12) == 0x0800
    pick = [z3.If(v4, a, b) for a, b in zip(meaning[4], meaning[6], strict=True)]
    return HookMeaning(pick[0], bv(0), pick[1], pick[2], frame.data)
