/* The test seam of base/aead: sealing under a caller's IV, so a unit test
 * can check the cipher against a published known-answer vector. Only
 * src/base/aead.c and tests include this header; production code seals
 * through aead_seal, which draws the IV from RAND_bytes. A reused IV under
 * one key breaks GCM, which is why this entry is not in base/aead.h. */
#ifndef QUEEN_BASE_AEAD_SEAM_H
#define QUEEN_BASE_AEAD_SEAM_H

#include "base/aead.h"

#define AEAD_IV_LEN    16 /* stored whole in the envelope */
#define AEAD_NONCE_LEN 12 /* the IV's first 12 bytes are the GCM nonce */
#define AEAD_TAG_LEN   16

/* aead_seal with iv given instead of drawn. Same contract otherwise. */
int aead_seal_with_iv(const uint8_t key[AEAD_KEY_LEN],
                      const uint8_t iv[AEAD_IV_LEN], const uint8_t *pt,
                      size_t n, struct buf *out, struct err *err);

#endif
