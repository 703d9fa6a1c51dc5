/* The FastCGI baseline application (libfcgi, the FastCGI developer's kit the
 * CBUF paper used): answers /gen?size=N[&seed=S] with the same bodies and
 * checksum header as cbufweb's content component (pattern.h).
 *   fcgiapp SOCKET_PATH [PROCESSES]
 * listens on a Unix socket (mode 0666: nginx and Apache workers connect
 * to it) and serves from PROCESSES forked processes (default 2). */
#include <fcgiapp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pattern.h"

#define MAX_BODY (4u * 1024u * 1024u)

static int serve(int sock)
{
	FCGX_Request rq;
	if (FCGX_InitRequest(&rq, sock, 0))
		return 1;
	void *body = aligned_alloc(4096, MAX_BODY);
	while (FCGX_Accept_r(&rq) >= 0) {
		const char *q = FCGX_GetParam("QUERY_STRING", rq.envp);
		size_t ql = q ? strlen(q) : 0;
		long long size = web_query_num(q ? q : "", ql, "size"), seed = web_query_num(q ? q : "", ql, "seed");
		if (size <= 0 || size > MAX_BODY) {
			FCGX_FPrintF(rq.out, "Status: 400 Bad Request\r\nContent-Type: text/plain\r\n\r\nsize must be 1..4194304\n");
			FCGX_Finish_r(&rq);
			continue;
		}
		uint64_t sum = web_fill(body, 0, (size_t)size, seed < 0 ? 0 : (uint64_t)seed);
		FCGX_FPrintF(rq.out,
			     "Content-Type: application/octet-stream\r\nContent-Length: %lld\r\nX-Checksum: %016llx\r\n\r\n",
			     size, (unsigned long long)sum);
		FCGX_PutStr(body, (int)size, rq.out);
		FCGX_Finish_r(&rq);
	}
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: fcgiapp SOCKET_PATH [PROCESSES]\n");
		return 2;
	}
	int n = argc > 2 ? atoi(argv[2]) : 2;
	if (FCGX_Init())
		return 1;
	unlink(argv[1]);
	int sock = FCGX_OpenSocket(argv[1], 1024);
	if (sock < 0) {
		perror("FCGX_OpenSocket");
		return 1;
	}
	chmod(argv[1], 0666);
	for (int i = 0; i < n; i++) {
		if (fork() == 0) {
			prctl(PR_SET_PDEATHSIG, SIGTERM);
			return serve(sock);
		}
	}
	signal(SIGTERM, SIG_DFL);
	while (wait(NULL) > 0)
		;
	return 0;
}
