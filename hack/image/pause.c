/*
 * pause: the process that holds a pod sandbox's namespaces (the kubelet's "pause" container).
 * It sleeps until SIGINT or SIGTERM, then exits 0; as PID 1 of a shared PID namespace it reaps
 * the children it inherits (SIGCHLD), as the upstream kubernetes/build/pause/linux/pause.c does.
 * Built by hack/image/pause.sh: gcc -static -Os, the only file of its image.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define VERSION "policy-scheduler-pause 1"

static void on_stop(int sig) {
    (void)sig;
    _exit(0);
}

static void on_child(int sig) {
    (void)sig;
    int saved = errno;
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
    errno = saved;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "-v") == 0) {
        puts(VERSION);
        return 0;
    }
    if (getpid() != 1)
        fprintf(stderr, "pause: warning: not PID 1\n");

    struct sigaction stop = {.sa_handler = on_stop};
    sigemptyset(&stop.sa_mask);
    if (sigaction(SIGINT, &stop, NULL) < 0 || sigaction(SIGTERM, &stop, NULL) < 0) {
        perror("pause: sigaction");
        return 1;
    }
    struct sigaction child = {.sa_handler = on_child, .sa_flags = SA_NOCLDSTOP | SA_RESTART};
    sigemptyset(&child.sa_mask);
    if (sigaction(SIGCHLD, &child, NULL) < 0) {
        perror("pause: sigaction");
        return 2;
    }
    for (;;)
        pause();
    fprintf(stderr, "pause: error: infinite loop terminated\n");
    return 42;
}
