/*
 * lnk-open: the sandbox's browser ($BROWSER, and xdg-open, sensible-browser and
 * www-browser where PATH is searched). It asks the proxy to open one URL in the person's
 * browser, outside, and exits 0 when the person said yes and the page was opened, else
 * non-zero with the reason in one line on stderr.
 *
 *     lnk-open URL
 *
 * Why C, in a Python project: it must run in every sandbox, whatever [commands] lists,
 * without granting the program an interpreter. A script runs only if its interpreter may
 * run too (the kernel opens the interpreter for execution, and Landlock judges that
 * open), so a Python opener would need `python3` granted `run` in a sandbox whose
 * [commands] names only, say, git: any Python code could then run. A static binary needs
 * nothing else granted. It also starts in about a millisecond, where Python takes tens.
 *
 * What it does, and nothing more: reads LNK_SANDBOX_URL (set by the launcher:
 * http://127.0.0.1:3128/_link/s/<URL secret>, checked to be exactly that shape), connects
 * to 127.0.0.1:3128 (the proxy's listener, inside the sandbox's own network), sends
 * `POST /_link/s/<secret>/open` with the URL as the body, and reads the answer. It decides
 * nothing: the proxy checks the URL, asks the person, opens it outside, and listens for a
 * login's callback (lnk_proxy/open_rules.py, lnk_proxy/server.py).
 *
 * Exit status, as xdg-open's: 0 opened; 1 usage; 3 the proxy cannot be reached (no open
 * verb in this sandbox); 4 refused, the person said no, or the opener outside failed.
 *
 * Built by bin/setup (cc -O2 -static); lnk_wrap/browser/ holds the links to it.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#define PROXY_ADDRESS "127.0.0.1"
#define PROXY_PORT 3128
#define SANDBOX_URL_PREFIX "http://127.0.0.1:3128/_link/s/"
/* The URL secret: 64 lowercase hex characters (lnk_wrap/verb_env.py). */
#define URL_SECRET_LENGTH 64
/* The proxy refuses a URL longer than this (lnk_proxy/open_rules.MAX_URL_BYTES); this
 * only keeps the request bounded before it is sent. */
#define MAX_URL_BYTES (16 * 1024)
/* The answer is a status line, a few headers and one line of JSON. */
#define MAX_ANSWER_BYTES (64 * 1024)
/* The proxy answers within the person's two minutes to answer, plus the opener outside's
 * ten seconds; this bounds a wait on a proxy that never answers. */
#define WAIT_SECONDS 300

static const char *name = "lnk-open";

static int fail(int status, const char *reason) {
    fprintf(stderr, "%s (lnk-sandbox): %s\n", name, reason);
    return status;
}

static int write_all(int fd, const char *data, size_t length) {
    while (length > 0) {
        ssize_t written = write(fd, data, length);
        if (written < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        data += written;
        length -= (size_t)written;
    }
    return 0;
}

/* Print the refusal's reason: the JSON body's "description" (lnk_proxy/refusal.py), in
 * printable ASCII only (a byte outside it is shown as '?': nothing drives the terminal). */
static void say_reason(const char *answer) {
    const char *key = "\"description\":\"";
    const char *at = strstr(answer, key);
    char line[1024];
    size_t used = 0;
    if (at == NULL) {
        fail(0, "not opened (the proxy's answer gave no reason)");
        return;
    }
    for (at += strlen(key); *at && *at != '"' && used < sizeof line - 1; at++) {
        char c = *at;
        if (c == '\\' && at[1]) c = *++at;  /* \" and \\ as themselves */
        line[used++] = (c >= 0x20 && c <= 0x7e) ? c : '?';
    }
    line[used] = '\0';
    fprintf(stderr, "%s (lnk-sandbox): not opened: %s\n", name, line);
}

int main(int argc, char **argv) {
    const char *slash;
    const char *base, *url, *secret;
    char head[512];
    char answer[MAX_ANSWER_BYTES + 1];
    size_t url_length, got = 0;
    int fd, header_length, i;
    struct sockaddr_in proxy;
    struct timeval wait = {WAIT_SECONDS, 0};

    if (argc > 0 && argv[0] != NULL && (slash = strrchr(argv[0], '/')) != NULL && slash[1])
        name = slash + 1;
    else if (argc > 0 && argv[0] != NULL && argv[0][0])
        name = argv[0];
    if (argc != 2 || argv[1][0] == '\0' || argv[1][0] == '-')
        return fail(1, "usage: one URL (http or https), opened in the person's browser "
                       "outside the sandbox once they allow it");
    url = argv[1];
    url_length = strlen(url);
    if (url_length > MAX_URL_BYTES)
        return fail(4, "not opened: the URL is longer than 16384 bytes");
    base = getenv("LNK_SANDBOX_URL");
    if (base == NULL || strncmp(base, SANDBOX_URL_PREFIX, strlen(SANDBOX_URL_PREFIX)) != 0)
        return fail(3, "no page can be opened from this sandbox: [verbs] open is off "
                       "(LNK_SANDBOX_URL is not set)");
    secret = base + strlen(SANDBOX_URL_PREFIX);
    if (strlen(secret) != URL_SECRET_LENGTH)
        return fail(3, "LNK_SANDBOX_URL is not the sandbox's own (it was changed)");
    for (i = 0; i < URL_SECRET_LENGTH; i++)
        if (!((secret[i] >= '0' && secret[i] <= '9') || (secret[i] >= 'a' && secret[i] <= 'f')))
            return fail(3, "LNK_SANDBOX_URL is not the sandbox's own (it was changed)");

    header_length = snprintf(head, sizeof head,
                             "POST /_link/s/%s/open HTTP/1.1\r\n"
                             "Host: " PROXY_ADDRESS ":%d\r\n"
                             "Content-Type: text/plain; charset=utf-8\r\n"
                             "Content-Length: %zu\r\n"
                             "Connection: close\r\n\r\n",
                             secret, PROXY_PORT, url_length);
    if (header_length < 0 || (size_t)header_length >= sizeof head)
        return fail(4, "not opened: the request could not be made");

    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return fail(3, "no socket for the proxy");
    memset(&proxy, 0, sizeof proxy);
    proxy.sin_family = AF_INET;
    proxy.sin_port = htons(PROXY_PORT);
    inet_pton(AF_INET, PROXY_ADDRESS, &proxy.sin_addr);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof wait);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &wait, sizeof wait);
    if (connect(fd, (struct sockaddr *)&proxy, sizeof proxy) != 0)
        return fail(3, "the sandbox's proxy cannot be reached at 127.0.0.1:3128");
    if (write_all(fd, head, (size_t)header_length) != 0 || write_all(fd, url, url_length) != 0)
        return fail(3, "the request could not be sent to the sandbox's proxy");
    while (got < MAX_ANSWER_BYTES) {
        ssize_t n = read(fd, answer + got, MAX_ANSWER_BYTES - got);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        got += (size_t)n;
    }
    close(fd);
    answer[got] = '\0';
    if (got == 0)
        return fail(4, "not opened: the proxy gave no answer");
    if (strncmp(answer, "HTTP/1.1 200 ", 13) == 0)
        return 0;
    say_reason(answer);
    return 4;
}
