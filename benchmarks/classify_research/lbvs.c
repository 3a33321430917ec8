/* SPDX-License-Identifier: GPL-2.0
 * Linear Bit Vector Search (bpf-iptables' LBVS; Lakshman and Stiliadis, SIGCOMM 1998),
 * with optional aggregation (ABV: Baboescu and Varghese, SIGCOMM 2001).
 *
 * Per field one lookup gives a class; each class has bit vectors of the rules the field
 * lets hold, in two planes: the terminal rules (bit i = the i-th terminal rule, policy
 * order) and the count rules (bit i = the i-th count rule). "Absent" is a class of its
 * own (class 0 of the address fields, the last entry of the port tables). AND the five
 * vectors word by word: the first set bit of the terminal plane is the deciding rule
 * (tidx[] gives its rule index); the set bits of the count plane whose rule index is
 * below it are the count rules to count. With PFC_SUMMARY each plane starts with a
 * summary (bit j: word j is not zero) and only words whose summary bits are all set
 * are read.
 *
 * The terminal plane may be cut into up to three groups (lbvs.py: rules with a
 * narrow destination, a narrow source, the rest), each in rule order with its own
 * summary: in a group whose rules all name a narrow destination, the destination's
 * vector is sparse, so the summary AND skips almost every word. The decider is the
 * smallest rule index of the groups' first hits.
 *
 * Sizes are compile-time constants (-D...): TW0..TW2/CW words of 64 terminal/count
 * rules (TW1, TW2 may be 0), TS0..TS2/CS summary words, OFF1, OFF2 where groups 1 and
 * 2 start in tidx[], NC_* classes per field, NP_* prefixes of an LPM trie or NN_*
 * nodes of a 16-8-8 array trie (PFC_ADDR_LPM / PFC_ADDR_DIR: an entry is a class, or
 * 0x80000000 | next node). The terminal scan is a plain bounded loop (no call in it: a
 * BPF-to-BPF call, which bpf_loop makes per step, costs ~10 ns on a CPU with the SRSO
 * "safe RET" mitigation); the count scan, which runs only when the count plane's AND
 * is not empty, is a bpf_loop (verified once, whatever CW is).
 */

#define TW (TW0 + TW1 + TW2)
struct vec {
	__u64 ts0[TS0];
	__u64 tw0[TW0];
#if TW1
	__u64 ts1[TS1];
	__u64 tw1[TW1];
#endif
#if TW2
	__u64 ts2[TS2];
	__u64 tw2[TW2];
#endif
#ifdef PFC_COUNT
	__u64 cs[CS];
	__u64 cw[CW];
#endif
};

ARRAY(fp_class, 515, __u32);
ARRAY(sp_class, 65537, __u32);
ARRAY(dp_class, 65537, __u32);
ARRAY(vec_fp, NC_FP, struct vec);
ARRAY(vec_src, NC_SRC, struct vec);
ARRAY(vec_dst, NC_DST, struct vec);
ARRAY(vec_sp, NC_SP, struct vec);
ARRAY(vec_dp, NC_DP, struct vec);
ARRAY(tidx, TW * 64, __u32); /* terminal plane bit -> rule index */
#ifdef PFC_COUNT
ARRAY(cidx, CW * 64, __u32); /* count plane bit -> rule index */
#endif

#ifdef PFC_ADDR_LPM
struct lpm_key {
	__u32 prefixlen;
	__u32 addr; /* network byte order */
};
#define LPM(name, n)							\
	struct {							\
		__uint(type, BPF_MAP_TYPE_LPM_TRIE);			\
		__uint(map_flags, BPF_F_NO_PREALLOC);			\
		__uint(max_entries, n);					\
		__type(key, struct lpm_key);				\
		__type(value, __u32);					\
	} name SEC(".maps")
LPM(src_lpm, NP_SRC);
LPM(dst_lpm, NP_DST);

PFC_FN __u32 addr_class(void *trie, __u32 addr)
{
	struct lpm_key key = {32, bpf_htonl(addr)};
	__u32 *c = bpf_map_lookup_elem(trie, &key);

	return c ? *c : 0;
}
#define SRC_CLASS(a) addr_class(&src_lpm, a)
#define DST_CLASS(a) addr_class(&dst_lpm, a)
#else
ARRAY(src_l1, 65536, __u32);
ARRAY(src_l2, NN_SRC2 * 256, __u32);
ARRAY(src_l3, NN_SRC3 * 256, __u32);
ARRAY(dst_l1, 65536, __u32);
ARRAY(dst_l2, NN_DST2 * 256, __u32);
ARRAY(dst_l3, NN_DST3 * 256, __u32);

PFC_FN __u32 addr_class(void *l1, void *l2, void *l3, __u32 a)
{
	__u32 i = a >> 16;
	__u32 *e = bpf_map_lookup_elem(l1, &i);

	if (!e)
		return 0;
	if (!(*e & 0x80000000))
		return *e;
	i = ((*e & 0x7fffffff) << 8) | ((a >> 8) & 0xff);
	e = bpf_map_lookup_elem(l2, &i);
	if (!e)
		return 0;
	if (!(*e & 0x80000000))
		return *e;
	i = ((*e & 0x7fffffff) << 8) | (a & 0xff);
	e = bpf_map_lookup_elem(l3, &i);
	return e ? *e : 0;
}
#define SRC_CLASS(a) addr_class(&src_l1, &src_l2, &src_l3, a)
#define DST_CLASS(a) addr_class(&dst_l1, &dst_l2, &dst_l3, a)
#endif

PFC_FN struct vec *vec_of(void *classes, void *vecs, __u32 value)
{
	__u32 *c = bpf_map_lookup_elem(classes, &value);

	if (!c)
		return 0;
	return bpf_map_lookup_elem(vecs, c);
}

#define AND5(v, f, i) ((v)[0]->f[i] & (v)[1]->f[i] & (v)[2]->f[i] & (v)[3]->f[i] & \
		       (v)[4]->f[i])

/* The first terminal rule of group G that holds: its position in the group, or -1. */
#ifdef PFC_SUMMARY
#define TERMINAL(G)							\
PFC_FN __s64 terminal##G(struct vec *v[5])				\
{									\
	for (__u64 s = 0; s < TS##G; s++) {				\
		__u64 m = AND5(v, ts##G, s);				\
									\
		for (int j = 0; j < 64 && m; j++) {			\
			__u64 i = s * 64 + pfc_ctz(m);			\
									\
			PFC_PIN(i);					\
			m &= m - 1;					\
			if (i >= TW##G)					\
				break;					\
			__u64 x = AND5(v, tw##G, i);			\
									\
			if (x)						\
				return i * 64 + pfc_ctz(x);		\
		}							\
	}								\
	return -1;							\
}
#else
#define TERMINAL(G)							\
PFC_FN __s64 terminal##G(struct vec *v[5])				\
{									\
	for (__u64 i = 0; i < TW##G; i++) {				\
		__u64 x = AND5(v, tw##G, i);				\
									\
		if (x)							\
			return i * 64 + pfc_ctz(x);			\
	}								\
	return -1;							\
}
#endif
TERMINAL(0)
#if TW1
TERMINAL(1)
#endif
#if TW2
TERMINAL(2)
#endif

/* The rule index of position pos of the group starting at off in tidx[], if it is
 * before best. */
PFC_FN __u32 better(__s64 pos, __u32 off, __u32 best)
{
	if (pos < 0)
		return best;
	__u32 key = off + pos;
	__u32 *r = bpf_map_lookup_elem(&tidx, &key);

	if (!r)
		return ACT_ERROR;
	return *r < best ? *r : best;
}

#ifdef PFC_COUNT
struct count_scan {
	struct vec *v[5];
	__u64 m;      /* count words not yet visited (summary bits of word s - 1) */
	__u64 bits;   /* count bits of the current word not yet visited */
	__u64 word;   /* the current word */
	__u64 nbytes;
	__u32 s;      /* next summary word */
	__u32 limit;  /* rule index of the decider: count only rules before it */
};

/* One step: the next summary word, the next candidate word, or one count bit. */
static long count_step(__u32 step, void *arg)
{
	struct count_scan *c = arg;

	if (c->bits) {
		__u64 pos = c->word * 64 + pfc_ctz(c->bits);
		__u32 key = pos;
		__u32 *rule = bpf_map_lookup_elem(&cidx, &key);

		c->bits &= c->bits - 1;
		if (!rule || *rule > c->limit)
			return 1; /* bits are in rule order: no later one counts either */
		pfc_count(*rule, c->nbytes);
		return 0;
	}
	if (c->m) {
		__u64 i = (__u64)(c->s - 1) * 64 + pfc_ctz(c->m);

		PFC_PIN(i);
		c->m &= c->m - 1;
		if (i < CW) {
			c->word = i;
			c->bits = AND5(c->v, cw, i);
		}
		return 0;
	}
	if (c->s >= CS)
		return 1;
	c->m = AND5(c->v, cs, c->s);
	c->s++;
	return 0;
}

/* Count every count rule that holds, before rule `limit`. */
PFC_FN void count(struct vec *v[5], __u32 limit, __u64 nbytes)
{
	struct count_scan c = {.nbytes = nbytes, .limit = limit};

	for (int f = 0; f < 5; f++)
		c.v[f] = v[f];
	bpf_loop(CS + CW + CW * 64, count_step, &c, 0);
}
#endif

PFC_FN __u32 lbvs(struct pfc_key *k)
{
	struct vec *v[5];
	__u32 c0 = 0, rule = ACT_DEFAULT;

	v[0] = vec_of(&fp_class, &vec_fp, k->fp);
	v[1] = bpf_map_lookup_elem(&vec_src, &c0);
	if (k->have & 1) {
		__u32 c = SRC_CLASS(k->src);
		v[1] = bpf_map_lookup_elem(&vec_src, &c);
	}
	v[2] = bpf_map_lookup_elem(&vec_dst, &c0);
	if (k->have & 2) {
		__u32 c = DST_CLASS(k->dst);
		v[2] = bpf_map_lookup_elem(&vec_dst, &c);
	}
	v[3] = vec_of(&sp_class, &vec_sp, k->sport);
	v[4] = vec_of(&dp_class, &vec_dp, k->dport);
	if (!v[0] || !v[1] || !v[2] || !v[3] || !v[4])
		return ACT_ERROR; /* cannot happen: every class has a vector */
	rule = better(terminal0(v), 0, rule);
#if TW1
	rule = better(terminal1(v), OFF1, rule);
#endif
#if TW2
	rule = better(terminal2(v), OFF2, rule);
#endif
	if (rule == ACT_ERROR)
		return ACT_ERROR;
#ifdef PFC_COUNT
	__u64 any = 0;

	for (int s = 0; s < CS; s++)
		any |= AND5(v, cs, s);
	if (any)
		count(v, rule, k->nbytes);
#endif
	return rule;
}

PFC_PROGRAM(lbvs)
