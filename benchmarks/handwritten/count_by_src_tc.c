// SPDX-License-Identifier: GPL-2.0
/* benchmarks/ebpf_flow.py: counts, at tc ingress, the IPv4 frames that got past the
 * XDP program under test, per source address (key: the address as it lies in the
 * frame), then drops them (they are not for this host). */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u64);
} by_src SEC(".maps");

SEC("tc")
int count_by_src(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data, *end = (void *)(long)skb->data_end;
	__u64 one = 1, *n;
	__u32 src;

	if (data + 34 > end || *(__u16 *)(data + 12) != bpf_htons(0x0800))
		return TC_ACT_OK;
	src = *(__u32 *)(data + 26);
	n = bpf_map_lookup_elem(&by_src, &src);
	if (n)
		*n += 1;
	else
		bpf_map_update_elem(&by_src, &src, &one, BPF_NOEXIST);
	return TC_ACT_SHOT;
}

char LICENSE[] SEC("license") = "GPL";
