/* SPDX-License-Identifier: GPL-2.0
 * Decision trees (HiCuts in separable trees with region compaction, dtree.py) over
 * the key of common.h, "absent" a value of each field's extended domain. One tree per
 * group (roots[]): from its root, each internal node cuts one field's block [base,
 * base + 2^(shift+kbits)) into 2^kbits parts (child = node a + ((value - base) >>
 * shift): one lookup per level; a value outside the block matches nothing in this
 * tree; a node whose smallest rule is not before the best found is not entered); the
 * leaf lists
 * the entries (one box per rule, or a few for a rule with lists or a negation) that
 * can hold in its region, in rule order. The first terminal entry that holds, over
 * all trees, decides; then the count entries that hold in the same leaves, before it,
 * are counted (leaves with count entries are flagged).
 *
 * Sizes are compile-time constants: NG trees, NN nodes, NE leaf entries, DEPTH
 * levels, LEAFMAX the longest leaf (the scan's bound).
 */

struct node {
	__u8 field;  /* 0..4, or 0xff: a leaf */
	__u8 shift;
	__u16 kbits; /* leaf: 1 if it holds count entries */
	__u32 a;     /* internal: first child node; leaf: first entry */
	__u32 b;     /* leaf: number of entries */
	__u32 min_rule; /* the smallest rule index below this node */
	__u64 base;  /* internal: the block's first value */
};

struct entry {
	__u64 r[10]; /* lo0 hi0 lo1 hi1 ... lo4 hi4 */
	__u32 rule;
	__u32 count;
};

ARRAY(roots, NG, __u32);
ARRAY(nodes, NN, struct node);
ARRAY(entries, NE, struct entry);

PFC_FN int holds(const struct entry *e, const __u64 v[8])
{
	const __u64 *r = e->r;

	return v[0] >= r[0] && v[0] <= r[1] && v[1] >= r[2] && v[1] <= r[3] &&
	       v[2] >= r[4] && v[2] <= r[5] && v[3] >= r[6] && v[3] <= r[7] &&
	       v[4] >= r[8] && v[4] <= r[9];
}

/* The leaf of tree g the frame falls in, or 0 when nothing there can hold before
 * rule `best`. */
PFC_FN struct node *leaf_of(__u32 g, const __u64 v[8], __u32 best)
{
	__u32 *root = bpf_map_lookup_elem(&roots, &g);

	if (!root)
		return 0;
	__u32 id = *root;

	for (int d = 0; d < DEPTH; d++) {
		struct node *n = bpf_map_lookup_elem(&nodes, &id);

		if (!n || n->min_rule >= best)
			return 0;
		if (n->field == 0xff)
			return n;
		__u64 off = v[n->field & 7] - n->base;
		__u32 shift = n->shift & 63;

		if (off >> shift >= (1ULL << (n->kbits & 31)))
			return 0; /* outside the block: nothing here holds */
		id = n->a + (off >> shift);
	}
	return 0;
}

/* The first terminal entry of the leaf that holds and is before `best`. */
PFC_FN __u32 first_terminal(const struct node *n, const __u64 v[8], __u32 best)
{
	__u32 first = n->a, len = n->b;

	for (__u32 i = 0; i < LEAFMAX; i++) {
		if (i >= len)
			break;
		__u32 at = first + i;
		struct entry *e = bpf_map_lookup_elem(&entries, &at);

		if (!e || e->rule >= best)
			break;
		if (!e->count && holds(e, v))
			return e->rule;
	}
	return best;
}

#ifdef PFC_COUNT
PFC_FN void count_leaf(const struct node *n, const __u64 v[8], __u32 best, __u64 nbytes)
{
	__u32 first = n->a, len = n->b;

	for (__u32 i = 0; i < LEAFMAX; i++) {
		if (i >= len)
			break;
		__u32 at = first + i;
		struct entry *e = bpf_map_lookup_elem(&entries, &at);

		if (!e || e->rule >= best)
			break;
		if (e->count && holds(e, v))
			pfc_count(e->rule, nbytes);
	}
}
#endif

PFC_FN __u32 dtree(struct pfc_key *k)
{
	__u64 v[8] = {
		k->fp,
		(k->have & 1) ? k->src : (1ULL << 32),
		(k->have & 2) ? k->dst : (1ULL << 32),
		k->sport,
		k->dport,
	};
	struct node *leaf[NG];
	__u32 best = ACT_DEFAULT;

	for (__u32 g = 0; g < NG; g++) {
		leaf[g] = leaf_of(g, v, best);
		if (leaf[g])
			best = first_terminal(leaf[g], v, best);
	}
#ifdef PFC_COUNT
	for (__u32 g = 0; g < NG; g++)
		if (leaf[g] && leaf[g]->kbits)
			count_leaf(leaf[g], v, best, k->nbytes);
#endif
	return best;
}

PFC_PROGRAM(dtree)
