/* memleak's ground truth: "ready" once loaded; after "go" on stdin, THREADS threads (or the main thread when 0)
 * each leak exactly LEAKS blocks of SIZE bytes from leak_here() and allocate and free many
 * more through every allocator function elsewhere (balanced(); jemalloc's mallocx and friends
 * too when it is the allocator); then "done" on stdout, and
 * it waits for stdin to close. Built by the test with -g -fno-omit-frame-pointer (-O0: no
 * tail call hides leak_here as malloc's caller). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define ROUNDS 200

static int leaks, threads;
static size_t size;
static void *kept[4096];
static int nkept;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
/* jemalloc's own API, where the allocator is jemalloc (looked up: the program is not linked with it) */
static void *(*mallocx)(size_t, int);
static void *(*rallocx)(void *, size_t, int);
static void (*dallocx)(void *, int);
static void (*sdallocx)(void *, size_t, int);

__attribute__((noinline)) void leak_here(void)
{
	void *p = malloc(size);

	memset(p, 1, size);
	pthread_mutex_lock(&lock);
	kept[nkept++] = p;
	pthread_mutex_unlock(&lock);
}

__attribute__((noinline)) void balanced(int round)
{
	void *a = malloc(32 + round % 100), *b = calloc(4, 40 + round % 7), *c = NULL, *d, *e, *f, *g;

	c = realloc(c, 100);
	c = realloc(c, 5000 + round);
	if (posix_memalign(&d, 64, 200))
		abort();
	e = aligned_alloc(256, 512);
	f = memalign(128, 300);
	g = valloc(100);
	void *m = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	munmap(m, 8192);
	free(a), free(b), free(c), free(d), free(e), free(f), free(g);
	free(realloc(malloc(10), 0)); /* realloc(p, 0) frees p (and returns NULL) */
	if (mallocx) {
		dallocx(rallocx(mallocx(64 + round, 0), 4096 + round, 0), 0);
		sdallocx(mallocx(80, 0), 80, 0);
	}
}

static void *work(void *arg)
{
	for (int i = 0; i < ROUNDS; i++) {
		balanced(i);
		if (i % (ROUNDS / leaks) == 0)
			leak_here();
	}
	return arg;
}

int main(int argc, char **argv)
{
	pthread_t tids[64];
	char line[16];

	threads = atoi(argv[1]), leaks = atoi(argv[2]), size = strtoul(argv[3], NULL, 0);
	mallocx = dlsym(RTLD_DEFAULT, "mallocx"), rallocx = dlsym(RTLD_DEFAULT, "rallocx");
	dallocx = dlsym(RTLD_DEFAULT, "dallocx"), sdallocx = dlsym(RTLD_DEFAULT, "sdallocx");
	printf("ready\n"); /* loaded (the preloaded allocator too): a tracer may read the maps */
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin))
		return 1;
	if (!threads)
		work(NULL);
	for (int t = 0; t < threads; t++)
		pthread_create(&tids[t], NULL, work, NULL);
	for (int t = 0; t < threads; t++)
		pthread_join(tids[t], NULL);
	printf("done %d\n", nkept);
	fflush(stdout);
	while (read(0, line, sizeof(line)) > 0)
		;
	return 0;
}
