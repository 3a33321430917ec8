"""Target ``nfbpf``: the netfilter filter blocks of a whole firewall as eBPF programs
of type ``BPF_PROG_TYPE_NETFILTER`` (Linux 6.4), one per block, each on a bpf link at
its netfilter hook and priority. The C comes from the eBPF templates (hook ``nfbpf``);
``backend`` is the target, ``link`` attaches a program."""
