/* SPDX-License-Identifier: GPL-2.0
 * Linear Bit Vector Search (bpf-iptables' LBVS; Lakshman and Stiliadis, SIGCOMM 1998),
 * with optional aggregation (ABV: Baboescu and Varghese, SIGCOMM 2001).
 *
 * Per field one lookup gives a class; each class has a bit vector of the rules the
 * field lets hold (bit i = the i-th rule, policy order; "absent" is class 0 of the
 * address fields and the last entry of the port tables). AND the five vectors word by
 * word; the first set bit that is a terminal rule decides, the count rules' bits
 * below it are counted (pfc_counters). With PFC_SUMMARY, each vector starts with a
 * summary (bit j: word j is not zero) and only words whose summary bits are all set
 * are read.
 *
 * Sizes are compile-time constants the generator writes (-D...): NW words of 64 rules,
 * NS = ceil(NW / 64) summary words, NC_* classes per field, NP_* prefixes per address
 * trie. Addresses: LPM_TRIE (PFC_ADDR_LPM) or a 16-8-8 multibit trie in arrays
 * (PFC_ADDR_DIR: entry = class, or 0x80000000 | next node).
 */

struct vec {
	__u64 s[NS];
	__u64 w[NW];
};

#define ARRAY(name, n, val)						\
	struct {							\
		__uint(type, BPF_MAP_TYPE_ARRAY);			\
		__uint(max_entries, n);					\
		__type(key, __u32);					\
		__type(value, val);					\
	} name SEC(".maps")

ARRAY(fp_class, 515, __u32);
ARRAY(sp_class, 65537, __u32);
ARRAY(dp_class, 65537, __u32);
ARRAY(vec_fp, NC_FP, struct vec);
ARRAY(vec_src, NC_SRC, struct vec);
ARRAY(vec_dst, NC_DST, struct vec);
ARRAY(vec_sp, NC_SP, struct vec);
ARRAY(vec_dp, NC_DP, struct vec);
#ifdef PFC_COUNT
ARRAY(vec_count, 1, struct vec); /* bits of the count rules */
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

struct vecs {
	struct vec *v[5];
#ifdef PFC_COUNT
	struct vec *count;
#endif
};

#ifdef PFC_COUNT
/* Count the rules whose bits are set in `bits` (word `i`): at most 64, a bounded loop
 * the verifier walks once per callback. */
PFC_FN void count_bits(__u64 bits, __u64 i, __u64 nbytes)
{
	for (int b = 0; b < 64 && bits; b++) {
		pfc_count(i * 64 + pfc_ctz(bits), nbytes);
		bits &= bits - 1;
	}
}
#endif

/* Word i of the AND: 1 and *out set when a terminal rule in it decides. */
PFC_FN int lbvs_word(const struct vecs *vs, __u64 i, __u64 nbytes, __u32 *out)
{
	if (i >= NW)
		return 0;
	__u64 x = vs->v[0]->w[i] & vs->v[1]->w[i] & vs->v[2]->w[i] & vs->v[3]->w[i] &
		  vs->v[4]->w[i];
#ifdef PFC_COUNT
	__u64 cm = vs->count->w[i], t = x & ~cm;

	if (t) {
		__u64 low = t & -t;

		count_bits(x & cm & (low - 1), i, nbytes);
		*out = i * 64 + pfc_ctz(t);
		return 1;
	}
	count_bits(x & cm, i, nbytes);
	return 0;
#else
	if (!x)
		return 0;
	*out = i * 64 + pfc_ctz(x);
	return 1;
#endif
}

/* The scan is a bpf_loop (Linux 5.17; inlined by the verifier since 6.0): its
 * callback is verified once, whatever NW is, where a plain loop is walked NW times
 * by the verifier (1M-instruction limit near 2k rules with count rules). */
struct scan {
	struct vecs vs;
	__u64 nbytes;
	__u64 m;  /* summary bits not yet visited */
	__u32 s;  /* next summary word */
	__u32 out;
};

#ifdef PFC_SUMMARY
/* One step: load the next summary word's AND, or visit the next candidate word. At
 * most NS + NW steps. */
static long scan_step(__u32 step, void *arg)
{
	struct scan *c = arg;

	if (!c->m) {
		__u32 s = c->s;

		if (s >= NS)
			return 1;
		c->m = c->vs.v[0]->s[s] & c->vs.v[1]->s[s] & c->vs.v[2]->s[s] &
		       c->vs.v[3]->s[s] & c->vs.v[4]->s[s];
		c->s = s + 1;
		return 0;
	}
	__u64 i = (__u64)(c->s - 1) * 64 + pfc_ctz(c->m);

	c->m &= c->m - 1;
	return lbvs_word(&c->vs, i, c->nbytes, &c->out);
}
#define SCAN_STEPS (NS + NW)
#else
static long scan_step(__u32 i, void *arg)
{
	struct scan *c = arg;

	return lbvs_word(&c->vs, i, c->nbytes, &c->out);
}
#define SCAN_STEPS NW
#endif

PFC_FN __u32 lbvs(struct pfc_key *k)
{
	struct scan c = {.nbytes = k->nbytes, .out = ACT_DEFAULT};
	__u32 c0 = 0;

	c.vs.v[0] = vec_of(&fp_class, &vec_fp, k->fp);
	c.vs.v[1] = bpf_map_lookup_elem(&vec_src, &c0);
	if (k->have & 1) {
		__u32 cl = SRC_CLASS(k->src);
		c.vs.v[1] = bpf_map_lookup_elem(&vec_src, &cl);
	}
	c.vs.v[2] = bpf_map_lookup_elem(&vec_dst, &c0);
	if (k->have & 2) {
		__u32 cl = DST_CLASS(k->dst);
		c.vs.v[2] = bpf_map_lookup_elem(&vec_dst, &cl);
	}
	c.vs.v[3] = vec_of(&sp_class, &vec_sp, k->sport);
	c.vs.v[4] = vec_of(&dp_class, &vec_dp, k->dport);
#ifdef PFC_COUNT
	c.vs.count = bpf_map_lookup_elem(&vec_count, &c0);
	if (!c.vs.count)
		return ACT_ERROR;
#endif
	if (!c.vs.v[0] || !c.vs.v[1] || !c.vs.v[2] || !c.vs.v[3] || !c.vs.v[4])
		return ACT_ERROR; /* cannot happen: every class has a vector */
	bpf_loop(SCAN_STEPS, scan_step, &c, 0);
	return c.out;
}

PFC_PROGRAM(lbvs)
