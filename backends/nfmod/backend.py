"""Target ``nfmod``: a netfilter kernel module in C (seeds 001 and 004's module), with
its Kbuild file; built against a kernel's headers into a ``.ko`` when a kernel is given
(``pfc compile --target nfmod --kernel 6.1 -o DIR/``).

The module registers one function at one netfilter hook for IPv4 and IPv6, in the
network namespace of the process that loads it (``ip netns exec NS insmod``):

====================  ==========================  ========  ==========================
hook                  ``NF_INET_*``               priority  like
====================  ==========================  ========  ==========================
``prerouting`` (dflt)  ``PRE_ROUTING``             -300      iptables raw PREROUTING
``input``             ``LOCAL_IN``                0         filter INPUT
``forward``           ``FORWARD``                 0         filter FORWARD
``output``            ``LOCAL_OUT``               -300      raw OUTPUT
``postrouting``       ``POST_ROUTING``            -150      mangle POSTROUTING
====================  ==========================  ========  ==========================

First match, per-rule per-CPU counters in ``/proc/net/MODULE`` (``KEY PACKETS BYTES``
lines: a rule's index, then ``default``), ``redirect`` in place with incremental
checksum updates (``backends/nfmod/lower`` and the template say exactly what is read
and written). Stateless: ``log``, ``limit``, audit and ``ct`` are refused, naming the
targets that can. The module's name is ``TABLE_nf`` (``--table``, default ``pfc``).
"""

from __future__ import annotations

import functools
import os
from importlib import resources
from typing import TYPE_CHECKING

from pfc.backends.base import (
    Artifact,
    Backend,
    Options,
    artifact_name,
    c_comment,
    check_name,
)
from pfc.backends.describe import describe
from pfc.backends.nfmod import lower as low
from pfc.frontend import ir
from pfc.frontend.diagnostics import CompileError, error, warning
from pfc.kernel.lab import version_tuple as lab_version

if TYPE_CHECKING:
    import jinja2

# hook -> (NF_INET_* constant, priority)
HOOKS = {"prerouting": ("NF_INET_PRE_ROUTING", -300), "input": ("NF_INET_LOCAL_IN", 0),
         "forward": ("NF_INET_FORWARD", 0), "output": ("NF_INET_LOCAL_OUT", -300),
         "postrouting": ("NF_INET_POST_ROUTING", -150)}
KBUILD = "obj-m := {module}.o\n"
MAKEFILE = """\
# Build against the running kernel's headers, or KDIR=/path/to/linux-headers-RELEASE
KDIR ?= /lib/modules/$(shell uname -r)/build

all:
\t$(MAKE) -C $(KDIR) M=$(CURDIR) modules

clean:
\t$(MAKE) -C $(KDIR) M=$(CURDIR) clean
"""


def module_name(options: Options) -> str:
    """``TABLE_nf``: a module name (letters, digits, ``_``), from ``--table``."""
    return check_name(options.table, "table").replace("-", "_") + "_nf"


@functools.cache
def environment() -> jinja2.Environment:
    import jinja2

    root = resources.files("pfc.templates") / "nfmod"
    return jinja2.Environment(
        loader=jinja2.FunctionLoader(lambda n: (root / n).read_text()),
        undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False,
        trim_blocks=True, lstrip_blocks=True)


def slots(policy: ir.Policy) -> list[str]:
    """The counters, in order: every rule that counts (terminal or ``count``), then the
    default."""
    return [str(r.index) for r in policy.rules if _counts(r)] + ["default"]


def _counts(rule: ir.Rule) -> bool:
    return rule.terminal or isinstance(rule.action, ir.Count)


def render(policy: ir.Policy, hook: str, module: str) -> str:
    tables = low.Tables()
    names = slots(policy)
    rules = []
    for rule in policy.rules:
        crule = low.rule_c(rule, tables, c_comment(describe(rule)))
        rules.append({"index": crule.index, "line": crule.line, "text": crule.text,
                      "decls": low.used_locals(crule), "terms": crule.terms,
                      "action": crule.action, "target": crule.target,
                      "slot": names.index(str(rule.index))})
    hooknum, priority = HOOKS[hook]
    stem = artifact_name(policy, "nfmod", "c").rsplit(".", 2)[0]
    return environment().get_template("module.c.j2").render(
        module=module, source=c_comment(policy.source), stem=stem, hook=hook,
        priority=priority, hooknum=hooknum, default=policy.default.value, slots=names,
        tables=tables, rules=rules)


def emit(policy: ir.Policy, options: Options) -> Artifact:
    hook = options.hook or "prerouting"
    module = module_name(options)
    text = render(policy, hook, module)
    files = {f"{module}.c": text.encode(), "Kbuild": KBUILD.format(module=module).encode(),
             "Makefile": MAKEFILE.encode()}
    meta = {"module": module, "hook": hook, "priority": HOOKS[hook][1],
            "slots": slots(policy), "proc": f"/proc/net/{module}", "release": None}
    artifact = Artifact("nfmod", hook, "c", text, files, policy, meta)
    if options.extra.get("kernel") is not None:
        _build(artifact, options.extra["kernel"], module)
    return artifact


def _build(artifact: Artifact, kernel: tuple[int, ...], module: str) -> None:
    """Add the ``.ko`` for ``kernel``. No headers or no usable build tools for the
    *running* kernel (what ``pfc verify`` asks for) is a warning and no ``.ko`` (the
    runner then says why it cannot run); for another kernel, or a module Kbuild
    refuses, an error."""
    from pfc.backends.nfmod import build
    policy = artifact.policy
    try:
        built = build.build_for(kernel, artifact.files, module)
    except (build.NoHeaders, build.NoToolchain) as exc:
        if tuple(kernel[:2]) != tuple(lab_version(os.uname().release)[:2]):
            raise CompileError([error(f"target `nfmod`: {exc}", policy.default_span,
                                      code="kernel")]) from exc
        artifact.diagnostics.append(warning(f"target `nfmod`: no .ko: {exc}",
                                            policy.default_span, code="kernel"))
        return
    except build.BuildError as exc:
        raise CompileError([error(f"target `nfmod`: {exc}", policy.default_span,
                                  code="kernel")]) from exc
    artifact.files[f"{module}.ko"] = built.ko
    artifact.meta["release"] = built.release


def view(hook: str, frame: bytes) -> bytes | None:
    """What the hook sees: the IP packet as ``ip_rcv``/``ipv6_rcv`` leave it; at
    ``input`` only what the lab delivers locally (``iplab.hook_view``)."""
    from pfc.kernel import iplab
    return iplab.hook_view(hook == "input", frame)


def run(artifact: Artifact, frames: list[bytes]):
    from pfc.backends.nfmod import run as nfrun
    return nfrun.run(artifact, frames)


BACKENDS = (Backend(
    name="nfmod",
    description="netfilter kernel module in C with its Kbuild file (prerouting, input, "
                "forward, output, postrouting); the .ko with --kernel",
    supports=frozenset({"count", "redirect", "payload", "ipv6", "non-ip"}),
    formats=("c",), hooks=tuple(HOOKS), emit=emit, run=run, view=view),)
