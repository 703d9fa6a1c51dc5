/* Smallest CBUF program: a parent writes a message into a cbuf and sends
 * its id through a pipe; the forked child maps it (read-only) and prints it.
 * Build: cc hello.c $(pkg-config --cflags --libs cbuf) -o hello
 * Run:   cistern cbuf manager --socket /tmp/cbuf.sock &  ./hello /tmp/cbuf.sock */
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cbuf.h>

int main(int argc, char **argv)
{
	const char *sock = argc > 1 ? argv[1] : "/run/cistern-cbuf.sock";
	int fds[2];
	if (pipe(fds))
		return 1;
	pid_t pid = fork();
	if (pid == 0) { /* receiver: connects on its own after fork */
		if (cbuf_connect(sock))
			return 1;
		cbuf_t id;
		if (read(fds[0], &id, sizeof(id)) != sizeof(id))
			return 1;
		const char *msg = cbuf2buf(id, 64);
		if (!msg)
			return 1;
		printf("child got: %s\n", msg);
		cbuf_free(id);
		cbuf_disconnect();
		return 0;
	}
	if (cbuf_connect(sock)) {
		fprintf(stderr, "no CBUF manager at %s\n", sock);
		return 1;
	}
	cbuf_t id;
	char *buf = cbuf_alloc(64, &id);
	if (!buf)
		return 1;
	strcpy(buf, "hello through shared pages, zero copies");
	cbuf_send(id); /* count the send before the id leaves */
	if (write(fds[1], &id, sizeof(id)) != sizeof(id))
		return 1;
	cbuf_free(id); /* collected once the child has freed it too */
	int st;
	waitpid(pid, &st, 0);
	cbuf_disconnect();
	return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}
