/* SPDX-License-Identifier: GPL-2.0
 * Decision tree (HiCuts) over the key of common.h, "absent" a value of each field's
 * extended domain (dtree.py): walk from node 0, each internal node cuts one field
 * into 2^kbits parts (child = kids[first + ((value >> shift) & (2^kbits - 1))]); the
 * leaf lists the entries (one box per rule, or a few for a rule with lists or a
 * negation) that can hold in its region, in rule order: count the count rules that
 * hold until the first terminal rule that holds, which decides.
 *
 * Sizes are compile-time constants: NN nodes, NK child slots, NE leaf entries, DEPTH
 * levels, LEAFMAX the longest leaf (the scan's bound).
 */

struct node {
	__u8 field;  /* 0..4, or 0xff: a leaf */
	__u8 shift;
	__u16 kbits;
	__u32 a;     /* internal: first child slot; leaf: first entry */
	__u32 b;     /* leaf: number of entries */
};

struct entry {
	__u64 lo[5], hi[5]; /* interleaved in dtree.py: lo0 hi0 lo1 hi1 ... */
	__u32 rule;
	__u32 count;
};

#define ARRAY(name, n, val)						\
	struct {							\
		__uint(type, BPF_MAP_TYPE_ARRAY);			\
		__uint(max_entries, n);					\
		__type(key, __u32);					\
		__type(value, val);					\
	} name SEC(".maps")

ARRAY(nodes, NN, struct node);
ARRAY(kids, NK, __u32);
ARRAY(entries, NE, struct entry);

PFC_FN int holds(const struct entry *e, const __u64 v[8])
{
	const __u64 *r = e->lo; /* lo0 hi0 lo1 hi1 ... (struct laid out as 10 u64s) */

	return v[0] >= r[0] && v[0] <= r[1] && v[1] >= r[2] && v[1] <= r[3] &&
	       v[2] >= r[4] && v[2] <= r[5] && v[3] >= r[6] && v[3] <= r[7] &&
	       v[4] >= r[8] && v[4] <= r[9];
}

PFC_FN __u32 dtree(struct pfc_key *k)
{
	__u64 v[8] = {
		k->fp,
		(k->have & 1) ? k->src : (1ULL << 32),
		(k->have & 2) ? k->dst : (1ULL << 32),
		k->sport,
		k->dport,
	};
	__u32 id = 0;
	struct node *n = 0;

	for (int d = 0; d < DEPTH; d++) {
		n = bpf_map_lookup_elem(&nodes, &id);
		if (!n)
			return ACT_ERROR;
		if (n->field == 0xff)
			break;
		__u32 slot = n->a + ((v[n->field & 7] >> (n->shift & 63)) &
				     ((1ULL << (n->kbits & 31)) - 1));
		__u32 *kid = bpf_map_lookup_elem(&kids, &slot);

		if (!kid)
			return ACT_ERROR;
		id = *kid;
	}
	if (!n || n->field != 0xff)
		return ACT_ERROR;
	__u32 first = n->a, len = n->b;

	for (__u32 i = 0; i < LEAFMAX; i++) {
		if (i >= len)
			break;
		__u32 at = first + i;
		struct entry *e = bpf_map_lookup_elem(&entries, &at);

		if (!e)
			return ACT_ERROR;
		if (!holds(e, v))
			continue;
#ifdef PFC_COUNT
		if (e->count) {
			pfc_count(e->rule, k->nbytes);
			continue;
		}
#endif
		return e->rule;
	}
	return ACT_DEFAULT;
}

PFC_PROGRAM(dtree)
