/* remote_io.h — the remote tier's connections to Redis, every step against
 * an absolute deadline (internal to cache/remote_redis.c).
 *
 * Design. hiredis's blocking calls bound each read or write by a socket
 * timeout, so a server that trickles its reply (each byte in time) or
 * sends a huge value slowly holds a caller for as long as it likes. Here a
 * connection is non-blocking and every step of it — resolving the host name
 * (getaddrinfo_a), connecting, writing the command, reading the reply —
 * waits in poll() only until one deadline (CLOCK_MONOTONIC nanoseconds)
 * that the caller set for the whole exchange. hiredis still formats
 * commands and parses replies (redisAppendCommand, redisBufferWrite,
 * redisBufferRead, redisGetReplyFromReader); no protocol code is written
 * here. A reply is also bounded in size: more than max_reply bytes waiting
 * unparsed ends the exchange (a server announcing a huge value).
 *
 * After any fault the connection is in an unknown state: the caller frees it.
 * Thread safety: a connection is used by one thread at a time.
 */
#ifndef CLSHIM_REMOTE_IO_H
#define CLSHIM_REMOTE_IO_H

#include <hiredis/hiredis.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "cache/remote_backend.h"

/* Where the server is and who we are. */
struct rio_target {
    const char *host, *unix_path; /* one of the two */
    int port, db;
    const char *user, *password;  /* NULL: none */
};

/* A new connection, authenticated and on the right database, before
 * deadline: NULL with *fault and the reason in why (never a credential). */
redisContext *rio_connect(const struct rio_target *t, uint64_t deadline, enum rio_fault *fault, char *why,
                          size_t why_len);

/* One command and its reply before deadline, the reply at most max_reply
 * bytes of protocol. A reply of type REDIS_REPLY_ERROR is returned as it is
 * (*fault RIO_OK): the caller decides. NULL with *fault and why otherwise. */
redisReply *rio_command(redisContext *c, uint64_t deadline, size_t max_reply, enum rio_fault *fault, char *why,
                        size_t why_len, const char *fmt, ...);
redisReply *rio_vcommand(redisContext *c, uint64_t deadline, size_t max_reply, enum rio_fault *fault, char *why,
                         size_t why_len, const char *fmt, va_list ap);

#endif
