"""The ctypes libbpf layer (pfc.kernel.bpf) and the clang toolchain (pfc.kernel.toolchain).

Kernel tests load small hand-written programs: they check what the eBPF targets rely
on (test runs, per-CPU maps, verifier logs, no fd leaks) and pin the test-run limits
the runners and docs/ebpf.md describe, so a kernel that changes them fails here.
"""

from __future__ import annotations

import errno
import os

import pytest

from pfc.kernel import bpf, netns, toolchain

ROOT_REASON = netns.missing_privileges()


def kernel(fn):
    """A kernel test: marked, and skipped (with the reason) only without root."""
    fn = pytest.mark.kernel(fn)
    return pytest.mark.skipif(ROOT_REASON is not None, reason=ROOT_REASON or "")(fn)

PROBE = r"""
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 4);
	__type(key, __u32);
	__type(value, __u64[2]);
} hits SEC(".maps");

/* Counts each run in slot 1 (packets, bytes); returns the frame length; the first
 * byte is incremented in place. */
SEC("xdp")
int probe_xdp(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	__u32 key = 1;
	__u64 *v = bpf_map_lookup_elem(&hits, &key);

	if (v) {
		v[0] += 1;
		v[1] += end - data;
	}
	if (data + 1 <= end)
		*(__u8 *)data += 1;
	return end - data;
}

/* What a socket filter sees in a test run: skb->len and its first byte. */
SEC("socket")
int probe_socket(struct __sk_buff *skb)
{
	__u8 b = 0;

	bpf_skb_load_bytes(skb, 0, &b, 1);
	return (skb->len << 8) | b;
}

SEC("tc")
int probe_tc(struct __sk_buff *skb)
{
	return bpf_ntohs(skb->protocol);
}

char LICENSE[] SEC("license") = "GPL";
"""

BAD = r"""
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

SEC("xdp")
int reads_too_far(struct xdp_md *ctx)
{
	return *(__u8 *)(long)ctx->data; /* no bounds check: the verifier refuses */
}

char LICENSE[] SEC("license") = "GPL";
"""


@pytest.fixture(scope="module")
def probe_obj() -> bytes:
    return toolchain.compile_c(PROBE, "probe").obj


def ipv4_frame(n: int = 60) -> bytes:
    return (bytes(range(1, 13)) + b"\x08\x00" + b"\x45" + bytes(100))[:n]


# ------------------------------------------------------------------------- toolchain

def test_command_is_exact_and_relative():
    argv = toolchain.command("edge.xdp")
    assert argv[:7] == ["clang", "-O2", "-g", "-target", "bpf", "-Wall", "-Werror"]
    assert argv[-4:] == ["-c", "./edge.xdp.c", "-o", "./edge.xdp.o"]  # never an option
    assert toolchain.command("-")[-4:] == ["-c", "./-.c", "-o", "./-.o"]
    assert any(a.startswith("-I/usr/include/") for a in argv) == bool(toolchain.multiarch())


def test_unsafe_stem_refused():
    with pytest.raises(ValueError):
        toolchain.command("a b;rm -rf")


def test_cache_reuses_objects(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    first = toolchain.compile_c(PROBE, "probe")
    second = toolchain.compile_c(PROBE, "probe")
    assert not first.cached and second.cached
    assert first.obj == second.obj and first.obj[:4] == b"\x7fELF"
    assert list((tmp_path / "pfc").glob("*.o"))
    assert "clang -O2 -g -target bpf -Wall -Werror" in first.command


def test_clang_errors_carry_output_and_lines(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    with pytest.raises(toolchain.ToolchainError) as info:
        toolchain.compile_c("int f(void)\n{\n\treturn undeclared;\n}\n", "broken")
    assert info.value.lines == [3]
    assert "undeclared" in info.value.output
    assert not list((tmp_path / "pfc").glob("*.o")), "failures are never cached"


# ---------------------------------------------------------------------------- libbpf

def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@kernel
def test_open_load_programs_and_maps(probe_obj):
    before = _open_fds()
    with bpf.Object(probe_obj, "probe") as obj:
        assert set(obj.programs) == {"probe_xdp", "probe_socket", "probe_tc"}
        assert obj.programs["probe_xdp"].fd > 0
        assert obj.programs["probe_socket"].type == 1  # BPF_PROG_TYPE_SOCKET_FILTER
        hits = obj.maps["hits"]
        assert hits.percpu and hits.max_entries == 4 and hits.value_size == 16
        assert _open_fds() > before
    assert obj.closed and not obj.programs
    assert _open_fds() == before, "closing the object closes every fd"


@kernel
def test_test_run_data_in_out_and_repeat(probe_obj):
    with bpf.Object(probe_obj, "probe") as obj:
        prog = obj.programs["probe_xdp"]
        frame = ipv4_frame(60)
        result = prog.test_run(frame)
        assert result.retval == 60
        assert result.data_out == bytes([frame[0] + 1]) + frame[1:]
        timed = prog.test_run(frame, repeat=1000)
        assert timed.duration > 0 and timed.retval == 60


@kernel
def test_percpu_counters_sum_and_reset(probe_obj):
    with bpf.Object(probe_obj, "probe") as obj:
        prog, hits = obj.programs["probe_xdp"], obj.maps["hits"]
        for n in (40, 50, 60):
            prog.test_run(ipv4_frame(n))
        values = hits.lookup(1)
        assert len(values) == bpf.num_possible_cpus()
        assert all(len(v) == 16 for v in values)
        assert hits.sum_u64(1) == (3, 150)
        assert hits.sum_u64(0) == (0, 0)
        prog.test_run(ipv4_frame(60), repeat=7)
        assert hits.sum_u64(1) == (10, 150 + 7 * 60)
        hits.reset()
        assert hits.sum_u64(1) == (0, 0)
        with pytest.raises(bpf.BpfError) as info:
            hits.lookup(4)
        assert info.value.errno == errno.ENOENT


@kernel
def test_verifier_rejection_carries_the_log():
    obj = toolchain.compile_c(BAD, "bad").obj
    before = _open_fds()
    with pytest.raises(bpf.BpfError) as info:
        bpf.Object(obj, "bad")
    assert info.value.errno == errno.EACCES
    assert "invalid access to packet" in info.value.log
    assert "verifier log" in str(info.value) and "reads_too_far" in str(info.value)
    assert _open_fds() == before


def test_garbage_is_refused_by_libbpf():
    if bpf.lib() is None:  # pragma: no cover - libbpf is a dependency
        pytest.skip("no libbpf")
    with pytest.raises(bpf.BpfError) as info:
        bpf.Object(b"not an ELF object", "junk")
    assert "cannot open BPF object junk" in str(info.value)


# ------------------------------------------------- test-run facts the runners rely on

@kernel
def test_socket_filter_test_run_starts_at_l3(probe_obj):
    """bpf_prog_test_run_skb pulls the Ethernet header for socket filters: skb->data is
    L3 and skb->len excludes 14 bytes (the runner adds a pseudo link header)."""
    with bpf.Object(probe_obj, "probe") as obj:
        result = obj.programs["probe_socket"].test_run(ipv4_frame(60))
        assert result.retval == ((60 - 14) << 8) | 0x45


@kernel
def test_tc_test_run_sets_protocol_with_eth_type_trans(probe_obj):
    with bpf.Object(probe_obj, "probe") as obj:
        prog = obj.programs["probe_tc"]
        assert prog.test_run(ipv4_frame(60)).retval == 0x0800
        arp = bytes(12) + b"\x08\x06" + bytes(28)
        assert prog.test_run(arp).retval == 0x0806


@kernel
@pytest.mark.parametrize("program", ["probe_socket", "probe_tc"])
def test_skb_test_run_limits(probe_obj, program):
    """Measured on Linux 6.18: skb test runs refuse fewer than 14 bytes, an IPv4 frame
    shorter than 14 + 20, an IPv6 frame shorter than 14 + 40, and more than 3712."""
    with bpf.Object(probe_obj, "probe") as obj:
        prog = obj.programs[program]
        cases = [(bytes(13), False), (bytes(14), True),
                 (ipv4_frame(33), False), (ipv4_frame(34), True),
                 (bytes(12) + b"\x86\xdd" + bytes(39), False),
                 (bytes(12) + b"\x86\xdd" + bytes(40), True),
                 (bytes(12) + b"\x81\x00" + bytes(2), True),
                 (bytes(bpf.MAX_SKB_DATA), True), (bytes(bpf.MAX_SKB_DATA + 1), False)]
        for data, accepted in cases:
            if accepted:
                prog.test_run(data)
            else:
                with pytest.raises(bpf.BpfError) as info:
                    prog.test_run(data)
                assert info.value.errno == errno.EINVAL, len(data)


@kernel
def test_xdp_test_run_limits(probe_obj):
    """XDP: at least 14 bytes, any EtherType; beyond 3520 the rest goes to fragments a
    program without xdp.frags cannot see."""
    with bpf.Object(probe_obj, "probe") as obj:
        prog = obj.programs["probe_xdp"]
        with pytest.raises(bpf.BpfError):
            prog.test_run(bytes(13))
        assert prog.test_run(ipv4_frame(14)).retval == 14
        assert prog.test_run(bytes(bpf.MAX_XDP_DATA)).retval == bpf.MAX_XDP_DATA
        assert prog.test_run(bytes(bpf.MAX_XDP_DATA + 100)).retval == bpf.MAX_XDP_DATA
