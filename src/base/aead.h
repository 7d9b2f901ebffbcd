/* Payload sealing at rest (docs/design/formats.md §11): AES-256-GCM under
 * the cell's QUEEN_ENCRYPTION_KEY. The IV is 16 random bytes, stored whole;
 * only its first 12 are the GCM nonce. The tag is 16 bytes. Two forms of
 * the same three values:
 *   - binary (aead_seal_raw): iv(16) || tag(16) || ciphertext, what an
 *     encrypted queue's payload is stored as;
 *   - the JSON envelope {"encrypted":<b64 ct>,"iv":<b64 iv>,"authTag":<b64
 *     tag>} (standard base64 with padding), what control-plane S3 secrets
 *     are stored as, what a reader that cannot open a binary payload is
 *     given (aead_envelope), and what builds before the binary form stored
 *     payloads as.
 * Pure but for the random IV (OpenSSL's RAND_bytes); any thread. */
#ifndef QUEEN_BASE_AEAD_H
#define QUEEN_BASE_AEAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/err.h"

#define AEAD_KEY_LEN 32
/* The binary form is this much longer than its plaintext: iv and tag. */
#define AEAD_SEALED_OVERHEAD 32

/* Parse exactly 64 hex characters (either case) into key. Returns false on
 * anything else (key unchanged). */
bool aead_key_parse(const char *hex, uint8_t key[AEAD_KEY_LEN]);

/* Append the envelope sealing pt[0..n) to out. 0, or ERR_IO ("sealing
 * failed") when OpenSSL fails; out unchanged then. */
int aead_seal(const uint8_t key[AEAD_KEY_LEN], const uint8_t *pt, size_t n,
              struct buf *out, struct err *err);

/* Append the binary form sealing pt[0..n) to out (n + AEAD_SEALED_OVERHEAD
 * bytes). 0, or ERR_IO ("sealing failed") when OpenSSL fails; out unchanged
 * then. */
int aead_seal_raw(const uint8_t key[AEAD_KEY_LEN], const uint8_t *pt, size_t n,
                  struct buf *out, struct err *err);

/* Append the plaintext of the binary form s[0..n) to out. 0; ERR_INVALID
 * when n < AEAD_SEALED_OVERHEAD; ERR_FORBIDDEN when the tag does not verify
 * (wrong key or altered bytes). out unchanged on error. */
int aead_open_raw(const uint8_t key[AEAD_KEY_LEN], const uint8_t *s, size_t n,
                  struct buf *out, struct err *err);

/* The length of the envelope sealing n bytes of plaintext. */
size_t aead_envelope_len(size_t n);

/* Append the envelope of the binary form s[0..n) to out: byte for byte the
 * text aead_seal writes for the same IV, ciphertext and tag. 0; ERR_INVALID
 * when n < AEAD_SEALED_OVERHEAD. out unchanged on error. */
int aead_envelope(const uint8_t *s, size_t n, struct buf *out, struct err *err);

/* True when text[0..n) is a JSON object whose members include the string
 * fields "encrypted", "iv" and "authTag" (the sniff of docs/design/formats.md
 * §11). */
bool aead_is_envelope(const uint8_t *text, size_t n);

/* Append the plaintext of the envelope text[0..n) to out. 0; ERR_INVALID
 * when it is not an envelope (bad JSON, bad base64, wrong IV/tag length);
 * ERR_FORBIDDEN when the tag does not verify (wrong key or altered
 * bytes). out unchanged on error. */
int aead_open(const uint8_t key[AEAD_KEY_LEN], const uint8_t *text, size_t n,
              struct buf *out, struct err *err);

#endif
