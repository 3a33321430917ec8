/* SPDX-License-Identifier: GPL-2.0
 * Tuple space search with port classes (tss.py): every tuple is a set of masks; the
 * frame's key, masked and tagged with the tuple's number, is looked up in one hash
 * table; a hit is a list of entries (rule, port ranges) in rule order, the first
 * whose ranges hold wins. Tuples are visited in order of the smallest rule they hold
 * and the walk stops once that is beyond the best terminal rule found. Count rules
 * have tuples, table and entries of their own, walked after the terminal search.
 *
 * The walks are bpf_loops (Linux 5.17): the verifier checks one step, not NT (a plain
 * loop over a few hundred tuples exceeds its 8192-jump history limit).
 * Sizes are compile-time constants: NT tuples, NK keys, NE entries, MAXL the longest
 * list (NCT, NCK, NCE, MAXCL for the count rules).
 */

struct tuple {
	__u32 src, dst, ports, meta; /* masks */
	__u32 min_rule;
	__u32 pad;
};

struct tkey {
	__u32 tuple, src, dst, ports, meta;
};

struct list {
	__u32 first, len;
};

struct tentry {
	__u32 rule;
	__u16 sp_lo, sp_hi, dp_lo, dp_hi;
};

#define HASH(name, n)							\
	struct {							\
		__uint(type, BPF_MAP_TYPE_HASH);			\
		__uint(max_entries, n);					\
		__type(key, struct tkey);				\
		__type(value, struct list);				\
	} name SEC(".maps")

ARRAY(tuples, NT, struct tuple);
HASH(table, NK);
ARRAY(entries, NE, struct tentry);
#ifdef PFC_COUNT
ARRAY(ctuples, NCT, struct tuple);
HASH(ctable, NCK);
ARRAY(centries, NCE, struct tentry);
#endif

struct walk {
	struct tkey in;
	__u32 sport, dport;
	__u32 best;
	__u64 nbytes;
};

PFC_FN struct list *find(void *tuples, void *table, struct walk *w, __u32 t,
			 __u32 *stop)
{
	struct tkey key;
	struct tuple *d = bpf_map_lookup_elem(tuples, &t);

	*stop = !d || d->min_rule > w->best;
	if (*stop)
		return 0;
	key.tuple = t;
	key.src = w->in.src & d->src;
	key.dst = w->in.dst & d->dst;
	key.ports = w->in.ports & d->ports;
	key.meta = w->in.meta & d->meta;
	return bpf_map_lookup_elem(table, &key);
}

PFC_FN int ports_hold(const struct tentry *e, const struct walk *w)
{
	return w->sport >= e->sp_lo && w->sport <= e->sp_hi && w->dport >= e->dp_lo &&
	       w->dport <= e->dp_hi;
}

/* One terminal tuple: the first entry of the hit whose ports hold improves best. */
static long terminal_tuple(__u32 t, void *arg)
{
	struct walk *w = arg;
	__u32 stop;
	struct list *l = find(&tuples, &table, w, t, &stop);

	if (stop)
		return 1;
	if (!l)
		return 0;
	for (__u32 j = 0; j < MAXL; j++) {
		if (j >= l->len)
			break;
		__u32 at = l->first + j;
		struct tentry *e = bpf_map_lookup_elem(&entries, &at);

		if (!e || e->rule >= w->best)
			break;
		if (ports_hold(e, w)) {
			w->best = e->rule;
			break;
		}
	}
	return 0;
}

#ifdef PFC_COUNT
/* One count tuple: count every entry of the hit before best whose ports hold. */
static long count_tuple(__u32 t, void *arg)
{
	struct walk *w = arg;
	__u32 stop;
	struct list *l = find(&ctuples, &ctable, w, t, &stop);

	if (stop)
		return 1;
	if (!l)
		return 0;
	for (__u32 j = 0; j < MAXCL; j++) {
		if (j >= l->len)
			break;
		__u32 at = l->first + j;
		struct tentry *e = bpf_map_lookup_elem(&centries, &at);

		if (!e || e->rule >= w->best)
			break;
		if (ports_hold(e, w))
			pfc_count(e->rule, w->nbytes);
	}
	return 0;
}
#endif

PFC_FN __u32 tss(struct pfc_key *k)
{
	struct walk w = {.best = ACT_DEFAULT, .nbytes = k->nbytes};
	__u32 fam = k->fp == 0 ? 0 : k->fp < 258 ? 1 : 2;
	__u32 proto = k->fp == 0 ? 0 : k->fp < 258 ? k->fp - 1 : k->fp - 258;

	w.sport = k->sport & 0xffff;
	w.dport = k->dport & 0xffff;
	w.in.src = k->src;
	w.in.dst = k->dst;
	w.in.ports = (w.sport << 16) | w.dport;
	w.in.meta = (fam << 16) | (proto << 4) | (k->have & 3) |
		    (k->sport != PORT_ABSENT ? 4 : 0) | (k->dport != PORT_ABSENT ? 8 : 0);
	bpf_loop(NT, terminal_tuple, &w, 0);
#ifdef PFC_COUNT
	bpf_loop(NCT, count_tuple, &w, 0);
#endif
	return w.best;
}

PFC_PROGRAM(tss)
