/* benchmarks/ebpf_flow.py: sends UDP frames from N sources (10.1.0.1 ...) round-robin
 * on an interface through an AF_PACKET socket, ROUNDS rounds a second (each round one
 * frame per source, one sendmmsg), for SECONDS seconds.
 *
 *     flood IFNAME DSTMAC SOURCES ROUNDS SECONDS */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#define LEN 60

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	if (argc != 6)
		return 2;
	int n = atoi(argv[3]), rounds = atoi(argv[4]);
	double seconds = atof(argv[5]);
	unsigned char mac[6];
	sscanf(argv[2], "%hhx:%hhx:%hhx:%hhx:%hhx:%hhx", &mac[0], &mac[1], &mac[2], &mac[3],
	       &mac[4], &mac[5]);
	int fd = socket(AF_PACKET, SOCK_RAW, 0);
	struct sockaddr_ll addr = { .sll_family = AF_PACKET, .sll_ifindex = if_nametoindex(argv[1]) };
	if (fd < 0 || bind(fd, (struct sockaddr *)&addr, sizeof(addr)))
		return perror("socket"), 1;
	unsigned char (*frames)[LEN] = calloc(n, LEN);
	struct mmsghdr *msgs = calloc(n, sizeof(*msgs));
	struct iovec *iov = calloc(n, sizeof(*iov));
	for (int i = 0; i < n; i++) {
		unsigned char *f = frames[i];
		memcpy(f, mac, 6);
		memcpy(f + 6, "\x02\0\0\0\0\x09\x08\x00", 8);
		unsigned char ip[20] = { 0x45, 0, 0, 46, 0, 1, 0, 0, 64, 17, 0, 0,
					 10, 1, i >> 8, i & 255, 192, 168, 0, 79 };
		unsigned sum = 0;
		for (int k = 0; k < 20; k += 2)
			sum += ip[k] << 8 | ip[k + 1];
		sum = (sum & 0xffff) + (sum >> 16);
		ip[10] = ~sum >> 8, ip[11] = ~sum & 255;
		memcpy(f + 14, ip, 20);
		unsigned char udp[8] = { 0x9c, 0x40, 0x1f, 0x40, 0, 26, 0, 0 };
		memcpy(f + 34, udp, 8);
		iov[i].iov_base = f, iov[i].iov_len = LEN;
		msgs[i].msg_hdr.msg_iov = &iov[i], msgs[i].msg_hdr.msg_iovlen = 1;
	}
	double start = now(), next = start;
	long sent = 0;
	while (now() - start < seconds) {
		for (int done = 0; done < n;) {
			int r = sendmmsg(fd, msgs + done, n - done, 0);
			if (r <= 0)
				break;
			done += r, sent += r;
		}
		next += 1.0 / rounds;
		while (now() < next)
			;
	}
	printf("%ld %.3f\n", sent, now() - start);
	return 0;
}
