/* Per-syscall cost: prints ns per iteration of one operation.
 *   loop open N [BATCHES]     open("/dev/null") + close()  (openat is the call the tools trace)
 *   loop getuid N [BATCHES]   getuid()                     (a syscall none of the tools trace)
 * N iterations run as BATCHES batches (default 20); the fastest batch is reported, since
 * other work on a shared machine can only add time. A tenth of N runs first, untimed, to
 * warm caches and the tools' map entry for this process. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static int op_open(void)
{
	int fd = open("/dev/null", O_RDONLY);

	if (fd < 0)
		return -1;
	return close(fd);
}

static int op_getuid(void)
{
	/* raw syscall: no libc caching can turn it into a no-op */
	return syscall(SYS_getuid) < 0 ? -1 : 0;
}

static double now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

int main(int argc, char **argv)
{
	int (*op)(void);
	long n, batches = 20, per, i, b;
	double best = 0;

	if (argc < 3 || argc > 4 || (strcmp(argv[1], "open") && strcmp(argv[1], "getuid")) ||
	    (n = atol(argv[2])) <= 0 || (argc == 4 && (batches = atol(argv[3])) <= 0)) {
		fprintf(stderr, "usage: %s open|getuid N [BATCHES]\n", argv[0]);
		return 2;
	}
	op = strcmp(argv[1], "open") ? op_getuid : op_open;
	for (i = 0; i < n / 10; i++)
		if (op()) {
			perror(argv[1]);
			return 1;
		}
	per = n / batches > 0 ? n / batches : 1;
	for (b = 0; b < batches; b++) {
		double t0 = now_ns(), ns;

		for (i = 0; i < per; i++)
			op();
		ns = (now_ns() - t0) / per;
		if (b == 0 || ns < best)
			best = ns;
	}
	printf("%.1f\n", best);
	return 0;
}
