/* Environment values as the settings read them (docs/design/config.md §1): a
 * blank value (empty or only whitespace) counts as unset, and values are
 * trimmed. Pure: the caller passes the raw value (from getenv or a test's
 * table). */
#ifndef QUEEN_BASE_ENV_H
#define QUEEN_BASE_ENV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Copy raw (NULL = unset; borrowed) without leading and trailing
 * whitespace into out (cap >= 1 bytes, NUL-terminated; a longer value is
 * cut at cap - 1 bytes). Returns false, out untouched, when raw is NULL or
 * blank. */
bool env_trim(const char *raw, char *out, size_t cap);

/* Whether the n bytes at p are blank: none, or only whitespace. */
bool env_is_blank(const char *p, size_t n);

/* Parse a decimal unsigned integer with no sign, spaces or suffix. */
bool env_parse_u64(const char *s, uint64_t *out);

/* Is s an IPv4 or IPv6 address literal? */
bool env_is_ip_literal(const char *s);

/* Split "host:port" or "[v6]:port"; host must be an IP literal, port
 * 1..65535. Writes the host without brackets. */
bool env_parse_hostport(const char *s, char *host, size_t host_cap, int *port);

#endif
