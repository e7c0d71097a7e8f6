/* memleak_loop CPU: one long-lived process for memleak_bench.py to attach memleak tools to
 * (-p PID: their uprobes are for one process). Pinned to CPU, it reads commands on stdin, one
 * a line, and answers each with one line:
 *
 *   malloc64 N BATCHES  ->  "NS ALLOCS FREES"
 *   mixed N BATCHES     ->  "NS ALLOCS FREES"
 *   quit
 *
 * Each command runs one untimed warm-up batch, then BATCHES batches of N iterations; NS is the
 * fastest batch's ns per iteration. An iteration is one block's life: one allocation and one
 * free. ALLOCS and FREES count the allocator calls of the whole command (warm-up included):
 * malloc/calloc/realloc calls, and free calls.
 *
 * malloc64: p = malloc(64), one byte written, free(p).
 * mixed: sizes from a table made once with a fixed seed (60% 16..256 B, 30% 257 B..4 KiB,
 *   10% 4 KiB..64 KiB); 80% malloc, 10% calloc, 10% malloc of half the size grown by realloc
 *   (an extra call). The last WINDOW blocks stay outstanding and are freed oldest first (a
 *   ring); the batch ends by freeing what is left, so every batch is balanced.
 *
 * Built with -fno-builtin and dynamically linked: every call goes through the PLT into libc's
 * malloc/free, where the tools' uprobes are; nothing is elided (the blocks are written, and
 * their addresses kept in a volatile sink). */
#define _GNU_SOURCE
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TABLE 4096   /* the mixed workload's plan, cycled through */
#define WINDOW 256   /* blocks outstanding in the mixed workload (a power of two) */

enum kind { K_MALLOC, K_CALLOC, K_REALLOC };

static struct step {
	uint32_t size;
	uint8_t kind;
} plan[TABLE];

static void *volatile sink;
static long allocs, frees;

static double now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static uint64_t next_random(uint64_t *state) /* xorshift64* */
{
	uint64_t x = *state;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*state = x;
	return x * 0x2545F4914F6CDD1DULL;
}

static void make_plan(void)
{
	uint64_t state = 0x9E3779B97F4A7C15ULL; /* fixed: every run allocates the same sequence */

	for (int i = 0; i < TABLE; i++) {
		uint64_t r = next_random(&state);
		unsigned cls = r % 100, kind = (r >> 8) % 100;
		uint32_t lo, hi;

		if (cls < 60)
			lo = 16, hi = 256;
		else if (cls < 90)
			lo = 257, hi = 4096;
		else
			lo = 4097, hi = 65536;
		plan[i].size = lo + (uint32_t)((r >> 16) % (hi - lo + 1));
		plan[i].kind = kind < 80 ? K_MALLOC : kind < 90 ? K_CALLOC : K_REALLOC;
	}
}

static void release(char *p)
{
	free(p);
	frees++;
}

static void malloc64(long n)
{
	for (long i = 0; i < n; i++) {
		char *p = malloc(64);

		if (!p)
			abort();
		p[0] = (char)i;
		sink = p;
		release(p);
		allocs++;
	}
}

static char *allocate(const struct step *s)
{
	char *p;

	switch (s->kind) {
	case K_CALLOC:
		p = calloc(s->size / 16 ? s->size / 16 : 1, 16);
		allocs++;
		break;
	case K_REALLOC:
		p = malloc(s->size / 2 + 1);
		if (!p)
			abort();
		p[0] = 1;
		p = realloc(p, s->size);
		allocs += 2;
		break;
	default:
		p = malloc(s->size);
		allocs++;
	}
	if (!p)
		abort();
	p[0] = (char)s->size;
	return p;
}

static void mixed(long n)
{
	static char *ring[WINDOW];

	for (long i = 0; i < n; i++) {
		char **slot = &ring[i & (WINDOW - 1)];

		if (*slot)
			release(*slot);
		*slot = allocate(&plan[i & (TABLE - 1)]);
		sink = *slot;
	}
	for (long i = n; i < n + WINDOW; i++) { /* what is left, oldest first */
		char **slot = &ring[i & (WINDOW - 1)];

		if (*slot) {
			release(*slot);
			*slot = NULL;
		}
	}
}

static int pin(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	return sched_setaffinity(0, sizeof(set), &set);
}

int main(int argc, char **argv)
{
	char line[256], name[32];
	long n, batches;

	if (argc != 2 || pin(atoi(argv[1]))) {
		fprintf(stderr, "usage: memleak_loop CPU (then commands on stdin)\n");
		return 2;
	}
	make_plan();
	setvbuf(stdout, NULL, _IOLBF, 0);
	while (fgets(line, sizeof(line), stdin)) {
		void (*run)(long);
		double best = 0;

		if (sscanf(line, "%31s %ld %ld", name, &n, &batches) != 3 || n < 1 || batches < 1) {
			if (strncmp(line, "quit", 4) == 0)
				return 0;
			printf("error: expected 'malloc64|mixed N BATCHES' or 'quit'\n");
			continue;
		}
		if (strcmp(name, "malloc64") == 0)
			run = malloc64;
		else if (strcmp(name, "mixed") == 0)
			run = mixed;
		else {
			printf("error: no workload '%s'\n", name);
			continue;
		}
		allocs = frees = 0;
		for (long b = -1; b < batches; b++) { /* batch -1: warm-up */
			double t0 = now_ns(), ns;

			run(n);
			ns = (now_ns() - t0) / n;
			if (b >= 0 && (!best || ns < best))
				best = ns;
		}
		printf("%.2f %ld %ld\n", best, allocs, frees);
	}
	return 0;
}
