/*
 * lnk-init: the sandbox's init, the first program inside and the last of ours, in C.
 * It does what lnk_wrap/init.py does, step for step, with the same options, messages and
 * exit statuses; the launcher runs it when bin/setup built it, else init.py
 * (lnk_wrap.launch.init_argv; docs/decisions/0039-the-start-back.md).
 *
 *     lnk-init --filter sockets|programs --watch-fd N [--go-fd N] --rule ACCESS:PATH …
 *              -- COMMAND [ARG…]
 *
 * Why C: every sandbox start waits for its init, and a Python init is an interpreter's
 * start and its imports (ctypes for Landlock and seccomp), some 15 ms of a ~39 ms start
 * on a busy machine; this program starts in well under one.
 *
 * Order of operations, each checked; any failure and the program is not run (exit 125,
 * one line "lnk-sandbox-init: REASON; the program was not run", as init.py says it):
 * 1. Read the options. ACCESS is a name of ACCESS_RIGHTS below, which holds
 *    lnk_wrap.landlock.ACCESS_RIGHTS (tests/test_sandbox_init.py holds the two equal).
 * 2. Open a sock_diag netlink socket (it belongs to the sandbox's network namespace: the
 *    watch outside lists the unix sockets bound in it). Start the thread that will send
 *    the filter's listener: a seccomp filter binds the thread that installs it and the
 *    threads it starts after, not one started before, and under the filter this sendmsg
 *    would be handed to the watch, which has no listener yet. The thread runs nothing but
 *    that send; it has ended before this goes on (pthread_join), and exec ends every
 *    other thread anyway (the kernel's de_thread). Install the filter (read from
 *    ../filters/ARCH-FILTER.bpf beside this program: lnk_wrap.seccomp_filter compiles
 *    it), check it took effect (PR_GET_SECCOMP reads 2), let the thread send the listener
 *    and the netlink socket to the watch (SCM_RIGHTS, label "L", as
 *    lnk_common.fdpass.send_fds), close both, and wait for the watch's "+": nothing runs
 *    unwatched.
 * 3. With --go-fd: wait for the launcher's go-ahead, exactly "x"; anything else, the end
 *    of the pipe included, and nothing runs.
 * 4. Leave the loader's injection variables out of the program's environment (LD_* and
 *    LOADER_VARIABLES below: lnk_wrap.outside.LOADER_VARIABLES, held equal by the test).
 * 5. Close every inherited descriptor but 0, 1 and 2 (close_range).
 * 6. Apply Landlock (best effort by ABI, as lnk_wrap/landlock.py), then check it took
 *    effect: the sandbox's root folder, which no rule grants, must not open.
 * 7. exec the command, searched on PATH as a shell does (127 not found, 126 cannot run).
 *
 * Trust: the launcher outside wrote this argv (bubblewrap passes it on); nothing of the
 * program's has run yet. The environment is only copied, and PATH read from it.
 * Built by bin/setup: cc -O2 -s -static -pthread.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/netlink.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__x86_64__)
#define ARCH "x86_64"
#elif defined(__aarch64__)
#define ARCH "aarch64"
#else
#error "no seccomp filter is built for this architecture (lnk_wrap.seccomp_filter)"
#endif

#define EXIT_SANDBOX_FAILED 125
#define EXIT_CANNOT_RUN 126
#define EXIT_NOT_FOUND 127

/* The kernel's numbers (include/uapi/linux/…), written out: the same on every
 * architecture for the calls added after 4.20, and not in every libc's headers. */
#define SYS_LANDLOCK_CREATE_RULESET 444
#define SYS_LANDLOCK_ADD_RULE 445
#define SYS_LANDLOCK_RESTRICT_SELF 446
#define SYS_CLOSE_RANGE 436
#define LANDLOCK_CREATE_RULESET_VERSION 1
#define LANDLOCK_RULE_PATH_BENEATH 1
#define SECCOMP_SET_MODE_FILTER_ 1
#define SECCOMP_FILTER_FLAG_NEW_LISTENER_ (1UL << 3)
#define SECCOMP_MODE_FILTER_ 2
/* A BPF program holds at most 4096 instructions of 8 bytes (BPF_MAXINSNS). */
#define MAX_INSTRUCTIONS 4096
/* A file descriptor's number on the line: digits, fewer than INT_MAX's ten. */
#define MAX_FD_DIGITS 9

/* Landlock's filesystem rights (lnk_wrap/landlock.py names each, with its ABI). */
#define EXECUTE (1ULL << 0)
#define WRITE_FILE (1ULL << 1)
#define READ_FILE (1ULL << 2)
#define READ_DIR (1ULL << 3)
#define TRUNCATE (1ULL << 14)
#define IOCTL_DEV (1ULL << 15)
#define FS_ALL ((1ULL << 16) - 1)
#define MAKE_SPECIAL ((1ULL << 10) | (1ULL << 6) | (1ULL << 11)) /* FIFO, char, block */
#define FS_FILE_ONLY (EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV)
#define FS_READ (READ_FILE | READ_DIR)
#define FS_WRITE (FS_ALL & ~MAKE_SPECIAL)
#define SCOPE_ABSTRACT_UNIX_SOCKET (1ULL << 0)
#define SCOPE_SIGNAL (1ULL << 1)

struct access_right {
    const char *name;
    uint64_t rights;
};

/* lnk_wrap.landlock.ACCESS_RIGHTS, one line a name (the test reads these lines). */
static const struct access_right ACCESS_RIGHTS[] = {
    {"read", FS_READ | EXECUTE},
    {"write", FS_WRITE},
    {"temp", FS_ALL},
    {"devices", READ_FILE | WRITE_FILE | READ_DIR | IOCTL_DEV},
    {"proc", FS_READ},
    {"read-no-exec", FS_READ},
    {"write-no-exec", FS_WRITE & ~EXECUTE},
    {"temp-no-exec", FS_ALL & ~EXECUTE},
    {"run", FS_READ | EXECUTE},
};

/* lnk_wrap.outside.LOADER_VARIABLES (every LD_* goes too). */
static const char *const LOADER_VARIABLES[] = {
    "GCONV_PATH", "GETCONF_DIR", "GLIBC_TUNABLES", "HOSTALIASES", "LOCALDOMAIN", "LOCPATH",
    "MALLOC_TRACE", "NIS_PATH", "NLSPATH", "RESOLV_HOST_CONF", "RES_OPTIONS",
};

#define COUNT(array) (sizeof(array) / sizeof((array)[0]))

struct ruleset_attr {
    uint64_t handled_access_fs;
    uint64_t handled_access_net;
    uint64_t scoped;
};

struct path_beneath_attr {
    uint64_t allowed_access;
    int32_t parent_fd;
} __attribute__((packed));

struct rule {
    const char *path;
    uint64_t rights;
};

struct options {
    const char *filter;
    int watch_fd;
    int go_fd;
    struct rule *rules;
    size_t rule_count;
    char **command;
};

static _Noreturn void refuse(const char *format, ...) __attribute__((format(printf, 1, 2)));

static _Noreturn void refuse(const char *format, ...) {
    char reason[4096];
    va_list arguments;
    va_start(arguments, format);
    vsnprintf(reason, sizeof reason, format, arguments);
    va_end(arguments);
    fprintf(stderr, "lnk-sandbox-init: %s; the program was not run\n", reason);
    exit(EXIT_SANDBOX_FAILED);
}

static int parse_fd(const char *value) {
    size_t length = strlen(value);
    if (length == 0 || length > MAX_FD_DIGITS || strspn(value, "0123456789") != length)
        return -1;
    return atoi(value);
}

static void parse(int argc, char **argv, struct options *options) {
    int index = 1;
    options->filter = NULL;
    options->watch_fd = options->go_fd = -1;
    options->rule_count = 0;
    options->rules = calloc((size_t)argc, sizeof *options->rules);
    if (options->rules == NULL) refuse("out of memory");
    while (index < argc && strcmp(argv[index], "--") != 0) {
        const char *option = argv[index];
        if (index + 1 >= argc) refuse("%s needs a value", option);
        const char *value = argv[index + 1];
        if (strcmp(option, "--rule") == 0) {
            const char *colon = strchr(value, ':');
            const struct access_right *found = NULL;
            for (size_t at = 0; colon != NULL && at < COUNT(ACCESS_RIGHTS); at++)
                if (strlen(ACCESS_RIGHTS[at].name) == (size_t)(colon - value)
                    && strncmp(ACCESS_RIGHTS[at].name, value, (size_t)(colon - value)) == 0)
                    found = &ACCESS_RIGHTS[at];
            if (found == NULL || colon[1] != '/') refuse("not a rule: '%s'", value);
            options->rules[options->rule_count].path = colon + 1;
            options->rules[options->rule_count++].rights = found->rights;
        } else if (strcmp(option, "--filter") == 0 && options->filter == NULL
                   && (strcmp(value, "sockets") == 0 || strcmp(value, "programs") == 0)) {
            options->filter = value;
        } else if (strcmp(option, "--watch-fd") == 0 && options->watch_fd < 0
                   && parse_fd(value) >= 0) {
            options->watch_fd = parse_fd(value);
        } else if (strcmp(option, "--go-fd") == 0 && options->go_fd < 0 && parse_fd(value) >= 0) {
            options->go_fd = parse_fd(value);
        } else {
            refuse("unknown option '%s' (expected --filter, --watch-fd, --go-fd, "
                   "--rule ACCESS:PATH)", option);
        }
        index += 2;
    }
    if (index >= argc || index + 1 >= argc) refuse("expected OPTIONS -- COMMAND [ARG…]");
    options->command = &argv[index + 1];
    if (options->filter == NULL)
        refuse("--filter is required: no sandbox runs without its seccomp filter");
    if (options->watch_fd < 0) refuse("--watch-fd is required: no sandbox runs without its watch");
}

/* The thread that sends the listener (see 2. above). */
struct hand_over {
    int watch_fd;
    int diag;
    int listener; /* -1: the filter failed, nothing is sent */
    int sent;
    sem_t installed;
};

static void *hand_over_run(void *argument) {
    struct hand_over *hand_over = argument;
    while (sem_wait(&hand_over->installed) != 0)
        if (errno != EINTR) return NULL;
    if (hand_over->listener < 0) return NULL;
    int fds[2] = {hand_over->listener, hand_over->diag};
    char label = 'L';
    struct iovec data = {.iov_base = &label, .iov_len = 1};
    union {
        char buffer[CMSG_SPACE(sizeof fds)];
        struct cmsghdr align;
    } control;
    memset(&control, 0, sizeof control);
    struct msghdr message = {.msg_iov = &data, .msg_iovlen = 1,
                             .msg_control = control.buffer, .msg_controllen = sizeof control.buffer};
    struct cmsghdr *header = CMSG_FIRSTHDR(&message);
    header->cmsg_level = SOL_SOCKET;
    header->cmsg_type = SCM_RIGHTS;
    header->cmsg_len = CMSG_LEN(sizeof fds);
    memcpy(CMSG_DATA(header), fds, sizeof fds);
    ssize_t done;
    do done = sendmsg(hand_over->watch_fd, &message, MSG_NOSIGNAL);
    while (done < 0 && errno == EINTR);
    hand_over->sent = done == 1;
    return NULL;
}

static void read_filter(const char *self, const char *filter, struct sock_fprog *program) {
    static unsigned char bytes[MAX_INSTRUCTIONS * 8 + 1];
    char path[4096];
    const char *slash = strrchr(self, '/');
    if (self[0] != '/' || slash == NULL) refuse("started as %s, not by its absolute path", self);
    int length = snprintf(path, sizeof path, "%.*s/../filters/%s-%s.bpf", (int)(slash - self),
                          self, ARCH, filter);
    if (length < 0 || (size_t)length >= sizeof path) refuse("the filter's path is too long");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) refuse("cannot read the seccomp filter %s: %s", path, strerror(errno));
    size_t total = 0;
    for (;;) {
        ssize_t got = read(fd, bytes + total, sizeof bytes - total);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) refuse("cannot read the seccomp filter %s: %s", path, strerror(errno));
        if (got == 0 || (total += (size_t)got) == sizeof bytes) break;
    }
    close(fd);
    if (total % 8 != 0 || total == 0 || total / 8 > MAX_INSTRUCTIONS)
        refuse("not a BPF program (%zu bytes)", total);
    program->len = (unsigned short)(total / 8);
    program->filter = (struct sock_filter *)bytes;
}

static int read_byte(int fd) {
    unsigned char byte;
    ssize_t got;
    do got = read(fd, &byte, 1);
    while (got < 0 && errno == EINTR);
    close(fd);
    return got == 1 ? byte : -1;
}

/* 2.: the filter, first; its listener handed to the watch, which acknowledges it. */
static void install_filter(const char *self, const struct options *options) {
    struct hand_over hand_over = {.watch_fd = options->watch_fd, .listener = -1};
    struct sock_fprog program;
    pthread_t thread;
    hand_over.diag = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
    if (hand_over.diag < 0)
        refuse("cannot open the sandbox's sock_diag socket: %s", strerror(errno));
    if (sem_init(&hand_over.installed, 0, 0) != 0) refuse("sem_init: %s", strerror(errno));
    int started = pthread_create(&thread, NULL, hand_over_run, &hand_over);
    if (started != 0)
        refuse("cannot start the thread that hands the filter's listener to the watch: %s",
               strerror(started));
    read_filter(self, options->filter, &program);
    const char *failed = NULL;
    int error = 0;
    long listener = -1;
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
        failed = "prctl(PR_SET_NO_NEW_PRIVS)", error = errno;
    } else if ((listener = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER_,
                                   SECCOMP_FILTER_FLAG_NEW_LISTENER_, &program)) < 0) {
        failed = "seccomp(SET_MODE_FILTER)", error = errno;
    } else {
        int mode = prctl(PR_GET_SECCOMP, 0, 0, 0, 0);
        if (mode < 0) failed = "prctl(PR_GET_SECCOMP)", error = errno;
        else if (mode != SECCOMP_MODE_FILTER_) failed = "the seccomp filter did not take effect";
        else hand_over.listener = (int)listener; /* sent only once checked */
    }
    sem_post(&hand_over.installed);
    pthread_join(thread, NULL);
    close(hand_over.diag);
    if (listener >= 0) close((int)listener);
    if (failed != NULL && error != 0) refuse("%s: %s", failed, strerror(error));
    if (failed != NULL) refuse("%s", failed);
    if (!hand_over.sent) refuse("the filter's listener could not be sent to the sandbox's watch");
    if (read_byte(options->watch_fd) != '+')
        refuse("the sandbox's watch is not there to take the filter's listener");
}

/* 4.: the environment without the loader's variables, in a new array. */
static char **without_loader_variables(char **environment) {
    size_t count = 0, kept = 0;
    while (environment[count] != NULL) count++;
    char **result = calloc(count + 1, sizeof *result);
    if (result == NULL) refuse("out of memory");
    for (size_t at = 0; at < count; at++) {
        const char *entry = environment[at];
        const char *equals = strchr(entry, '=');
        if (equals == NULL || strncmp(entry, "LD_", 3) == 0) continue;
        int loader = 0;
        for (size_t name = 0; name < COUNT(LOADER_VARIABLES); name++)
            loader |= strlen(LOADER_VARIABLES[name]) == (size_t)(equals - entry)
                      && strncmp(LOADER_VARIABLES[name], entry, (size_t)(equals - entry)) == 0;
        if (!loader) result[kept++] = environment[at];
    }
    return result;
}

static uint64_t handled_by(long abi) {
    if (abi == 1) return (1ULL << 13) - 1;
    if (abi == 2) return (1ULL << 14) - 1;
    if (abi == 3 || abi == 4) return (1ULL << 15) - 1;
    return FS_ALL;
}

/* 6.: Landlock, applied and verified. */
static void apply_landlock(const struct options *options) {
    long abi = syscall(SYS_LANDLOCK_CREATE_RULESET, NULL, 0, LANDLOCK_CREATE_RULESET_VERSION);
    if (abi < 0 && (errno == ENOSYS || errno == EOPNOTSUPP))
        refuse("Landlock is not available in this kernel");
    if (abi < 1) refuse("landlock_create_ruleset (its ABI): %s", strerror(errno));
    uint64_t handled = handled_by(abi);
    struct ruleset_attr attr = {
        .handled_access_fs = handled,
        .scoped = abi >= 6 ? SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL : 0};
    size_t size = abi >= 6 ? 24 : abi >= 4 ? 16 : 8;
    long ruleset = syscall(SYS_LANDLOCK_CREATE_RULESET, &attr, size, 0);
    if (ruleset < 0) refuse("landlock_create_ruleset: %s", strerror(errno));
    for (size_t at = 0; at < options->rule_count; at++) {
        const char *path = options->rules[at].path;
        struct stat status;
        int fd = open(path, O_PATH | O_CLOEXEC);
        if (fd < 0) refuse("cannot open %s for a rule: %s", path, strerror(errno));
        if (fstat(fd, &status) != 0) refuse("cannot look at %s for a rule: %s", path, strerror(errno));
        struct path_beneath_attr beneath = {.allowed_access = options->rules[at].rights & handled,
                                            .parent_fd = fd};
        if (!S_ISDIR(status.st_mode)) beneath.allowed_access &= FS_FILE_ONLY;
        if (syscall(SYS_LANDLOCK_ADD_RULE, ruleset, LANDLOCK_RULE_PATH_BENEATH, &beneath, 0) != 0)
            refuse("landlock_add_rule %s: %s", path, strerror(errno));
        close(fd);
    }
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
        refuse("prctl(PR_SET_NO_NEW_PRIVS): %s", strerror(errno));
    if (syscall(SYS_LANDLOCK_RESTRICT_SELF, ruleset, 0) != 0)
        refuse("landlock_restrict_self: %s", strerror(errno));
    close((int)ruleset);
    int root = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (root >= 0)
        refuse("Landlock did not take effect: the sandbox's root folder is still readable");
    if (errno != EACCES && errno != EPERM)
        refuse("cannot check Landlock on the sandbox's root folder: %s", strerror(errno));
}

/* 7.: execvpe as a shell does it: a name without a slash is looked for on PATH, a folder
 * that refuses (EACCES) is passed over but remembered. */
static _Noreturn void exec_search(char **command, char **environment) {
    const char *name = command[0];
    int error;
    if (strchr(name, '/') != NULL) {
        execve(name, command, environment);
        error = errno;
    } else {
        const char *path = "/usr/local/bin:/usr/bin:/bin";
        for (char **entry = environment; *entry != NULL; entry++)
            if (strncmp(*entry, "PATH=", 5) == 0) {
                path = *entry + 5; /* the first, as Python's os.environ takes it */
                break;
            }
        int denied = 0;
        for (;;) {
            size_t folder = strcspn(path, ":");
            char candidate[4096];
            int length = folder == 0 ? snprintf(candidate, sizeof candidate, "./%s", name)
                                     : snprintf(candidate, sizeof candidate, "%.*s/%s",
                                                (int)folder, path, name);
            if (length < 0 || (size_t)length >= sizeof candidate) {
                error = ENAMETOOLONG;
            } else {
                execve(candidate, command, environment);
                error = errno;
            }
            if (error == EACCES || error == EPERM) denied = denied ? denied : error;
            else if (error != ENOENT && error != ENOTDIR) break; /* said as it is */
            if (path[folder] == '\0') {
                error = denied ? denied : ENOENT;
                break;
            }
            path += folder + 1;
        }
    }
    if (error == ENOENT) {
        fprintf(stderr, "lnk-sandbox: %s: not found in the sandbox\n", name);
        exit(EXIT_NOT_FOUND);
    }
    if (error == EACCES || error == EPERM)
        fprintf(stderr, "lnk-sandbox: %s: cannot be run in the sandbox (permission denied)\n", name);
    else
        fprintf(stderr, "lnk-sandbox: %s: cannot be run: %s\n", name, strerror(error));
    exit(EXIT_CANNOT_RUN);
}

int main(int argc, char **argv) {
    extern char **environ;
    struct options options;
    parse(argc, argv, &options);
    install_filter(argv[0], &options);
    if (options.go_fd >= 0 && read_byte(options.go_fd) != 'x')
        refuse("the sandbox's ways out were not made (its launcher refused or ended)");
    char **environment = without_loader_variables(environ);
    if (syscall(SYS_CLOSE_RANGE, 3U, ~0U, 0U) != 0)
        refuse("cannot close the inherited descriptors: %s", strerror(errno));
    apply_landlock(&options);
    exec_search(options.command, environment);
}
