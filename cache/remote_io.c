/* remote_io.c — Redis connections bounded by a deadline (design in
 * remote_io.h). */
#include "cache/remote_io.h"

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

uint64_t rio_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static enum rio_fault failed(enum rio_fault kind, char *why, size_t why_len, const char *fmt, const char *arg)
{
    snprintf(why, why_len, fmt, arg);
    return kind;
}

/* Waits until fd is ready for `events` or the deadline passes. */
static enum rio_fault wait_fd(int fd, short events, uint64_t deadline, char *why, size_t why_len)
{
    for (;;) {
        uint64_t now = rio_now_ns();
        if (now >= deadline) return failed(RIO_TIMEOUT, why, why_len, "timed out%s", "");
        struct pollfd p = {fd, events, 0};
        int n = poll(&p, 1, (int)((deadline - now + 999999) / 1000000));
        if (n > 0) return RIO_OK; /* errors and hang-ups too: the next read or write reports them */
        if (n < 0 && errno != EINTR) return failed(RIO_LOST, why, why_len, "poll: %s", strerror(errno));
    }
}

/* A lookup glibc still owns after a timed-out request it could not cancel
 * (it writes into it when done): left to it, at most one per breaker
 * period. */
struct lookup {
    struct gaicb cb;
    struct addrinfo hints;
    char name[];
};

/* The host's first address as numeric text, before deadline, so that the
 * connect below never waits for a name server. */
static enum rio_fault resolve(const char *host, uint64_t deadline, char *ip, size_t ip_len, char *why,
                              size_t why_len)
{
    struct addrinfo numeric = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICHOST}, *res = NULL;
    if (getaddrinfo(host, NULL, &numeric, &res) == 0) {
        freeaddrinfo(res);
        snprintf(ip, ip_len, "%s", host);
        return RIO_OK;
    }
    size_t n = strlen(host) + 1;
    struct lookup *l = calloc(1, sizeof *l + n);
    if (!l) return failed(RIO_LOST, why, why_len, "out of memory%s", "");
    memcpy(l->name, host, n);
    l->hints.ai_socktype = SOCK_STREAM;
    l->cb.ar_name = l->name;
    l->cb.ar_request = &l->hints;
    struct gaicb *list[1] = {&l->cb};
    if (getaddrinfo_a(GAI_NOWAIT, list, 1, NULL) != 0) {
        free(l);
        return failed(RIO_LOST, why, why_len, "cannot look up %s", host);
    }
    int e;
    while ((e = gai_error(&l->cb)) == EAI_INPROGRESS) {
        uint64_t now = rio_now_ns();
        if (now >= deadline) break;
        struct timespec left = {(time_t)((deadline - now) / 1000000000u), (long)((deadline - now) % 1000000000u)};
        gai_suspend((const struct gaicb *const *)list, 1, &left);
    }
    if (e == EAI_INPROGRESS) {
        if (gai_cancel(&l->cb) != EAI_NOTCANCELED) {
            if (l->cb.ar_result) freeaddrinfo(l->cb.ar_result);
            free(l);
        }
        return failed(RIO_TIMEOUT, why, why_len, "timed out looking up %s", host);
    }
    enum rio_fault rc = RIO_OK;
    if (e != 0 || !l->cb.ar_result ||
        getnameinfo(l->cb.ar_result->ai_addr, l->cb.ar_result->ai_addrlen, ip, (socklen_t)ip_len, NULL, 0,
                    NI_NUMERICHOST) != 0)
        rc = failed(RIO_LOST, why, why_len, "cannot look up %s", host);
    if (l->cb.ar_result) freeaddrinfo(l->cb.ar_result);
    free(l);
    return rc;
}

redisReply *rio_vcommand(redisContext *c, uint64_t deadline, size_t max_reply, enum rio_fault *fault, char *why,
                         size_t why_len, const char *fmt, va_list ap)
{
    /* The command is sent here with send(MSG_NOSIGNAL), not through
     * hiredis's write(): a server that hung up must not raise SIGPIPE in
     * the application. */
    char *cmd = NULL;
    int len = redisvFormatCommand(&cmd, fmt, ap);
    if (len < 0) {
        *fault = failed(RIO_LOST, why, why_len, "cannot format a command%s", "");
        return NULL;
    }
    size_t sent = 0;
    *fault = RIO_OK;
    while (sent < (size_t)len && *fault == RIO_OK) {
        ssize_t n = send(c->fd, cmd + sent, (size_t)len - sent, MSG_NOSIGNAL);
        if (n > 0) sent += (size_t)n;
        else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) *fault = wait_fd(c->fd, POLLOUT, deadline, why, why_len);
        else if (n < 0 && errno != EINTR) *fault = failed(RIO_LOST, why, why_len, "connection lost (%s)", strerror(errno));
    }
    redisFreeCommand(cmd);
    if (*fault) return NULL;
    for (;;) {
        void *reply = NULL;
        if (redisGetReplyFromReader(c, &reply) != REDIS_OK) {
            *fault = failed(c->err == REDIS_ERR_PROTOCOL ? RIO_GARBAGE : RIO_LOST, why, why_len,
                            c->err == REDIS_ERR_PROTOCOL ? "not a Redis reply (%s)" : "%s", c->errstr);
            return NULL;
        }
        if (reply) return reply;
        if (c->reader->len - c->reader->pos > max_reply) {
            *fault = failed(RIO_OVERSIZE, why, why_len, "a reply larger than %s", "the largest value allowed");
            return NULL;
        }
        if ((*fault = wait_fd(c->fd, POLLIN, deadline, why, why_len)) != RIO_OK) return NULL;
        if (redisBufferRead(c) != REDIS_OK) {
            *fault = failed(RIO_LOST, why, why_len, "connection lost (%s)", c->errstr);
            return NULL;
        }
    }
}

redisReply *rio_command(redisContext *c, uint64_t deadline, size_t max_reply, enum rio_fault *fault, char *why,
                        size_t why_len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *rep = rio_vcommand(c, deadline, max_reply, fault, why, why_len, fmt, ap);
    va_end(ap);
    return rep;
}

/* AUTH or SELECT at connect: NULL (done) or the reason it was refused. */
static const char *setup(redisContext *c, const struct rio_target *t, uint64_t deadline, enum rio_fault *fault,
                         char *why, size_t why_len)
{
    redisReply *rep = NULL;
    if (t->password) {
        rep = t->user ? rio_command(c, deadline, 4096, fault, why, why_len, "AUTH %s %s", t->user, t->password)
                      : rio_command(c, deadline, 4096, fault, why, why_len, "AUTH %s", t->password);
        int refused = rep && rep->type == REDIS_REPLY_ERROR;
        if (rep) freeReplyObject(rep);
        if (!rep) return why;
        if (refused) return *fault = RIO_REFUSED, "authentication refused";
    }
    if (t->db) {
        rep = rio_command(c, deadline, 4096, fault, why, why_len, "SELECT %d", t->db);
        int refused = rep && rep->type == REDIS_REPLY_ERROR;
        if (rep) freeReplyObject(rep);
        if (!rep) return why;
        if (refused) return *fault = RIO_REFUSED, "cannot select the database";
    }
    return NULL;
}

redisContext *rio_connect(const struct rio_target *t, uint64_t deadline, enum rio_fault *fault, char *why,
                          size_t why_len)
{
    char ip[64];
    redisContext *c = NULL;
    *fault = RIO_OK;
    if (t->unix_path) {
        c = redisConnectUnixNonBlock(t->unix_path);
    } else {
        if ((*fault = resolve(t->host, deadline, ip, sizeof ip, why, why_len)) != RIO_OK) return NULL;
        c = redisConnectNonBlock(ip, t->port);
    }
    if (!c || c->err) {
        *fault = failed(RIO_LOST, why, why_len, "cannot connect (%s)", c ? c->errstr : "out of memory");
        if (c) redisFree(c);
        return NULL;
    }
    /* The connect finishes (or fails) when the socket becomes writable. */
    int err = 0;
    socklen_t len = sizeof err;
    if ((*fault = wait_fd(c->fd, POLLOUT, deadline, why, why_len)) == RIO_OK &&
        (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0))
        *fault = failed(RIO_LOST, why, why_len, "cannot connect (%s)", strerror(err ? err : errno));
    const char *refused = *fault ? why : setup(c, t, deadline, fault, why, why_len);
    if (refused) {
        if (refused != why) snprintf(why, why_len, "%s", refused);
        redisFree(c);
        return NULL;
    }
    return c;
}
