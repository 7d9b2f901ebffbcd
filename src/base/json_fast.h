/* A fast check of one JSON container, in two passes over 64-byte blocks:
 * the first classifies every byte at once (quotes, backslashes, brackets,
 * whitespace, controls, non-ASCII) into bit masks and finds which bytes lie
 * inside strings, the second walks only the bytes where a token starts.
 * json.c's validators ask it first and fall back to their own byte-by-byte
 * loop when it cannot say yes, so rules and error messages stay json.c's.
 *
 * Invariants:
 *   (1) It answers true only for a text json.c accepts (RFC 8259, UTF-8
 *       checked, the same depth limit, and no raw LF or CR outside strings
 *       when is_line); fuzz_json checks this on every input.
 *   (2) false means "not decided here", never "invalid": a surrogate
 *       escape, a top-level scalar, nesting past JSON_FAST_DEPTH or any
 *       error all answer false, and the caller's loop decides and names
 *       the error. */
#ifndef QUEEN_BASE_JSON_FAST_H
#define QUEEN_BASE_JSON_FAST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Deeper nesting is left to json.c's loop. */
#define JSON_FAST_DEPTH 256

/* Where a container that json_fast_container accepted ends. */
struct json_fast_span {
    size_t end;     /* past its closing bracket */
    uint32_t count; /* its direct members (pairs or elements) */
};

/* The container opening at s[at] ('{' or '['; s has n bytes): true when it
 * is valid and nested at most max_depth containers deep (itself counting
 * one), with *out filled. Bytes after out->end are not judged. */
bool json_fast_container(const char *s, size_t n, size_t at, int max_depth,
                         bool is_line, struct json_fast_span *out);

/* The byte classifier in use: 0 SSE2 (plain C off x86), 1 AVX2, 2
 * AVX-512BW. The first call picks the best the CPU has; tests run each
 * level the CPU has with json_fast_set_level (-1: the best again). */
int json_fast_level_max(void);
void json_fast_set_level(int level);

#endif
