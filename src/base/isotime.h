/* Timestamp text forms and microsecond arithmetic (docs/design/formats.md §10).
 *
 * ISO-us = "YYYY-MM-DDTHH:MM:SS.ffffffZ": always six fraction digits and a
 * literal Z, UTC, proleptic Gregorian calendar. Every function here is pure;
 * division is Euclidean so instants before 1970 floor downwards. INT64_MIN is
 * the sink's "minus infinity" (MIN). */
#ifndef QUEEN_BASE_ISOTIME_H
#define QUEEN_BASE_ISOTIME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ISOTIME_MIN   INT64_MIN
#define ISOTIME_US_MS 1000LL
#define ISOTIME_US_S  1000000LL
#define ISOTIME_US_H  (3600LL * ISOTIME_US_S)
#define ISOTIME_US_D  (24LL * ISOTIME_US_H)

/* ISO-us of us: "2026-09-04T00:00:00.000000Z" (27 chars + NUL). Years
 * outside 0000..9999 are printed with as many digits as they need. */
void isotime_format_us(int64_t us, char out[32]);

/* The sink's strict parser: YYYY-MM-DDTHH:MM:SS, optionally '.' and 1-6
 * fraction digits (scaled to us), then 'Z' at the very end; length >= 20;
 * month 1-12, a day its month has (Feb 29 in leap years only), hour <= 23,
 * minute <= 59, second <= 60. Rejects offsets, a space for 'T', 7 fraction
 * digits, a missing Z. The caller words a failure as: not a broker
 * timestamp: "<input>". */
bool isotime_parse_us(const char *s, size_t n, int64_t *us);

/* The broker's lenient ms parser: YYYY-MM-DDTHH:MM:SS (the same date and
 * time checks), any number of fraction digits truncated to ms, anything
 * after ignored. */
bool isotime_parse_ms_lenient(const char *s, size_t n, int64_t *ms);

/* KV answer form: "YYYY-MM-DDTHH:MM:SS[.frac without trailing zeros]+00:00"
 * (no fraction at all when it is zero). */
void isotime_format_kv(int64_t us, char out[40]);

/* Largest multiple of unit_us that is <= us (Euclidean); MIN stays MIN.
 * unit_us > 0. */
int64_t isotime_floor(int64_t us, int64_t unit_us);
/* The boundary strictly above us: floor + unit; the next boundary of MIN is
 * MIN. Saturates at INT64_MAX. */
int64_t isotime_next_boundary(int64_t us, int64_t unit_us);

/* UTC date "YYYY-MM-DD" and hour "HH" of us, for key paths. MIN gives
 * "1970-01-01" / "00". */
void isotime_date_hour(int64_t us, char dt[11], char hour[3]);

#endif
