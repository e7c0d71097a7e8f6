/* detect_bench's loops: each prints the mean ns of one operation over N.
 *   detect_loop exec N      fork + execve("/bin/true") + wait
 *   detect_loop connect N   a TCP connect() to 127.0.0.1:1 (refused: the syscall and the
 *                           event, without a peer's accept in the way)
 *   detect_loop connect0 N  the same with the socket on fd 0, as a reverse shell's: every one
 *                           is an event the built-in rules want (and an alert, rate-limited)
 *   detect_loop open N      open() + close() of /etc/hostname
 *   detect_loop openw N F   open(F, O_WRONLY) + close(): an open that may change a file, which
 *                           the bait programs follow from its entry to its exit
 *   detect_loop write N F   pwrite() of 64 bytes at F's start (opened once): each write the
 *                           bait programs look up by its file */
#include <arpa/inet.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static long long now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(int argc, char **argv)
{
	long n = argc > 2 ? atol(argv[2]) : 1000;
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(1)};
	long long start;

	char block[64] = {0};
	int wfd = -1;

	if (argc < 2 || ((!strcmp(argv[1], "openw") || !strcmp(argv[1], "write")) && argc < 4))
		return 2;
	if (!strcmp(argv[1], "write") && (wfd = open(argv[3], O_WRONLY)) < 0)
		return 1;
	inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
	start = now_ns();
	for (long i = 0; i < n; i++) {
		if (!strcmp(argv[1], "exec")) {
			pid_t pid = fork();

			if (pid == 0) {
				execl("/bin/true", "true", (char *)0);
				_exit(127);
			}
			waitpid(pid, NULL, 0);
		} else if (!strcmp(argv[1], "connect") || !strcmp(argv[1], "connect0")) {
			int s;

			if (argv[1][7] == '0')
				close(0); /* the socket takes the lowest free fd */
			s = socket(AF_INET, SOCK_STREAM, 0);

			connect(s, (struct sockaddr *)&a, sizeof(a));
			close(s);
		} else if (!strcmp(argv[1], "openw")) {
			close(open(argv[3], O_WRONLY));
		} else if (wfd >= 0) {
			if (pwrite(wfd, block, sizeof(block), 0) != sizeof(block))
				return 1;
		} else {
			close(open("/etc/hostname", O_RDONLY));
		}
	}
	printf("%.1f\n", (double)(now_ns() - start) / n);
	return 0;
}
