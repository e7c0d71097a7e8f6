/* sched_loop switch N BATCHES CPU: ns per context switch, two threads pinned to CPU handing a
 *   byte back and forth over two pipes (each hand-off: a wakeup and a switch), fastest batch.
 * sched_loop dio FILE N BATCHES: ns per O_DIRECT 4 KiB read of FILE (each waits for the disk,
 *   which answers with an interrupt and a wakeup), fastest batch. Where the file system has no
 *   O_DIRECT (9p, as a VM's shared root), plain reads: with cache=none they go to the device too. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static int pin(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	return sched_setaffinity(0, sizeof(set), &set);
}

static int ping[2], pong[2], cpu;

static void *echo(void *arg)
{
	char c;

	(void)arg;
	if (pin(cpu))
		return NULL;
	while (read(ping[0], &c, 1) == 1)
		if (write(pong[1], &c, 1) != 1)
			break;
	return NULL;
}

static double switches(long n, long batches)
{
	pthread_t peer;
	double best = 0;
	long per = n / batches > 0 ? n / batches : 1;
	char c = 'x';

	if (pipe(ping) || pipe(pong) || pin(cpu) || pthread_create(&peer, NULL, echo, NULL))
		return -1;
	for (long b = -1; b < batches; b++) { /* batch -1: warm-up */
		double t0 = now_ns(), ns;

		for (long i = 0; i < per; i++)
			if (write(ping[1], &c, 1) != 1 || read(pong[0], &c, 1) != 1)
				return -1;
		ns = (now_ns() - t0) / (2.0 * per); /* a round trip is two switches */
		if (b >= 0 && (!best || ns < best))
			best = ns;
	}
	close(ping[1]);
	pthread_join(peer, NULL);
	return best;
}

#define BLOCK 4096
#define SPAN 256 /* blocks: reads cycle through the first 1 MiB */

static double direct_reads(const char *path, long n, long batches)
{
	double best = 0;
	long per = n / batches > 0 ? n / batches : 1;
	void *buf;
	int fd = open(path, O_RDONLY | O_DIRECT);

	if (fd < 0 && errno == EINVAL)
		fd = open(path, O_RDONLY);
	if (fd < 0 || posix_memalign(&buf, BLOCK, BLOCK))
		return -1;
	for (long b = -1; b < batches; b++) {
		double t0 = now_ns(), ns;

		for (long i = 0; i < per; i++)
			if (pread(fd, buf, BLOCK, (i % SPAN) * BLOCK) != BLOCK)
				return -1;
		ns = (now_ns() - t0) / per;
		if (b >= 0 && (!best || ns < best))
			best = ns;
	}
	close(fd);
	return best;
}

int main(int argc, char **argv)
{
	double ns = -1;

	if (argc == 5 && !strcmp(argv[1], "switch")) {
		cpu = atoi(argv[4]);
		ns = switches(atol(argv[2]), atol(argv[3]));
	} else if (argc == 5 && !strcmp(argv[1], "dio")) {
		ns = direct_reads(argv[2], atol(argv[3]), atol(argv[4]));
	} else {
		fprintf(stderr, "usage: %s switch N BATCHES CPU | dio FILE N BATCHES\n", argv[0]);
		return 2;
	}
	if (ns < 0) {
		perror(argv[1]);
		return 1;
	}
	printf("%.1f\n", ns);
	return 0;
}
