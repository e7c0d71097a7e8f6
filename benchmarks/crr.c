/* TCP_CRR (netperf's connect/request/response): each transaction a new connection, one byte
 * each way, then closed. `crr server ADDR PORT` answers until killed; `crr client ADDR PORT
 * SECONDS` prints the transactions it completed in that time. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	struct sockaddr_in addr = {.sin_family = AF_INET};
	int one = 1;
	char byte = 'x';

	if (argc < 4)
		return 2;
	inet_pton(AF_INET, argv[2], &addr.sin_addr);
	addr.sin_port = htons(atoi(argv[3]));
	if (!strcmp(argv[1], "server")) {
		int listener = socket(AF_INET, SOCK_STREAM, 0);

		setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(listener, (void *)&addr, sizeof(addr)) || listen(listener, 1024))
			return perror("server"), 1;
		printf("ready\n");
		fflush(stdout);
		for (;;) {
			int c = accept(listener, NULL, NULL);

			if (c < 0)
				continue;
			if (read(c, &byte, 1) == 1)
				write(c, &byte, 1);
			close(c);
		}
	}
	double end = now() + atof(argv[4]);
	long done = 0;

	while (now() < end) {
		int c = socket(AF_INET, SOCK_STREAM, 0);

		setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		if (connect(c, (void *)&addr, sizeof(addr)) || write(c, &byte, 1) != 1 || read(c, &byte, 1) != 1) {
			close(c);
			continue;
		}
		close(c);
		done++;
	}
	printf("%ld\n", done);
	return 0;
}
