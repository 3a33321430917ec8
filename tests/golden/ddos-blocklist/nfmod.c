// SPDX-License-Identifier: GPL-2.0
/*
 * pfc_nf: compiled by pfc for netfilter hook prerouting (priority -300),
 * IPv4 and IPv6, from
 * examples/ddos-blocklist.pf
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

#define PFC_SLOTS 3
#define PFC_DEFAULT 2

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
	"1",
	"default",
};

static const struct pfc_range pfc_nets0[] = {
	{ 0x010e0000, 0x010effff },
	{ 0x025c1d00, 0x025c1dff },
	{ 0x035ff87c, 0x035ff87c },
	{ 0x03b12300, 0x03b123ff },
	{ 0x048d0400, 0x048d07ff },
	{ 0x0497a31d, 0x0497a31d },
	{ 0x053f9f00, 0x053f9fff },
	{ 0x05b2bee4, 0x05b2bee4 },
	{ 0x070ecc00, 0x070eccff },
	{ 0x07555000, 0x075550ff },
	{ 0x078c0000, 0x078cffff },
	{ 0x07f59400, 0x07f594ff },
	{ 0x085f0c00, 0x085f0fff },
	{ 0x08640000, 0x0864ffff },
	{ 0x09be3b07, 0x09be3b07 },
	{ 0x0a660000, 0x0a66ffff },
	{ 0x0a994f46, 0x0a994f46 },
	{ 0x0c62fb05, 0x0c62fb05 },
	{ 0x0c94a014, 0x0c94a014 },
	{ 0x0f66c6be, 0x0f66c6be },
	{ 0x0fabf949, 0x0fabf949 },
	{ 0x0fc0e000, 0x0fc0e3ff },
	{ 0x0fe42d4c, 0x0fe42d4c },
	{ 0x105e3400, 0x105e37ff },
	{ 0x11481d00, 0x11481dff },
	{ 0x1175a500, 0x1175a5ff },
	{ 0x13cc86e3, 0x13cc86e3 },
	{ 0x14fc42ee, 0x14fc42ee },
	{ 0x15388e02, 0x15388e02 },
	{ 0x1621f652, 0x1621f652 },
	{ 0x168e9c00, 0x168e9cff },
	{ 0x16938400, 0x169387ff },
	{ 0x169d6800, 0x169d6bff },
	{ 0x16e5bc12, 0x16e5bc12 },
	{ 0x17f44800, 0x17f448ff },
	{ 0x18d60000, 0x18d6ffff },
	{ 0x1907df00, 0x1907dfff },
	{ 0x1978c0bf, 0x1978c0bf },
	{ 0x19afac00, 0x19afafff },
	{ 0x19bee074, 0x19bee074 },
	{ 0x1af90000, 0x1af900ff },
	{ 0x1c2b9800, 0x1c2b9bff },
	{ 0x1c7e243a, 0x1c7e243a },
	{ 0x1ca98d07, 0x1ca98d07 },
	{ 0x1d14df00, 0x1d14dfff },
	{ 0x1d593a00, 0x1d593aff },
	{ 0x1edfe2b6, 0x1edfe2b6 },
	{ 0x1f47caa6, 0x1f47caa6 },
	{ 0x1f7ea400, 0x1f7ea4ff },
	{ 0x20120000, 0x2012ffff },
	{ 0x212cb100, 0x212cb1ff },
	{ 0x2163e843, 0x2163e843 },
	{ 0x21c30000, 0x21c3ffff },
	{ 0x220f4de3, 0x220f4de3 },
	{ 0x226ef200, 0x226ef2ff },
	{ 0x229a09b4, 0x229a09b4 },
	{ 0x231ba4c4, 0x231ba4c4 },
	{ 0x23a60b00, 0x23a60bff },
	{ 0x23ff7c00, 0x23ff7cff },
	{ 0x2451628d, 0x2451628d },
	{ 0x24a1de00, 0x24a1deff },
	{ 0x25114200, 0x251142ff },
	{ 0x25ba1cef, 0x25ba1cef },
	{ 0x26490c72, 0x26490c72 },
	{ 0x26770000, 0x2677ffff },
	{ 0x275c0000, 0x275cffff },
	{ 0x27e8ffda, 0x27e8ffda },
	{ 0x285e0000, 0x285effff },
	{ 0x28655f91, 0x28655f91 },
	{ 0x289e6933, 0x289e6933 },
	{ 0x28af4100, 0x28af41ff },
	{ 0x29945000, 0x299453ff },
	{ 0x2a0f5d0f, 0x2a0f5d0f },
	{ 0x2a50e900, 0x2a50e9ff },
	{ 0x2a80f7bd, 0x2a80f7bd },
	{ 0x2a86a300, 0x2a86a3ff },
	{ 0x2aef7ab1, 0x2aef7ab1 },
	{ 0x2af7d734, 0x2af7d734 },
	{ 0x2c155455, 0x2c155455 },
	{ 0x2c186e00, 0x2c186eff },
	{ 0x2cd8af21, 0x2cd8af21 },
	{ 0x2db8ce00, 0x2db8ceff },
	{ 0x2e3f0bf3, 0x2e3f0bf3 },
	{ 0x2e4d6600, 0x2e4d66ff },
	{ 0x2efbc700, 0x2efbc7ff },
	{ 0x2ff7b374, 0x2ff7b374 },
	{ 0x30ec4200, 0x30ec42ff },
	{ 0x311a5d12, 0x311a5d12 },
	{ 0x338bf8ae, 0x338bf8ae },
	{ 0x33e03c00, 0x33e03cff },
	{ 0x340e3777, 0x340e3777 },
	{ 0x36d14800, 0x36d14bff },
	{ 0x37746700, 0x377467ff },
	{ 0x377f02fa, 0x377f02fa },
	{ 0x395d1c00, 0x395d1cff },
	{ 0x39ca6b4a, 0x39ca6b4a },
	{ 0x3a292c00, 0x3a292fff },
	{ 0x3b6ef8d3, 0x3b6ef8d3 },
	{ 0x3c38c237, 0x3c38c237 },
	{ 0x3cfa9e00, 0x3cfa9eff },
	{ 0x3d37bb01, 0x3d37bb01 },
	{ 0x3e432800, 0x3e432bff },
	{ 0x3e6c51e3, 0x3e6c51e3 },
	{ 0x3eab50b8, 0x3eab50b8 },
	{ 0x3eba1795, 0x3eba1795 },
	{ 0x40724926, 0x40724926 },
	{ 0x41632900, 0x416329ff },
	{ 0x41fc0000, 0x41fcffff },
	{ 0x4245ff00, 0x4245ff00 },
	{ 0x425e0000, 0x425effff },
	{ 0x4291590c, 0x4291590c },
	{ 0x43960000, 0x4396ffff },
	{ 0x447ccafb, 0x447ccafb },
	{ 0x44eaf675, 0x44eaf675 },
	{ 0x4595c000, 0x4595c0ff },
	{ 0x46580800, 0x46580bff },
	{ 0x470cec00, 0x470cefff },
	{ 0x47db73ab, 0x47db73ab },
	{ 0x48c62400, 0x48c624ff },
	{ 0x4aa00000, 0x4aa0ffff },
	{ 0x4aa40000, 0x4aa4ffff },
	{ 0x4b205268, 0x4b205268 },
	{ 0x4b815800, 0x4b8158ff },
	{ 0x4c5c1a00, 0x4c5c1aff },
	{ 0x4c983f00, 0x4c983fff },
	{ 0x4d046400, 0x4d0467ff },
	{ 0x4df74765, 0x4df74765 },
	{ 0x4e7a6404, 0x4e7a6404 },
	{ 0x4ed75f67, 0x4ed75f67 },
	{ 0x50070000, 0x5007ffff },
	{ 0x5056d48f, 0x5056d48f },
	{ 0x5077abb9, 0x5077abb9 },
	{ 0x513d0000, 0x513dffff },
	{ 0x51931ba9, 0x51931ba9 },
	{ 0x51a20000, 0x51a2ffff },
	{ 0x52100000, 0x5210ffff },
	{ 0x525c0000, 0x525cffff },
	{ 0x52a248ee, 0x52a248ee },
	{ 0x52edc800, 0x52edc8ff },
	{ 0x539c0000, 0x539cffff },
	{ 0x54870000, 0x5487ffff },
	{ 0x549cf42a, 0x549cf42a },
	{ 0x54b87500, 0x54b875ff },
	{ 0x54e81500, 0x54e815ff },
	{ 0x552a6174, 0x552a6174 },
	{ 0x55379b74, 0x55379b74 },
	{ 0x5579cbec, 0x5579cbec },
	{ 0x56677600, 0x566776ff },
	{ 0x573af47e, 0x573af47e },
	{ 0x57b817fe, 0x57b817fe },
	{ 0x5838f700, 0x5838f7ff },
	{ 0x58f36c00, 0x58f36cff },
	{ 0x58fbeeeb, 0x58fbeeeb },
	{ 0x5a090000, 0x5a09ffff },
	{ 0x5b091fd6, 0x5b091fd6 },
	{ 0x5b5fea00, 0x5b5feaff },
	{ 0x5c20f000, 0x5c20f3ff },
	{ 0x5c4c8000, 0x5c4c83ff },
	{ 0x5c72fcc5, 0x5c72fcc5 },
	{ 0x5d24c1ae, 0x5d24c1ae },
	{ 0x5d2e2826, 0x5d2e2826 },
	{ 0x5e110000, 0x5e11ffff },
	{ 0x5e1e7000, 0x5e1e73ff },
	{ 0x606f6b00, 0x606f6bff },
	{ 0x60ee1300, 0x60ee13ff },
	{ 0x6141f10e, 0x6141f10e },
	{ 0x62963a00, 0x62963aff },
	{ 0x63186f00, 0x63186fff },
	{ 0x6354c000, 0x6354c3ff },
	{ 0x647c119a, 0x647c119a },
	{ 0x64989a00, 0x64989aff },
	{ 0x64d52b00, 0x64d52bff },
	{ 0x64f1bbbc, 0x64f1bbbc },
	{ 0x65adbc00, 0x65adbfff },
	{ 0x66ed0d00, 0x66ed0dff },
	{ 0x67160000, 0x6716ffff },
	{ 0x67426014, 0x67426014 },
	{ 0x682f8d00, 0x682f8dff },
	{ 0x68790800, 0x687908ff },
	{ 0x6972d96b, 0x6972d96b },
	{ 0x69e21400, 0x69e217ff },
	{ 0x6af60000, 0x6af6ffff },
	{ 0x6b1e860d, 0x6b1e860d },
	{ 0x6bfa2b00, 0x6bfa2bff },
	{ 0x6d167229, 0x6d167229 },
	{ 0x6d32fb00, 0x6d32fbff },
	{ 0x6d3f4000, 0x6d3f43ff },
	{ 0x6da7dc00, 0x6da7dcff },
	{ 0x6de40400, 0x6de407ff },
	{ 0x6de90000, 0x6de9ffff },
	{ 0x6dff0000, 0x6dffffff },
	{ 0x6e1675c1, 0x6e1675c1 },
	{ 0x6ed229a4, 0x6ed229a4 },
	{ 0x6f696300, 0x6f6963ff },
	{ 0x6fbea600, 0x6fbea6ff },
	{ 0x6fdd77d8, 0x6fdd77d8 },
	{ 0x7000e700, 0x7000e7ff },
	{ 0x713e5300, 0x713e53ff },
	{ 0x721166cd, 0x721166cd },
	{ 0x72d02f51, 0x72d02f51 },
	{ 0x741c9452, 0x741c9452 },
	{ 0x743c6600, 0x743c66ff },
	{ 0x74aa881e, 0x74aa881e },
	{ 0x74f29c6a, 0x74f29c6a },
	{ 0x76750c2b, 0x76750c2b },
	{ 0x76920000, 0x7692ffff },
	{ 0x769a5e00, 0x769a5eff },
	{ 0x77a5920c, 0x77a5920c },
	{ 0x77c30000, 0x77c3ffff },
	{ 0x78342c00, 0x78342fff },
	{ 0x7871f894, 0x7871f894 },
	{ 0x78760000, 0x7876ffff },
	{ 0x79549014, 0x79549014 },
	{ 0x7975a42b, 0x7975a42b },
	{ 0x79845e00, 0x79845eff },
	{ 0x7988cb20, 0x7988cb20 },
	{ 0x7a1572d5, 0x7a1572d5 },
	{ 0x7c0dc700, 0x7c0dc7ff },
	{ 0x7c6bc3c6, 0x7c6bc3c6 },
	{ 0x7c8b7da0, 0x7c8b7da0 },
	{ 0x7cdcfd55, 0x7cdcfd55 },
	{ 0x7e3e7a00, 0x7e3e7aff },
	{ 0x80988000, 0x809880ff },
	{ 0x80ae0a6b, 0x80ae0a6b },
	{ 0x81a4df5a, 0x81a4df5a },
	{ 0x82b24900, 0x82b249ff },
	{ 0x82f8c000, 0x82f8c3ff },
	{ 0x833e3122, 0x833e3122 },
	{ 0x8450a73f, 0x8450a73f },
	{ 0x8480a16b, 0x8480a16b },
	{ 0x84bb5900, 0x84bb59ff },
	{ 0x84d33500, 0x84d335ff },
	{ 0x85f30000, 0x85f3ffff },
	{ 0x8620bf0c, 0x8620bf0c },
	{ 0x87f9fa00, 0x87f9faff },
	{ 0x882a8800, 0x882a8bff },
	{ 0x8939cef1, 0x8939cef1 },
	{ 0x895f376a, 0x895f376a },
	{ 0x8af95cc2, 0x8af95cc2 },
	{ 0x8afaa7fb, 0x8afaa7fb },
	{ 0x8b023907, 0x8b023907 },
	{ 0x8b525b00, 0x8b525bff },
	{ 0x8b880000, 0x8b88ffff },
	{ 0x8bcaca00, 0x8bcacaff },
	{ 0x8bf1654b, 0x8bf1654b },
	{ 0x8c8cc800, 0x8c8cc8ff },
	{ 0x8cb9c912, 0x8cb9c912 },
	{ 0x8ccb4528, 0x8ccb4528 },
	{ 0x8d1f6000, 0x8d1f63ff },
	{ 0x8d530000, 0x8d53ffff },
	{ 0x8d7d0000, 0x8d7dffff },
	{ 0x8dbb6000, 0x8dbb60ff },
	{ 0x8ddc06ee, 0x8ddc06ee },
	{ 0x8e903c66, 0x8e903c66 },
	{ 0x8f3b5710, 0x8f3b5710 },
	{ 0x8f48e488, 0x8f48e488 },
	{ 0x8fce78b0, 0x8fce78b0 },
	{ 0x90157900, 0x901579ff },
	{ 0x904ec800, 0x904ecbff },
	{ 0x90c46000, 0x90c460ff },
	{ 0x9115b700, 0x9115b7ff },
	{ 0x91620000, 0x9162ffff },
	{ 0x92e0b500, 0x92e0b5ff },
	{ 0x9397d61b, 0x9397d61b },
	{ 0x940b0000, 0x940bffff },
	{ 0x94550840, 0x94550840 },
	{ 0x95002427, 0x95002427 },
	{ 0x95362800, 0x95362bff },
	{ 0x95a4d29c, 0x95a4d29c },
	{ 0x95ed1f68, 0x95ed1f68 },
	{ 0x96d73700, 0x96d737ff },
	{ 0x99140000, 0x9914ffff },
	{ 0x99d1e300, 0x99d1e3ff },
	{ 0x9a1f7700, 0x9a1f77ff },
	{ 0x9a7898f0, 0x9a7898f0 },
	{ 0x9c2831e1, 0x9c2831e1 },
	{ 0x9c751151, 0x9c751151 },
	{ 0x9c97d72a, 0x9c97d72a },
	{ 0x9cfeb0c4, 0x9cfeb0c4 },
	{ 0x9d31b930, 0x9d31b930 },
	{ 0x9e3c7dec, 0x9e3c7dec },
	{ 0x9ef0bd00, 0x9ef0bdff },
	{ 0x9ffebfda, 0x9ffebfda },
	{ 0xa0718100, 0xa07181ff },
	{ 0xa16d0000, 0xa16dffff },
	{ 0xa17481bd, 0xa17481bd },
	{ 0xa1bb4fcd, 0xa1bb4fcd },
	{ 0xa1c5b000, 0xa1c5b3ff },
	{ 0xa26b28b1, 0xa26b28b1 },
	{ 0xa318dc00, 0xa318dfff },
	{ 0xa3e29977, 0xa3e29977 },
	{ 0xa49d2086, 0xa49d2086 },
	{ 0xa64b3b00, 0xa64b3bff },
	{ 0xa65c9c8e, 0xa65c9c8e },
	{ 0xa6721c00, 0xa6721cff },
	{ 0xa6b0e526, 0xa6b0e526 },
	{ 0xa6c58c0b, 0xa6c58c0b },
	{ 0xa6f21800, 0xa6f218ff },
	{ 0xa7745f00, 0xa7745fff },
	{ 0xaa1a5600, 0xaa1a56ff },
	{ 0xaa221900, 0xaa2219ff },
	{ 0xaa5c2c00, 0xaa5c2fff },
	{ 0xaa600000, 0xaa60ffff },
	{ 0xaa9fb266, 0xaa9fb266 },
	{ 0xac215100, 0xac2151ff },
	{ 0xac266981, 0xac266981 },
	{ 0xac74fe00, 0xac74feff },
	{ 0xac994360, 0xac994360 },
	{ 0xad92ec00, 0xad92efff },
	{ 0xad9f0000, 0xad9fffff },
	{ 0xae9ea62a, 0xae9ea62a },
	{ 0xaeb21095, 0xaeb21095 },
	{ 0xaede0000, 0xaedeffff },
	{ 0xaeec6f00, 0xaeec6fff },
	{ 0xaf0fa718, 0xaf0fa718 },
	{ 0xaffc0000, 0xaffcffff },
	{ 0xb03e7dd9, 0xb03e7dd9 },
	{ 0xb0bc1100, 0xb0bc11ff },
	{ 0xb193e3b4, 0xb193e3b4 },
	{ 0xb267344f, 0xb267344f },
	{ 0xb2ff3800, 0xb2ff38ff },
	{ 0xb564c554, 0xb564c554 },
	{ 0xb57da864, 0xb57da864 },
	{ 0xb59cb000, 0xb59cb0ff },
	{ 0xb60f9e00, 0xb60f9eff },
	{ 0xb73a6bc0, 0xb73a6bc0 },
	{ 0xb7eaff00, 0xb7eaffff },
	{ 0xb8a17400, 0xb8a177ff },
	{ 0xb99aa400, 0xb99aa7ff },
	{ 0xb9bfe77a, 0xb9bfe77a },
	{ 0xb9d3b186, 0xb9d3b186 },
	{ 0xb9ec796e, 0xb9ec796e },
	{ 0xba1ddd00, 0xba1dddff },
	{ 0xba74a4a0, 0xba74a4a0 },
	{ 0xbad3fb00, 0xbad3fbff },
	{ 0xbb8ed768, 0xbb8ed768 },
	{ 0xbc8a1800, 0xbc8a1bff },
	{ 0xbdc1a936, 0xbdc1a936 },
	{ 0xbfc4f000, 0xbfc4f3ff },
	{ 0xbff7e268, 0xbff7e268 },
	{ 0xc03b9167, 0xc03b9167 },
	{ 0xc05f8400, 0xc05f87ff },
	{ 0xc1430000, 0xc143ffff },
	{ 0xc1590851, 0xc1590851 },
	{ 0xc1799100, 0xc17991ff },
	{ 0xc3425f00, 0xc3425fff },
	{ 0xc3553600, 0xc35536ff },
	{ 0xc3630600, 0xc36306ff },
	{ 0xc50d31b5, 0xc50d31b5 },
	{ 0xc60029ab, 0xc60029ab },
	{ 0xc7605afb, 0xc7605afb },
	{ 0xc7990000, 0xc799ffff },
	{ 0xc8287700, 0xc82877ff },
	{ 0xc86f910c, 0xc86f910c },
	{ 0xc89f0652, 0xc89f0652 },
	{ 0xc8be5400, 0xc8be57ff },
	{ 0xc98b0000, 0xc98bffff },
	{ 0xca108f89, 0xca108f89 },
	{ 0xcae39600, 0xcae396ff },
	{ 0xcb482b40, 0xcb482b40 },
	{ 0xcb6e0000, 0xcb6effff },
	{ 0xcbaba200, 0xcbaba2ff },
	{ 0xcc9d2149, 0xcc9d2149 },
	{ 0xce463d49, 0xce463d49 },
	{ 0xceb50000, 0xceb5ffff },
	{ 0xcf0d8c00, 0xcf0d8fff },
	{ 0xcf6e0000, 0xcf6effff },
	{ 0xcfd66800, 0xcfd66bff },
	{ 0xcff40000, 0xcff4ffff },
	{ 0xd0d8c364, 0xd0d8c364 },
	{ 0xd0e7a42a, 0xd0e7a42a },
	{ 0xd1522c00, 0xd1522fff },
	{ 0xd1940000, 0xd194ffff },
	{ 0xd19fe000, 0xd19fe3ff },
	{ 0xd1ef5c36, 0xd1ef5c36 },
	{ 0xd21745ad, 0xd21745ad },
	{ 0xd21ad400, 0xd21ad4ff },
	{ 0xd2711cbd, 0xd2711cbd },
	{ 0xd2d503ae, 0xd2d503ae },
	{ 0xd521f500, 0xd521f5ff },
	{ 0xd5d6d200, 0xd5d6d2ff },
	{ 0xd63a0000, 0xd63affff },
	{ 0xd673e700, 0xd673e7ff },
	{ 0xd7ecf6fd, 0xd7ecf6fd },
	{ 0xd8570000, 0xd857ffff },
	{ 0xd8879c00, 0xd8879cff },
	{ 0xd92fb000, 0xd92fb3ff },
	{ 0xd9b6dd5b, 0xd9b6dd5b },
	{ 0xd9e90000, 0xd9e9ffff },
	{ 0xda0e013a, 0xda0e013a },
	{ 0xda814559, 0xda814559 },
	{ 0xda8d4000, 0xda8d40ff },
	{ 0xdaf00000, 0xdaf0ffff },
	{ 0xdb617800, 0xdb6178ff },
	{ 0xdd7e3500, 0xdd7e35ff },
	{ 0xdde937e4, 0xdde937e4 },
	{ 0xded28400, 0xded284ff },
	{ 0xdf0279e1, 0xdf0279e1 },
	{ 0xdf384261, 0xdf384261 },
	{ 0xdf7c8fde, 0xdf7c8fde },
};

static const struct pfc_range pfc_nets1[] = {
	{ 0xc0a83204, 0xc0a83204 },
};

static const struct pfc_net6 pfc_nets6_0[] = {
	{ 0x20010db802700135ULL, 0x0000000000007a00ULL,
	  0x20010db802700135ULL, 0x0000000000007a00ULL },
	{ 0x20010db804ab0000ULL, 0x0000000000000000ULL,
	  0x20010db804abffffULL, 0xffffffffffffffffULL },
	{ 0x20010db8059f9600ULL, 0x0000000000000000ULL,
	  0x20010db8059f96ffULL, 0xffffffffffffffffULL },
	{ 0x20010db807ce0000ULL, 0x0000000000000000ULL,
	  0x20010db807ceffffULL, 0xffffffffffffffffULL },
	{ 0x20010db80987ec0fULL, 0x000000000000149eULL,
	  0x20010db80987ec0fULL, 0x000000000000149eULL },
	{ 0x20010db80ab83474ULL, 0x00000000000011fbULL,
	  0x20010db80ab83474ULL, 0x00000000000011fbULL },
	{ 0x20010db81bda22cfULL, 0x00000000000062e0ULL,
	  0x20010db81bda22cfULL, 0x00000000000062e0ULL },
	{ 0x20010db822620000ULL, 0x0000000000000000ULL,
	  0x20010db82262ffffULL, 0xffffffffffffffffULL },
	{ 0x20010db82c102d7aULL, 0x000000000000341dULL,
	  0x20010db82c102d7aULL, 0x000000000000341dULL },
	{ 0x20010db838fbc000ULL, 0x0000000000000000ULL,
	  0x20010db838fbc0ffULL, 0xffffffffffffffffULL },
	{ 0x20010db8644f0000ULL, 0x0000000000000000ULL,
	  0x20010db8644fffffULL, 0xffffffffffffffffULL },
	{ 0x20010db86eff8c00ULL, 0x0000000000000000ULL,
	  0x20010db86eff8cffULL, 0xffffffffffffffffULL },
	{ 0x20010db874bd84f8ULL, 0x000000000000609dULL,
	  0x20010db874bd84f8ULL, 0x000000000000609dULL },
	{ 0x20010db875cfef00ULL, 0x0000000000000000ULL,
	  0x20010db875cfefffULL, 0xffffffffffffffffULL },
	{ 0x20010db876035200ULL, 0x0000000000000000ULL,
	  0x20010db8760352ffULL, 0xffffffffffffffffULL },
	{ 0x20010db888e68200ULL, 0x0000000000000000ULL,
	  0x20010db888e682ffULL, 0xffffffffffffffffULL },
	{ 0x20010db88bcd0aacULL, 0x000000000000d371ULL,
	  0x20010db88bcd0aacULL, 0x000000000000d371ULL },
	{ 0x20010db88f68dc00ULL, 0x0000000000000000ULL,
	  0x20010db88f68dcffULL, 0xffffffffffffffffULL },
	{ 0x20010db89b4a0000ULL, 0x0000000000000000ULL,
	  0x20010db89b4affffULL, 0xffffffffffffffffULL },
	{ 0x20010db89d0413deULL, 0x0000000000007a87ULL,
	  0x20010db89d0413deULL, 0x0000000000007a87ULL },
	{ 0x20010db8a20f0000ULL, 0x0000000000000000ULL,
	  0x20010db8a20fffffULL, 0xffffffffffffffffULL },
	{ 0x20010db8a5eff5d0ULL, 0x000000000000e551ULL,
	  0x20010db8a5eff5d0ULL, 0x000000000000e551ULL },
	{ 0x20010db8b01a0000ULL, 0x0000000000000000ULL,
	  0x20010db8b01affffULL, 0xffffffffffffffffULL },
	{ 0x20010db8b6fd8e22ULL, 0x000000000000add4ULL,
	  0x20010db8b6fd8e22ULL, 0x000000000000add4ULL },
	{ 0x20010db8bd320000ULL, 0x0000000000000000ULL,
	  0x20010db8bd32ffffULL, 0xffffffffffffffffULL },
	{ 0x20010db8bd37cd00ULL, 0x0000000000000000ULL,
	  0x20010db8bd37cdffULL, 0xffffffffffffffffULL },
	{ 0x20010db8bfb90000ULL, 0x0000000000000000ULL,
	  0x20010db8bfb9ffffULL, 0xffffffffffffffffULL },
	{ 0x20010db8c18caf00ULL, 0x0000000000000000ULL,
	  0x20010db8c18cafffULL, 0xffffffffffffffffULL },
	{ 0x20010db8ca197100ULL, 0x0000000000000000ULL,
	  0x20010db8ca1971ffULL, 0xffffffffffffffffULL },
	{ 0x20010db8cb17c73fULL, 0x00000000000024dcULL,
	  0x20010db8cb17c73fULL, 0x00000000000024dcULL },
	{ 0x20010db8ccd94400ULL, 0x0000000000000000ULL,
	  0x20010db8ccd944ffULL, 0xffffffffffffffffULL },
	{ 0x20010db8d0470f00ULL, 0x0000000000000000ULL,
	  0x20010db8d0470fffULL, 0xffffffffffffffffULL },
	{ 0x20010db8d22a0000ULL, 0x0000000000000000ULL,
	  0x20010db8d22affffULL, 0xffffffffffffffffULL },
	{ 0x20010db8d728f600ULL, 0x0000000000000000ULL,
	  0x20010db8d728f6ffULL, 0xffffffffffffffffULL },
	{ 0x20010db8e0f30000ULL, 0x0000000000000000ULL,
	  0x20010db8e0f3ffffULL, 0xffffffffffffffffULL },
	{ 0x20010db8ec2cfc18ULL, 0x00000000000073d2ULL,
	  0x20010db8ec2cfc18ULL, 0x00000000000073d2ULL },
	{ 0x20010db8ee444377ULL, 0x000000000000b2bcULL,
	  0x20010db8ee444377ULL, 0x000000000000b2bcULL },
	{ 0x20010db8ef642b5fULL, 0x000000000000f2abULL,
	  0x20010db8ef642b5fULL, 0x000000000000f2abULL },
	{ 0x20010db8f7a30000ULL, 0x0000000000000000ULL,
	  0x20010db8f7a3ffffULL, 0xffffffffffffffffULL },
	{ 0x20010db8fc150000ULL, 0x0000000000000000ULL,
	  0x20010db8fc15ffffULL, 0xffffffffffffffffULL },
};

static const struct pfc_set pfc_set0 = {
	.v4 = pfc_nets0,
	.n4 = ARRAY_SIZE(pfc_nets0),
	.v6 = pfc_nets6_0,
	.n6 = ARRAY_SIZE(pfc_nets6_0),
};

static const struct pfc_set pfc_set1 = {
	.v4 = pfc_nets1,
	.n4 = ARRAY_SIZE(pfc_nets1),
	.v6 = NULL,
	.n6 = 0,
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

/* rule 0, line 9: drop src $flood */
static bool pfc_rule_0(const struct sk_buff *skb, const struct pfc_pkt *p)
{
	return pfc_addr_in(skb, p, 12, 8, &pfc_set0, false);
}

/* rule 1, line 10: drop udp dst 192.168.50.4/32 dport 0 */
static bool pfc_rule_1(const struct sk_buff *skb, const struct pfc_pkt *p)
{
	u32 v1;

	return p->version == 4 &&
	       p->proto == 17 &&
	       pfc_addr_in(skb, p, 16, 24, &pfc_set1, false) &&
	       (pfc_l4_field(skb, p, 17, 2, 2, &v1) && (v1 == 0));
}

static unsigned int pfc_hook(void *priv, struct sk_buff *skb,
			     const struct nf_hook_state *state)
{
	struct pfc_pkt p;

	pfc_parse(skb, state->pf, &p);
	if (pfc_rule_0(skb, &p)) {
		pfc_count(0, p.len);
		return NF_DROP;
	}
	if (pfc_rule_1(skb, &p)) {
		pfc_count(1, p.len);
		return NF_DROP;
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
MODULE_DESCRIPTION("pfc policy ddos-blocklist at netfilter prerouting");
