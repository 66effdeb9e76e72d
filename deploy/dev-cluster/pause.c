/*
 * The pod sandbox ("pause") process of the dev cluster: holds the pod's namespaces open,
 * reaps orphaned children (it is PID 1 when the pod shares its PID namespace) and exits
 * cleanly on SIGTERM/SIGINT. Built with `gcc -static` so the image needs no libc.
 */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_stop(int sig) {
    (void)sig;
    _exit(0);
}

static void on_child(int sig) {
    int saved = errno;
    (void)sig;
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
    errno = saved;
}

static int handle(int sig, void (*fn)(int)) {
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = fn;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    return sigaction(sig, &sa, NULL);
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "-v") == 0) {
        static const char msg[] = "sandkit-pause 1\n";
        return write(1, msg, sizeof(msg) - 1) < 0;
    }
    if (handle(SIGINT, on_stop) || handle(SIGTERM, on_stop) || handle(SIGCHLD, on_child)) {
        static const char msg[] = "pause: sigaction failed\n";
        (void)!write(2, msg, sizeof(msg) - 1);
        return 1;
    }
    for (;;) {
        pause();
    }
}
