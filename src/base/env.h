/* Environment values as the settings read them (docs/design/config.md §1): a
 * blank value (empty or only whitespace) counts as unset, and values are
 * trimmed. Pure: the caller passes the raw value (from getenv or a test's
 * table). */
#ifndef QUEEN_BASE_ENV_H
#define QUEEN_BASE_ENV_H

#include <stdbool.h>
#include <stddef.h>

/* Copy raw (NULL = unset; borrowed) without leading and trailing
 * whitespace into out (cap >= 1 bytes, NUL-terminated; a longer value is
 * cut at cap - 1 bytes). Returns false, out untouched, when raw is NULL or
 * blank. */
bool env_trim(const char *raw, char *out, size_t cap);

#endif
