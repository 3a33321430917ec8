/* SPDX-License-Identifier: GPL-2.0
 * Tuple space search (tss.py): every tuple is a set of masks; the frame's key, masked
 * and tagged with the tuple's number, is looked up in one hash table. Tuples are
 * visited in order of the smallest rule they hold and the walk stops once that is
 * beyond the best terminal rule found. Count rules: their own tuples, table and
 * lists of rule indices, walked after the terminal search with the same early exit.
 *
 * Sizes are compile-time constants: NT tuples, NK keys (NCT, NCK, NCL, MAXL for the
 * count rules).
 */

struct tuple {
	__u32 src, dst, ports, meta; /* masks */
	__u32 min_rule;
	__u32 pad;
};

struct tkey {
	__u32 tuple, src, dst, ports, meta;
};

#define ARRAY(name, n, val)						\
	struct {							\
		__uint(type, BPF_MAP_TYPE_ARRAY);			\
		__uint(max_entries, n);					\
		__type(key, __u32);					\
		__type(value, val);					\
	} name SEC(".maps")
#define HASH(name, n, val)						\
	struct {							\
		__uint(type, BPF_MAP_TYPE_HASH);			\
		__uint(max_entries, n);					\
		__type(key, struct tkey);				\
		__type(value, val);					\
	} name SEC(".maps")

ARRAY(tuples, NT, struct tuple);
HASH(table, NK, __u32);
#ifdef PFC_COUNT
struct clist {
	__u32 first, len;
};
ARRAY(ctuples, NCT, struct tuple);
HASH(ctable, NCK, struct clist);
ARRAY(clists, NCL, __u32);
#endif

PFC_FN void masked(struct tkey *out, const struct tkey *in, const struct tuple *t,
		   __u32 id)
{
	out->tuple = id;
	out->src = in->src & t->src;
	out->dst = in->dst & t->dst;
	out->ports = in->ports & t->ports;
	out->meta = in->meta & t->meta;
}

struct walk {
	struct tkey *in;
	__u32 best;
};

/* One terminal tuple, a bpf_loop step (a plain loop over a few hundred tuples passes
 * the verifier's 8192-jump history limit). */
static long terminal_tuple(__u32 t, void *arg)
{
	struct walk *w = arg;
	struct tkey key;
	struct tuple *d = bpf_map_lookup_elem(&tuples, &t);

	if (!d || d->min_rule > w->best)
		return 1;
	masked(&key, w->in, d, t);
	__u32 *rule = bpf_map_lookup_elem(&table, &key);

	if (rule && *rule < w->best)
		w->best = *rule;
	return 0;
}

#ifdef PFC_COUNT
struct count_walk {
	struct tkey *in;
	__u64 nbytes;
	__u32 best;
};

/* One count tuple (a bpf_loop step: the verifier walks it once, not NCT times). */
static long count_tuple(__u32 t, void *arg)
{
	struct count_walk *c = arg;
	struct tkey key;
	struct tuple *d = bpf_map_lookup_elem(&ctuples, &t);

	if (!d || d->min_rule > c->best)
		return 1;
	masked(&key, c->in, d, t);
	struct clist *l = bpf_map_lookup_elem(&ctable, &key);

	if (!l)
		return 0;
	for (__u32 j = 0; j < MAXL; j++) {
		if (j >= l->len)
			break;
		__u32 at = l->first + j;
		__u32 *rule = bpf_map_lookup_elem(&clists, &at);

		if (!rule || *rule > c->best)
			break;
		pfc_count(*rule, c->nbytes);
	}
	return 0;
}
#endif

PFC_FN __u32 tss(struct pfc_key *k)
{
	struct tkey in = {0};
	__u32 best = ACT_DEFAULT;
	__u32 fam = k->fp == 0 ? 0 : k->fp < 258 ? 1 : 2;
	__u32 proto = k->fp == 0 ? 0 : k->fp < 258 ? k->fp - 1 : k->fp - 258;

	in.src = k->src;
	in.dst = k->dst;
	in.ports = ((k->sport & 0xffff) << 16) | (k->dport & 0xffff);
	in.meta = (fam << 16) | (proto << 4) | (k->have & 3) |
		  (k->sport != PORT_ABSENT ? 4 : 0) | (k->dport != PORT_ABSENT ? 8 : 0);
	struct walk w = {.in = &in, .best = ACT_DEFAULT};

	bpf_loop(NT, terminal_tuple, &w, 0);
	best = w.best;
#ifdef PFC_COUNT
	struct count_walk c = {.in = &in, .best = best, .nbytes = k->nbytes};

	bpf_loop(NCT, count_tuple, &c, 0);
#endif
	return best;
}

PFC_PROGRAM(tss)
