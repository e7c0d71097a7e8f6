// memleak's C++ ground truth: "ready" once loaded; after "go" on stdin, leak_here() leaks exactly LEAKS arrays of
// SIZE bytes with new[]; balanced() news and deletes many more (plain, sized, array). Then
// "done" on stdout; it waits for stdin to close. Built with -g -fno-omit-frame-pointer.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unistd.h>
#include <vector>

struct Node {
	long value[6];
};

static std::vector<char *> kept;

__attribute__((noinline)) void leak_here(size_t size)
{
	char *p = new char[size];

	p[0] = 1;
	kept.push_back(p);
}

__attribute__((noinline)) void balanced(int round)
{
	Node *n = new Node();
	int *a = new int[10 + round % 50];
	std::string s(100 + round, 'x');

	delete n;
	delete[] a;
}

int main(int argc, char **argv)
{
	int leaks = atoi(argv[1]);
	size_t size = strtoul(argv[2], NULL, 0);
	char line[16];

	kept.reserve(leaks);
	printf("ready\n"); /* loaded (the preloaded allocator too): a tracer may read the maps */
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin))
		return 1;
	for (int i = 0; i < 200; i++) {
		balanced(i);
		if (i % (200 / leaks) == 0)
			leak_here(size);
	}
	printf("done %zu\n", kept.size());
	fflush(stdout);
	while (read(0, line, sizeof(line)) > 0)
		;
	return 0;
}
