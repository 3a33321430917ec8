// SPDX-License-Identifier: GPL-2.0
/*
 * edge_drop_counted_xdp.c: edge_drop_xdp.c with the counters pfc's programs keep (a
 * packet and byte counter for the rule and for the default, per CPU), the peer that
 * measures pfc's matching with its counting.
 *
 * edge_drop_xdp.c: `drop udp dst 192.168.0.79 dport 12345` written by hand for XDP,
 * the way a careful engineer writes it, with pfc's meaning (docs/semantics.md):
 *
 *   - one 802.1Q / 802.1ad tag is skipped (tc and packet sockets never see it);
 *   - the protocol byte and the destination address are read where they lie;
 *   - the destination port is read only from an IPv4 header the kernel accepts
 *     (version 4, IHL >= 5, IHL*4 <= total length <= bytes after the Ethernet
 *     header) of a first fragment, at IHL*4 (options honoured).
 *
 * A naive version (`struct iphdr *ip = data + 14; struct udphdr *udp = (void *)(ip + 1);`
 * and compare) would skip all of that: it misreads tagged frames, packets with IP
 * options, later fragments (whose data it reads as a UDP header) and truncated or
 * malformed headers. It is shorter, but it does not mean the same thing.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define DUT 0xc0a8004f /* 192.168.0.79 */
#define PORT 12345
#define IP_OFFSET 0x1fff /* fragment offset bits of frag_off (net/ip.h) */

/* Per-rule counters as pfc keeps them: slot 0 the rule, slot 1 the default; packets
 * and bytes after the Ethernet header (and a skipped tag); per CPU, summed by readers. */
struct counter {
	__u64 packets;
	__u64 bytes;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, struct counter);
} counters SEC(".maps");

static __always_inline int done(__u32 slot, int verdict, __u64 bytes)
{
	struct counter *c = bpf_map_lookup_elem(&counters, &slot);

	if (c) {
		c->packets += 1;
		c->bytes += bytes;
	}
	return verdict;
}

SEC("xdp")
int edge_drop_counted_xdp(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	void *l3 = data + sizeof(*eth);
	__u16 proto;

	if ((void *)(eth + 1) > data_end)
		return done(1, XDP_PASS, 0);
	proto = eth->h_proto;
	if (proto == bpf_htons(ETH_P_8021Q) || proto == bpf_htons(ETH_P_8021AD)) {
		if (l3 + 4 > data_end)
			return done(1, XDP_PASS, 0);
		proto = *(__u16 *)(l3 + 2);
		l3 += 4;
	}
	__u64 bytes = data_end - l3;

	if (proto != bpf_htons(ETH_P_IP))
		return done(1, XDP_PASS, bytes);

	struct iphdr *ip = l3;

	if ((void *)(ip + 1) > data_end)
		return done(1, XDP_PASS, bytes);
	if (ip->protocol != IPPROTO_UDP || ip->daddr != bpf_htonl(DUT))
		return done(1, XDP_PASS, bytes);

	__u32 ihl4 = ip->ihl * 4, total = bpf_ntohs(ip->tot_len);

	if (ip->version != 4 || ihl4 < sizeof(*ip) || total < ihl4 || l3 + total > data_end)
		return done(1, XDP_PASS, bytes);
	if (ip->frag_off & bpf_htons(IP_OFFSET))
		return done(1, XDP_PASS, bytes);

	struct udphdr *udp = l3 + ihl4;

	if ((void *)udp + 4 > data_end) /* source and destination port */
		return done(1, XDP_PASS, bytes);
	if (udp->dest == bpf_htons(PORT))
		return done(0, XDP_DROP, bytes);
	return done(1, XDP_PASS, bytes);
}

char LICENSE[] SEC("license") = "GPL";
