// SPDX-License-Identifier: GPL-2.0
/*
 * pfc_nf: compiled by pfc for netfilter hook prerouting (priority -300),
 * IPv4 and IPv6, from
 * examples/udp-redirect.pf
 *
 * The rules are tried in order; the first terminal rule that holds decides, and
 * a packet no terminal rule decides gets the default (pass). Every rule
 * and the default count packets and bytes (from the network header), read in
 * /proc/net/pfc_nf of the network namespace the module was loaded in.
 */

#include <linux/module.h>
#include <linux/kernel.h>
#include <linux/netfilter.h>
#include <linux/netfilter_ipv4.h>
#include <linux/netfilter_ipv6.h>
#include <linux/nsproxy.h>
#include <linux/percpu.h>
#include <linux/proc_fs.h>
#include <linux/seq_file.h>
#include <linux/skbuff.h>
#include <linux/string.h>
#include <net/checksum.h>
#include <net/net_namespace.h>

#define PFC_SLOTS 2
#define PFC_DEFAULT 1

enum { PFC_TTL, PFC_LEN, PFC_PROTO, PFC_FRAG };

struct pfc_pkt {
	int version;		/* 4 or 6: the hook's family */
	int proto;		/* protocol byte / fixed header's next header; -1 */
	int l4;			/* transport offset when readable, else -1 */
	unsigned int len;	/* bytes from the network header */
};

struct pfc_addr {
	u32 v4;
	u64 hi, lo;
};

struct pfc_range {
	u32 lo, hi;
};

struct pfc_net6 {
	u64 lo_hi, lo_lo, hi_hi, hi_lo;
};

struct pfc_set {
	const struct pfc_range *v4;
	size_t n4;
	const struct pfc_net6 *v6;
	size_t n6;
};

struct pfc_target {
	int version;
	u8 addr[16];
	int port;		/* -1: the port is kept */
	int proto;		/* the rule's protocol (TCP or UDP) or 0 */
};

struct pfc_counter {
	u64 packets;
	u64 bytes;
};

static struct pfc_counter __percpu *pfc_counters;
static struct net *pfc_net;

static const char * const pfc_slot_names[PFC_SLOTS] = {
	"0",
	"default",
};

static const struct pfc_range pfc_nets0[] = {
	{ 0xc0a84002, 0xc0a84002 },
};

static const struct pfc_set pfc_set0 = {
	.v4 = pfc_nets0,
	.n4 = ARRAY_SIZE(pfc_nets0),
	.v6 = NULL,
	.n6 = 0,
};

static const struct pfc_target pfc_to0 = {
	.version = 4,
	.addr = { 0x0a, 0x00, 0x01, 0x02 },
	.port = 8083,
	.proto = 17,
};

static bool pfc_load(const struct sk_buff *skb, int off, void *to, int len)
{
	return off >= 0 && !skb_copy_bits(skb, skb_network_offset(skb) + off, to, len);
}

static __maybe_unused bool pfc_u16(const struct sk_buff *skb, int off, u32 *v)
{
	u8 b[2];

	if (!pfc_load(skb, off, b, 2))
		return false;
	*v = b[0] << 8 | b[1];
	return true;
}

static void pfc_parse(const struct sk_buff *skb, u8 pf, struct pfc_pkt *p)
{
	u8 h[8];
	u8 b;

	p->len = skb->len - skb_network_offset(skb);
	p->version = pf == NFPROTO_IPV6 ? 6 : 4;
	p->proto = -1;
	p->l4 = -1;
	if (pfc_load(skb, p->version == 4 ? 9 : 6, &b, 1))
		p->proto = b;
	if (p->version == 4) {
		unsigned int ihl, total;

		if (!pfc_load(skb, 0, h, 8))
			return;
		ihl = (h[0] & 0x0f) * 4;
		total = h[2] << 8 | h[3];
		if (h[0] >> 4 == 4 && ihl >= 20 && ihl <= total && total <= p->len &&
		    !((h[6] << 8 | h[7]) & 0x1fff))
			p->l4 = ihl;
		return;
	}
	if (p->len >= 40 && pfc_load(skb, 0, h, 6) && h[0] >> 4 == 6 &&
	    40 + (h[4] << 8 | h[5]) <= p->len)
		p->l4 = 40;
}

static __maybe_unused bool pfc_ip_field(const struct sk_buff *skb,
					const struct pfc_pkt *p, int field, u32 *v)
{
	u8 b;

	switch (field) {
	case PFC_TTL:
		if (!pfc_load(skb, p->version == 4 ? 8 : 7, &b, 1))
			return false;
		*v = b;
		return true;
	case PFC_PROTO:
		if (p->proto < 0)
			return false;
		*v = p->proto;
		return true;
	case PFC_LEN:
		if (!pfc_u16(skb, p->version == 4 ? 2 : 4, v))
			return false;
		if (p->version == 6)
			*v += 40;
		return true;
	case PFC_FRAG:
		if (p->version != 4 || !pfc_u16(skb, 6, v))
			return false;
		*v = !!(*v & 0x3fff);
		return true;
	}
	return false;
}

static __maybe_unused u64 pfc_be64(const u8 *b)
{
	u64 v = 0;
	int i;

	for (i = 0; i < 8; i++)
		v = v << 8 | b[i];
	return v;
}

static __maybe_unused bool pfc_addr(const struct sk_buff *skb, const struct pfc_pkt *p,
				    int off4, int off6, struct pfc_addr *a)
{
	u8 b[16];

	if (p->version == 4) {
		if (!pfc_load(skb, off4, b, 4))
			return false;
		a->v4 = (u32)b[0] << 24 | b[1] << 16 | b[2] << 8 | b[3];
		return true;
	}
	if (!pfc_load(skb, off6, b, 16))
		return false;
	a->hi = pfc_be64(b);
	a->lo = pfc_be64(b + 8);
	return true;
}

static __maybe_unused bool pfc_l4_field(const struct sk_buff *skb,
					const struct pfc_pkt *p, int proto, int off, int size,
					u32 *v)
{
	u8 b;

	if (p->l4 < 0 || p->proto != proto)
		return false;
	if (size == 2)
		return pfc_u16(skb, p->l4 + off, v);
	if (!pfc_load(skb, p->l4 + off, &b, 1))
		return false;
	*v = b;
	return true;
}

static __maybe_unused bool pfc_payload(const struct sk_buff *skb,
				       const struct pfc_pkt *p, int proto, int off, u8 *to,
				       int len)
{
	u8 doff;
	int start;

	if (p->l4 < 0 || p->proto != proto)
		return false;
	if (proto == IPPROTO_UDP) {
		start = p->l4 + 8;
	} else {
		if (!pfc_load(skb, p->l4 + 12, &doff, 1) || doff >> 4 < 5)
			return false;
		start = p->l4 + (doff >> 4) * 4;
	}
	return pfc_load(skb, start + off, to, len);
}

static bool __maybe_unused pfc_in_ranges(u32 v, const struct pfc_range *t, size_t n)
{
	size_t lo = 0, hi = n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (v < t[mid].lo)
			hi = mid;
		else if (v > t[mid].hi)
			lo = mid + 1;
		else
			return true;
	}
	return false;
}

static bool __maybe_unused pfc_in4(const struct pfc_addr a, const struct pfc_range *t,
				   size_t n)
{
	return pfc_in_ranges(a.v4, t, n);
}

static __maybe_unused bool pfc_le6(u64 ahi, u64 alo, u64 bhi, u64 blo)
{
	return ahi < bhi || (ahi == bhi && alo <= blo);
}

static bool __maybe_unused pfc_in6(const struct pfc_addr *a, const struct pfc_net6 *t,
				   size_t n)
{
	size_t lo = 0, hi = n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (!pfc_le6(t[mid].lo_hi, t[mid].lo_lo, a->hi, a->lo))
			hi = mid;
		else if (!pfc_le6(a->hi, a->lo, t[mid].hi_hi, t[mid].hi_lo))
			lo = mid + 1;
		else
			return true;
	}
	return false;
}

/* src/dst: present, and in the set's entries of the packet's version, or not */
static bool __maybe_unused pfc_addr_in(const struct sk_buff *skb, const struct pfc_pkt *p,
				       int off4, int off6, const struct pfc_set *set,
				       bool negated)
{
	struct pfc_addr a;
	bool in;

	if (!pfc_addr(skb, p, off4, off6, &a))
		return false;
	in = p->version == 4 ? pfc_in4(a, set->v4, set->n4) : pfc_in6(&a, set->v6, set->n6);
	return in != negated;
}

static void pfc_count(int slot, unsigned int len)
{
	struct pfc_counter __percpu *c = pfc_counters + slot;

	this_cpu_inc(c->packets);
	this_cpu_add(c->bytes, len);
}

/*
 * redirect: the destination address, the destination port (a TCP or UDP rule whose
 * transport header is readable), the IPv4 header checksum and the TCP/UDP checksum
 * are rewritten in place; checksums are updated incrementally (RFC 1624), never
 * recomputed. A UDP checksum of 0 stays 0; an updated one of 0 becomes 0xffff.
 */
static unsigned int pfc_redirect(struct sk_buff *skb, const struct pfc_pkt *p,
				 const struct pfc_target *t)
{
	int alen = t->version == 4 ? 4 : 16;
	int at = t->version == 4 ? 16 : 24;
	int csum_at = -1, end = at + alen;
	bool tcp_udp = p->proto == IPPROTO_TCP || p->proto == IPPROTO_UDP;
	bool port = t->port >= 0 && p->l4 >= 0 && p->proto == t->proto &&
		    p->l4 + 4 <= p->len;
	u8 old[16], oldp[2], newp[2];
	__be32 from4 = 0, to4 = 0, from6[4], to6[4];
	__be16 fromp, top;
	__sum16 *check;
	u8 *nh;

	if (p->l4 >= 0 && tcp_udp) {
		csum_at = p->l4 + (p->proto == IPPROTO_TCP ? 16 : 6);
		if (csum_at + 2 > p->len)
			csum_at = -1;
	}
	end = max(end, csum_at + 2);
	if (port)
		end = max(end, p->l4 + 4);
	if (skb_ensure_writable(skb, skb_network_offset(skb) + end))
		return NF_DROP;
	nh = skb_network_header(skb);
	memcpy(old, nh + at, alen);
	memcpy(nh + at, t->addr, alen);
	if (t->version == 4) {
		memcpy(&from4, old, 4);
		memcpy(&to4, t->addr, 4);
		csum_replace4((__sum16 *)(nh + 10), from4, to4);
	}
	if (port) {
		memcpy(oldp, nh + p->l4 + 2, 2);
		newp[0] = t->port >> 8;
		newp[1] = t->port & 0xff;
		memcpy(nh + p->l4 + 2, newp, 2);
	}
	if (csum_at < 0)
		return NF_ACCEPT;
	check = (__sum16 *)(nh + csum_at);
	if (p->proto == IPPROTO_UDP && !*check)
		return NF_ACCEPT;
	if (t->version == 4) {
		inet_proto_csum_replace4(check, skb, from4, to4, true);
	} else {
		memcpy(from6, old, 16);
		memcpy(to6, t->addr, 16);
		inet_proto_csum_replace16(check, skb, from6, to6, true);
	}
	if (port) {
		memcpy(&fromp, oldp, 2);
		memcpy(&top, newp, 2);
		inet_proto_csum_replace2(check, skb, fromp, top, false);
	}
	if (p->proto == IPPROTO_UDP && !*check)
		*check = CSUM_MANGLED_0;
	return NF_ACCEPT;
}

/* rule 0, line 4: redirect udp dst 192.168.64.2/32 dport 8080 to 10.0.1.2:8083 */
static bool pfc_rule_0(const struct sk_buff *skb, const struct pfc_pkt *p)
{
	u32 v1;

	return p->version == 4 &&
	       p->proto == 17 &&
	       pfc_addr_in(skb, p, 16, 24, &pfc_set0, false) &&
	       (pfc_l4_field(skb, p, 17, 2, 2, &v1) && (v1 == 8080)) &&
	       p->version == 4;
}

static unsigned int pfc_hook(void *priv, struct sk_buff *skb,
			     const struct nf_hook_state *state)
{
	struct pfc_pkt p;

	pfc_parse(skb, state->pf, &p);
	if (pfc_rule_0(skb, &p)) {
		pfc_count(0, p.len);
		return pfc_redirect(skb, &p, &pfc_to0);
	}
	pfc_count(PFC_DEFAULT, p.len);
	return NF_ACCEPT;
}

static const struct nf_hook_ops pfc_ops[] = {
	{
		.hook = pfc_hook,
		.pf = NFPROTO_IPV4,
		.hooknum = NF_INET_PRE_ROUTING,
		.priority = -300,
	},
	{
		.hook = pfc_hook,
		.pf = NFPROTO_IPV6,
		.hooknum = NF_INET_PRE_ROUTING,
		.priority = -300,
	},
};

static int pfc_show(struct seq_file *m, void *v)
{
	int slot, cpu;

	for (slot = 0; slot < PFC_SLOTS; slot++) {
		u64 packets = 0, bytes = 0;

		for_each_possible_cpu(cpu) {
			struct pfc_counter *c = per_cpu_ptr(pfc_counters + slot, cpu);

			packets += READ_ONCE(c->packets);
			bytes += READ_ONCE(c->bytes);
		}
		seq_printf(m, "%s %llu %llu\n", pfc_slot_names[slot], packets, bytes);
	}
	return 0;
}

static int __init pfc_init(void)
{
	int err;

	pfc_counters = __alloc_percpu(sizeof(struct pfc_counter) * PFC_SLOTS,
				      __alignof__(struct pfc_counter));
	if (!pfc_counters)
		return -ENOMEM;
	pfc_net = get_net(current->nsproxy->net_ns);
	if (!proc_create_single(KBUILD_MODNAME, 0444, pfc_net->proc_net, pfc_show)) {
		err = -ENOMEM;
		goto out;
	}
	err = nf_register_net_hooks(pfc_net, pfc_ops, ARRAY_SIZE(pfc_ops));
	if (!err)
		return 0;
	remove_proc_entry(KBUILD_MODNAME, pfc_net->proc_net);
out:
	put_net(pfc_net);
	free_percpu(pfc_counters);
	return err;
}

static void __exit pfc_exit(void)
{
	nf_unregister_net_hooks(pfc_net, pfc_ops, ARRAY_SIZE(pfc_ops));
	remove_proc_entry(KBUILD_MODNAME, pfc_net->proc_net);
	put_net(pfc_net);
	free_percpu(pfc_counters);
}

module_init(pfc_init);
module_exit(pfc_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("pfc policy udp-redirect at netfilter prerouting");
