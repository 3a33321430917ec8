/* pfc bench's user-space filter (seed 000 section 5.1): every frame of a device handed
 * to this process through an AF_PACKET TPACKET_V3 ring, the policy's classic BPF run
 * here by libpcap's bpf_filter(), optionally with a connection table (--ct).
 *
 *   pfc-userspace IFNAME PROGRAM COUNTERS [--ct] [--verdicts]
 *
 * PROGRAM: "N" then N lines "code jt jf k" (tcpdump -ddd). COUNTERS: a file of
 * NCOUNTERS u64 that this process maps shared and keeps current (frames, passed, dropped,
 * ring drops, flows, packets tracked); the bench reads it while traffic runs. --verdicts:
 * one line per frame on stdout, "P " or "D " and the frame in hex (tests only). Writes
 * "ready" on stderr once the ring is bound; ends at SIGTERM or SIGINT.
 *
 * The connection table: the 5-tuple of TCP/UDP over IPv4/IPv6 (no extension headers,
 * not fragments), both directions one entry, open addressing over FLOWS slots; per
 * entry packets, bytes and the last time seen; a full probe sequence (PROBES slots)
 * evicts its least recently seen entry; C_FLOWS counts the entries in use. It tracks,
 * as the kernel's conntrack does on seed 000's path: the
 * verdict of every frame is still the program's (so it agrees with pfc's interpreter). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

struct insn { uint16_t code; uint8_t jt, jf; uint32_t k; };  /* libpcap's bpf_insn */
extern unsigned int bpf_filter(const struct insn *, const unsigned char *, unsigned int,
                               unsigned int);

enum { C_FRAMES, C_PASSED, C_DROPPED, C_RING_DROPS, C_FLOWS, C_TRACKED, NCOUNTERS };
#define BLOCK_SIZE (1u << 20)
#define BLOCKS 64
#define FLOWS (1u << 18)
#define PROBES 16
#define PACKET_IGNORE_OUTGOING 23

struct key { uint8_t family, proto; uint16_t port[2]; uint8_t addr[2][16]; };
struct flow { struct key key; uint64_t packets, bytes, last; uint8_t used; };

static volatile sig_atomic_t stopping;
static struct flow *flows;
static volatile uint64_t *counters;

static void stop(int sig) { (void)sig; stopping = 1; }

static int read_program(const char *path, struct insn **out) {
    FILE *f = fopen(path, "r");
    int n = -1;
    if (!f || fscanf(f, "%d", &n) != 1 || n <= 0 || n > 65536)
        return -1;
    *out = calloc(n, sizeof **out);
    for (int i = 0; i < n; i++) {
        unsigned code, jt, jf, k;
        if (fscanf(f, "%u %u %u %u", &code, &jt, &jf, &k) != 4)
            return -1;
        (*out)[i] = (struct insn){code, jt, jf, k};
    }
    fclose(f);
    return n;
}

/* The connection's key, both directions alike; 0 when the frame has none. */
static int flow_key(const uint8_t *p, unsigned len, struct key *k) {
    unsigned l4, alen;
    const uint8_t *src, *dst;
    memset(k, 0, sizeof *k);
    if (len < 14)
        return 0;
    uint16_t type = (uint16_t)(p[12] << 8 | p[13]);
    if (type == ETH_P_IP && len >= 34 && (p[14] >> 4) == 4) {
        if (((p[20] & 0x3f) | p[21]) != 0)  /* MF or an offset: a fragment */
            return 0;
        l4 = 14 + (p[14] & 0xf) * 4u;
        k->proto = p[23], k->family = 4, alen = 4, src = p + 26, dst = p + 30;
    } else if (type == ETH_P_IPV6 && len >= 54 && (p[14] >> 4) == 6) {
        l4 = 54;
        k->proto = p[20], k->family = 6, alen = 16, src = p + 22, dst = p + 38;
    } else {
        return 0;
    }
    if ((k->proto != 6 && k->proto != 17) || len < l4 + 4)
        return 0;
    uint16_t sport = (uint16_t)(p[l4] << 8 | p[l4 + 1]);
    uint16_t dport = (uint16_t)(p[l4 + 2] << 8 | p[l4 + 3]);
    int swap = memcmp(src, dst, alen) > 0 || (memcmp(src, dst, alen) == 0 && sport > dport);
    memcpy(k->addr[swap], src, alen);
    memcpy(k->addr[!swap], dst, alen);
    k->port[swap] = sport;
    k->port[!swap] = dport;
    return 1;
}

static uint64_t hash(const struct key *k) {
    const uint8_t *b = (const uint8_t *)k;
    uint64_t h = 1469598103934665603ull;
    for (unsigned i = 0; i < sizeof *k; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

static void track(const uint8_t *p, unsigned len, uint64_t now) {
    struct key k;
    if (!flow_key(p, len, &k))
        return;
    uint64_t h = hash(&k);
    struct flow *victim = NULL;
    counters[C_TRACKED]++;
    for (unsigned i = 0; i < PROBES; i++) {  /* no slot is ever emptied: a free one ends */
        struct flow *f = &flows[(h + i) & (FLOWS - 1)];
        if (!f->used) {
            counters[C_FLOWS]++;
            *f = (struct flow){k, 1, len, now, 1};
            return;
        }
        if (memcmp(&f->key, &k, sizeof k) == 0) {
            f->packets++, f->bytes += len, f->last = now;
            return;
        }
        if (!victim || f->last < victim->last)
            victim = f;
    }
    *victim = (struct flow){k, 1, len, now, 1};  /* the least recently seen goes */
}

static void frame(const struct insn *prog, int ct, int verdicts, struct tpacket3_hdr *h) {
    const uint8_t *p = (const uint8_t *)h + h->tp_mac;
    int pass = bpf_filter(prog, p, h->tp_len, h->tp_snaplen) != 0;
    if (ct)
        track(p, h->tp_snaplen, (uint64_t)h->tp_sec * 1000000000ull + h->tp_nsec);
    counters[C_FRAMES]++;
    counters[pass ? C_PASSED : C_DROPPED]++;
    if (verdicts) {
        printf("%c ", pass ? 'P' : 'D');
        for (unsigned i = 0; i < h->tp_snaplen; i++)
            printf("%02x", p[i]);
        putchar('\n');
    }
}

static int ring(const char *ifname, uint8_t **map) {
    int fd = socket(AF_PACKET, SOCK_RAW, htons(ETH_P_ALL)), v = TPACKET_V3, one = 1;
    struct tpacket_req3 req = {.tp_block_size = BLOCK_SIZE, .tp_block_nr = BLOCKS,
                               .tp_frame_size = 2048,
                               .tp_frame_nr = BLOCK_SIZE / 2048 * BLOCKS,
                               .tp_retire_blk_tov = 1};
    struct sockaddr_ll addr = {.sll_family = AF_PACKET, .sll_protocol = htons(ETH_P_ALL),
                               .sll_ifindex = (int)if_nametoindex(ifname)};
    if (fd < 0 || !addr.sll_ifindex
        || setsockopt(fd, SOL_PACKET, PACKET_VERSION, &v, sizeof v)
        || setsockopt(fd, SOL_PACKET, PACKET_RX_RING, &req, sizeof req)
        || setsockopt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof one))
        return -1;
    *map = mmap(NULL, (size_t)BLOCK_SIZE * BLOCKS, PROT_READ | PROT_WRITE,
                MAP_SHARED | MAP_LOCKED, fd, 0);
    if (*map == MAP_FAILED)
        *map = mmap(NULL, (size_t)BLOCK_SIZE * BLOCKS, PROT_READ | PROT_WRITE, MAP_SHARED,
                    fd, 0);
    if (*map == MAP_FAILED || bind(fd, (struct sockaddr *)&addr, sizeof addr))
        return -1;
    return fd;
}

int main(int argc, char **argv) {
    struct insn *prog;
    uint8_t *map;
    int ct = 0, verdicts = 0;
    if (argc < 4) {
        fprintf(stderr, "usage: %s IFNAME PROGRAM COUNTERS [--ct] [--verdicts]\n", argv[0]);
        return 2;
    }
    for (int i = 4; i < argc; i++) {
        ct |= strcmp(argv[i], "--ct") == 0;
        verdicts |= strcmp(argv[i], "--verdicts") == 0;
    }
    int cfd = open(argv[3], O_RDWR);
    if (read_program(argv[2], &prog) < 0 || cfd < 0
        || ftruncate(cfd, NCOUNTERS * sizeof(uint64_t))) {
        fprintf(stderr, "%s: cannot read the program or the counters file\n", argv[0]);
        return 2;
    }
    counters = mmap(NULL, NCOUNTERS * sizeof(uint64_t), PROT_READ | PROT_WRITE, MAP_SHARED,
                    cfd, 0);
    flows = ct ? calloc(FLOWS, sizeof *flows) : NULL;
    int fd = ring(argv[1], &map);
    if (counters == MAP_FAILED || (ct && !flows) || fd < 0) {
        fprintf(stderr, "%s: %s: %s\n", argv[0], argv[1], strerror(errno));
        return 1;
    }
    signal(SIGTERM, stop);
    signal(SIGINT, stop);
    fprintf(stderr, "ready\n");
    unsigned block = 0;
    while (!stopping) {
        struct tpacket_block_desc *b = (void *)(map + (size_t)block * BLOCK_SIZE);
        if (!(b->hdr.bh1.block_status & TP_STATUS_USER)) {
            struct pollfd pfd = {.fd = fd, .events = POLLIN | POLLERR};
            poll(&pfd, 1, 100);
            continue;
        }
        struct tpacket3_hdr *h = (void *)((uint8_t *)b + b->hdr.bh1.offset_to_first_pkt);
        for (unsigned i = 0; i < b->hdr.bh1.num_pkts; i++) {
            frame(prog, ct, verdicts, h);
            h = (void *)((uint8_t *)h + h->tp_next_offset);
        }
        __atomic_store_n(&b->hdr.bh1.block_status, TP_STATUS_KERNEL, __ATOMIC_RELEASE);
        if (verdicts)
            fflush(stdout);
        block = (block + 1) % BLOCKS;
        struct tpacket_stats_v3 st;
        socklen_t len = sizeof st;
        if (!getsockopt(fd, SOL_PACKET, PACKET_STATISTICS, &st, &len))
            counters[C_RING_DROPS] += st.tp_drops;
    }
    fflush(stdout);
    return 0;
}
