// SPDX-License-Identifier: GPL-2.0
/*
 * edge_drop_counted_tc.c: edge_drop_tc.c with the counters pfc's programs keep (a
 * packet and byte counter for the rule and for the default, per CPU), the peer that
 * measures pfc's matching with its counting.
 *
 * edge_drop_tc.c: `drop udp dst 192.168.0.79 dport 12345` written by hand for tc
 * (clsact ingress, direct action), with pfc's meaning (docs/semantics.md). The kernel
 * has removed the outer VLAN tag before tc runs, so there is none to skip.
 *
 *   - the protocol byte and the destination address are read where they lie;
 *   - the destination port is read only from an IPv4 header the kernel accepts
 *     (version 4, IHL >= 5, IHL*4 <= total length <= bytes after the Ethernet
 *     header) of a first fragment, at IHL*4 (options honoured);
 *   - a non-linear skb whose headers are not all in the linear part is pulled first
 *     (direct packet access reads only the linear part).
 *
 * A naive version would read a fixed 20-byte IP header, skip the validity and fragment
 * checks, and not pull: later fragments, packets with options and malformed headers
 * would be judged on the wrong bytes.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/pkt_cls.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define DUT 0xc0a8004f /* 192.168.0.79 */
#define PORT 12345
#define IP_OFFSET 0x1fff /* fragment offset bits of frag_off (net/ip.h) */
#define NEED (ETH_HLEN + 60 + 4) /* Ethernet, IPv4 with options, the two ports */

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

SEC("tc")
int edge_drop_counted_tc(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;

	if (data + NEED > data_end && skb->len > (__u32)(data_end - data)) {
		if (bpf_skb_pull_data(skb, skb->len < NEED ? skb->len : NEED))
			return TC_ACT_SHOT;
		data = (void *)(long)skb->data;
		data_end = (void *)(long)skb->data_end;
	}

	__u64 bytes = skb->len > ETH_HLEN ? skb->len - ETH_HLEN : 0;
	struct ethhdr *eth = data;
	struct iphdr *ip = data + sizeof(*eth);

	if ((void *)(ip + 1) > data_end || eth->h_proto != bpf_htons(ETH_P_IP))
		return done(1, TC_ACT_OK, bytes);
	if (ip->protocol != IPPROTO_UDP || ip->daddr != bpf_htonl(DUT))
		return done(1, TC_ACT_OK, bytes);

	__u32 ihl4 = ip->ihl * 4, total = bpf_ntohs(ip->tot_len);

	if (ip->version != 4 || ihl4 < sizeof(*ip) || total < ihl4 ||
	    (void *)ip + total > data_end)
		return done(1, TC_ACT_OK, bytes);
	if (ip->frag_off & bpf_htons(IP_OFFSET))
		return done(1, TC_ACT_OK, bytes);

	struct udphdr *udp = (void *)ip + ihl4;

	if ((void *)udp + 4 > data_end)
		return done(1, TC_ACT_OK, bytes);
	if (udp->dest == bpf_htons(PORT))
		return done(0, TC_ACT_SHOT, bytes);
	return done(1, TC_ACT_OK, bytes);
}

char LICENSE[] SEC("license") = "GPL";
