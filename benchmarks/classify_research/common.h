/* SPDX-License-Identifier: GPL-2.0
 * The classification prototypes' shared part: reading a frame into the key of
 * model.py (fp, src, dst, sport, dport, with "absent"), the action table, the per-rule
 * counters. Built for XDP (-DPFC_XDP: one VLAN tag skipped, as the kernel removes it
 * before tc) or tc (-DPFC_TC: tag already gone). Every read is behind a bounds test the
 * verifier sees; semantics.md "Reading a frame" is what this mirrors.
 */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

/* An array map of n values of type val, indexed by __u32. */
#define ARRAY(name, n, val)						\
	struct {							\
		__uint(type, BPF_MAP_TYPE_ARRAY);			\
		__uint(max_entries, n);					\
		__type(key, __u32);					\
		__type(value, val);					\
	} name SEC(".maps")

#define PFC_FN static __always_inline __attribute__((unused))
#define PORT_ABSENT 65536
#define ACT_DROP 0
#define ACT_PASS 1
#define ACT_COUNT 2
#define ACT_DEFAULT 0xffffffff /* no terminal rule: the default decides */
#define ACT_ERROR 0xfffffffe /* a table is missing an entry (a bug): drop */
#ifdef PFC_XDP
#define RET_DROP XDP_DROP
#define RET_PASS XDP_PASS
#else
#define RET_DROP TC_ACT_SHOT
#define RET_PASS TC_ACT_OK
#endif

struct pfc_key {
	__u32 fp;       /* 0 non-IP; 1 + proto (IPv4); 258 + proto (IPv6); proto 256: absent */
	__u32 have;     /* bit 0: src, bit 1: dst present */
	__u32 src, dst; /* host byte order */
	__u32 sport, dport; /* PORT_ABSENT when absent */
	__u64 nbytes;   /* what a count rule adds */
};

/* Per-rule counters (count rules), per CPU, indexed by rule index. */
struct pfc_counter {
	__u64 packets;
	__u64 bytes;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, NRULES);
	__type(key, __u32);
	__type(value, struct pfc_counter);
} pfc_counters SEC(".maps");

/* Rule index -> action (ACT_*); the default's verdict at index NRULES. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, NRULES + 1);
	__type(key, __u32);
	__type(value, __u32);
} pfc_actions SEC(".maps");

PFC_FN void pfc_count(__u32 rule, __u64 bytes)
{
	struct pfc_counter *c = bpf_map_lookup_elem(&pfc_counters, &rule);

	if (c) {
		c->packets += 1;
		c->bytes += bytes;
	}
}

PFC_FN int pfc_verdict(__u32 rule)
{
	__u32 slot = rule == ACT_DEFAULT ? NRULES : rule;
	__u32 *a = bpf_map_lookup_elem(&pfc_actions, &slot);

	return rule != ACT_ERROR && a && *a == ACT_PASS ? RET_PASS : RET_DROP;
}

/* Count trailing zeros of a nonzero word, branchless: clang 14's BPF backend cannot
 * lower cttz, and a branchy version forks the verifier's state 6 times per call. */
PFC_FN __u64 pfc_ctz(__u64 x)
{
	return __builtin_popcountll((x & -x) - 1) & 63;
}

/* Keep one register for a value clang would otherwise copy around its bounds test
 * (the verifier must see the test on the register the access uses). */
#define PFC_PIN(v) asm volatile("" : "+r"(v))

#define HAVE(p, n) ((void *)(p) + (n) <= data_end)
#define U8(p, o) ((__u32)*(const __u8 *)((void *)(p) + (o)))
#define U16(p, o) ((__u32)bpf_ntohs(*(const __u16 *)((void *)(p) + (o))))
#define U32(p, o) bpf_ntohl(*(const __u32 *)((void *)(p) + (o)))

/* The key of the frame [data, data_end) (model.py's module doc). */
PFC_FN void pfc_read(void *data, void *data_end, struct pfc_key *k)
{
	void *ip = data + 14;
	__u32 etype = 0;

	k->fp = 0;
	k->have = 0;
	k->src = k->dst = 0;
	k->sport = k->dport = PORT_ABSENT;
	k->nbytes = 0;
	if (!HAVE(data, 14))
		return;
	etype = *(__u16 *)(data + 12);
#ifdef PFC_XDP
	if (etype == bpf_htons(0x8100) || etype == bpf_htons(0x88a8)) {
		if (!HAVE(data, 18))
			return;
		etype = *(__u16 *)(data + 16);
		ip = data + 18;
	}
#endif
	k->nbytes = data_end - ip;
	if (etype == bpf_htons(0x0800)) {
		k->fp = 1 + (HAVE(ip, 10) ? U8(ip, 9) : 256);
		if (HAVE(ip, 16)) {
			k->src = U32(ip, 12);
			k->have |= 1;
		}
		if (HAVE(ip, 20)) {
			k->dst = U32(ip, 16);
			k->have |= 2;
		}
		if (!HAVE(ip, 20))
			return;
		__u32 vhl = U8(ip, 0), ihl4 = (vhl & 0xf) * 4, total = U16(ip, 2);
		if ((vhl >> 4) != 4 || ihl4 < 20 || total < ihl4 || !HAVE(ip, total))
			return;
		if (U16(ip, 6) & 0x1fff)
			return;
		void *l4 = ip + ihl4;
		if (HAVE(l4, 2))
			k->sport = U16(l4, 0);
		if (HAVE(l4, 4))
			k->dport = U16(l4, 2);
	} else if (etype == bpf_htons(0x86dd)) {
		k->fp = 258 + (HAVE(ip, 7) ? U8(ip, 6) : 256);
		if (!HAVE(ip, 40) || (U8(ip, 0) >> 4) != 6 || !HAVE(ip, 40 + U16(ip, 4)))
			return;
		void *l4 = ip + 40;
		if (HAVE(l4, 2))
			k->sport = U16(l4, 0);
		if (HAVE(l4, 4))
			k->dport = U16(l4, 2);
	}
}

/* The program's entry, placed at the end of each prototype: read the key, classify
 * (FN counts the count rules before the decider and returns the deciding rule's index
 * or ACT_DEFAULT), return the verdict. tc pulls a non-linear packet whole first. */
#ifdef PFC_XDP
#define PFC_PROGRAM(FN)							\
SEC("xdp")								\
int pfc_classify(struct xdp_md *ctx)					\
{									\
	struct pfc_key k;						\
									\
	pfc_read((void *)(long)ctx->data, (void *)(long)ctx->data_end, &k); \
	return pfc_verdict(FN(&k));					\
}
#else
#define PFC_PROGRAM(FN)							\
SEC("tc")								\
int pfc_classify(struct __sk_buff *ctx)					\
{									\
	struct pfc_key k;						\
									\
	if (ctx->len > ctx->data_end - ctx->data && bpf_skb_pull_data(ctx, ctx->len)) \
		return TC_ACT_SHOT;					\
	pfc_read((void *)(long)ctx->data, (void *)(long)ctx->data_end, &k); \
	return pfc_verdict(FN(&k));					\
}
#endif

char LICENSE[] SEC("license") = "GPL";
