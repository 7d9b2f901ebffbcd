/* Payload sealing at rest: AES-256-GCM under the cell's key, in the binary
 * form or the JSON envelope of docs/design/formats.md §11.
 *
 * Each thread keeps an EVP cipher context per direction, keyed once with
 * the key it was last given, and a pool of RAND_bytes output the IVs come
 * from (refilled every 64 seals, and after a fork); a pthread key frees it
 * all when the thread ends. So sealing a record in the binary form costs
 * the nonce setup and the cipher, straight into the caller's output buffer,
 * with no allocation beyond its growth. The envelope is the binary form
 * base64-encoded (aead_envelope); opening an envelope decodes the
 * ciphertext into the output and decrypts it there in place, opening the
 * binary form decrypts from the stored bytes into the output.
 *
 * What it must never do: leave plaintext of a seal that failed to verify in
 * the caller's buffer (it is wiped), or accept one whose tag does not
 * verify. */
#include "base/aead.h"

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include "base/aead_seam.h"
#include "base/json.h"
#include "base/sha256.h"
#include "base/xalloc.h"

/* Bytes per EVP call (EVP takes an int). */
#define AEAD_STEP ((size_t)1 << 30)
/* Envelope bytes besides the base64 of the ciphertext: the member names and
 * punctuation (37) and the base64 of the IV and the tag (24 each). */
#define AEAD_ENVELOPE_FIXED (37 + 24 + 24)

/* Random bytes drawn per RAND_bytes call for IVs: one call per 64 seals. */
#define AEAD_POOL 1024

/* One thread's state: a context per direction, each keeping the key it was
 * last given (so a record costs the IV setup, not a key schedule), and a
 * pool of random bytes the IVs are taken from. */
struct aead_thread {
    EVP_CIPHER_CTX *ctx[2]; /* 1 = encrypt, 0 = decrypt */
    uint8_t key[2][AEAD_KEY_LEN];
    bool has_key[2];
    uint8_t pool[AEAD_POOL];
    size_t pool_used;   /* bytes of pool already handed out */
    unsigned pool_fork; /* aead_forks when the pool was drawn */
};

static pthread_once_t aead_once = PTHREAD_ONCE_INIT;
static pthread_key_t aead_tls;
static EVP_CIPHER *aead_cipher; /* fetched once, never freed */
/* Forks seen: a child must not reuse its parent's pooled IV bytes. */
static _Atomic unsigned aead_forks;

static void aead_thread_free(void *p)
{
    struct aead_thread *t = p;

    EVP_CIPHER_CTX_free(t->ctx[0]);
    EVP_CIPHER_CTX_free(t->ctx[1]);
    OPENSSL_cleanse(t, sizeof(*t));
    free(t);
}

static void aead_on_fork(void)
{
    aead_forks++;
}

static void aead_init_once(void)
{
    ASSERT(pthread_key_create(&aead_tls, aead_thread_free) == 0);
    ASSERT(pthread_atfork(NULL, NULL, aead_on_fork) == 0);
    aead_cipher = EVP_CIPHER_fetch(NULL, "AES-256-GCM", NULL);
}

/* This thread's state, made on first use; NULL when OpenSSL cannot give a
 * cipher. */
static struct aead_thread *aead_thread(void)
{
    struct aead_thread *t;

    ASSERT(pthread_once(&aead_once, aead_init_once) == 0);
    if (aead_cipher == NULL) {
        return NULL;
    }
    t = pthread_getspecific(aead_tls);
    if (t == NULL) {
        t = xcalloc(1, sizeof(*t));
        t->pool_used = AEAD_POOL;
        t->ctx[0] = EVP_CIPHER_CTX_new();
        t->ctx[1] = EVP_CIPHER_CTX_new();
        if (t->ctx[0] == NULL || t->ctx[1] == NULL ||
            pthread_setspecific(aead_tls, t) != 0) {
            aead_thread_free(t);
            return NULL;
        }
    }
    return t;
}

/* The thread's context for direction enc (1 encrypt, 0 decrypt), keyed
 * with key and set to the nonce iv[0..12). NULL when OpenSSL fails. */
static EVP_CIPHER_CTX *aead_ctx(int enc, const uint8_t key[AEAD_KEY_LEN],
                                const uint8_t iv[AEAD_IV_LEN])
{
    struct aead_thread *t = aead_thread();
    EVP_CIPHER_CTX *c;

    if (t == NULL) {
        return NULL;
    }
    c = t->ctx[enc];
    if (!t->has_key[enc] ||
        CRYPTO_memcmp(t->key[enc], key, AEAD_KEY_LEN) != 0) {
        t->has_key[enc] = false;
        if (EVP_CipherInit_ex2(c, aead_cipher, key, NULL, enc, NULL) != 1) {
            return NULL;
        }
        memcpy(t->key[enc], key, AEAD_KEY_LEN);
        t->has_key[enc] = true;
    }
    return EVP_CipherInit_ex2(c, NULL, NULL, iv, enc, NULL) == 1 ? c : NULL;
}

/* A fresh IV from the thread's pool of RAND_bytes output. 0, or ERR_IO. */
static int aead_iv(uint8_t iv[AEAD_IV_LEN], struct err *err)
{
    struct aead_thread *t = aead_thread();

    if (t == NULL) {
        return err_set(err, ERR_IO, "sealing failed: no cipher context");
    }
    if (t->pool_used + AEAD_IV_LEN > AEAD_POOL || t->pool_fork != aead_forks) {
        if (RAND_bytes(t->pool, AEAD_POOL) != 1) {
            return err_set(err, ERR_IO, "sealing failed: RAND_bytes");
        }
        t->pool_used = 0;
        t->pool_fork = aead_forks;
    }
    memcpy(iv, t->pool + t->pool_used, AEAD_IV_LEN);
    OPENSSL_cleanse(t->pool + t->pool_used, AEAD_IV_LEN);
    t->pool_used += AEAD_IV_LEN;
    return 0;
}

bool aead_key_parse(const char *hex, uint8_t key[AEAD_KEY_LEN])
{
    uint8_t k[AEAD_KEY_LEN];

    if (hex == NULL || strlen(hex) != (size_t)2 * AEAD_KEY_LEN) {
        return false;
    }
    for (size_t i = 0; i < AEAD_KEY_LEN; i++) {
        int hi = hex_digit(hex[2 * i]);
        int lo = hex_digit(hex[2 * i + 1]);
        if (hi < 0 || lo < 0) {
            OPENSSL_cleanse(k, sizeof(k));
            return false;
        }
        k[i] = (uint8_t)(hi << 4 | lo);
    }
    memcpy(key, k, AEAD_KEY_LEN);
    OPENSSL_cleanse(k, sizeof(k));
    return true;
}

/* Put out back to len start (its bytes past start are not the caller's). */
static void buf_truncate(struct buf *out, size_t start)
{
    out->len = start;
    if (out->data != NULL) {
        out->data[start] = '\0';
    }
}

/* Write the sealed form of pt[0..n) under key and iv at dst: iv, tag,
 * ciphertext (n + AEAD_SEALED_OVERHEAD bytes). */
static int seal_into(const uint8_t key[AEAD_KEY_LEN],
                     const uint8_t iv[AEAD_IV_LEN], const uint8_t *pt, size_t n,
                     uint8_t *dst, struct err *err)
{
    EVP_CIPHER_CTX *c = aead_ctx(1, key, iv);
    uint8_t *ct = dst + AEAD_SEALED_OVERHEAD;
    int len = 0;

    if (c == NULL) {
        return err_set(err, ERR_IO, "sealing failed: EVP_CipherInit_ex2");
    }
    memcpy(dst, iv, AEAD_IV_LEN);
    for (size_t i = 0; i < n; i += AEAD_STEP) {
        size_t m = n - i < AEAD_STEP ? n - i : AEAD_STEP;
        if (EVP_EncryptUpdate(c, ct + i, &len, pt + i, (int)m) != 1 ||
            (size_t)len != m) {
            return err_set(err, ERR_IO, "sealing failed: EVP_EncryptUpdate");
        }
    }
    if (EVP_EncryptFinal_ex(c, ct + n, &len) != 1 || len != 0) {
        return err_set(err, ERR_IO, "sealing failed: EVP_EncryptFinal_ex");
    }
    if (EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, AEAD_TAG_LEN,
                            dst + AEAD_IV_LEN) != 1) {
        return err_set(err, ERR_IO, "sealing failed: no tag");
    }
    return 0;
}

/* aead_seal_raw under a given iv. */
static int seal_raw_with_iv(const uint8_t key[AEAD_KEY_LEN],
                            const uint8_t iv[AEAD_IV_LEN], const uint8_t *pt,
                            size_t n, struct buf *out, struct err *err)
{
    size_t start = out->len;

    if (buf_reserve(out, n + AEAD_SEALED_OVERHEAD, err) != 0) {
        return err->code;
    }
    if (seal_into(key, iv, pt, n, (uint8_t *)out->data + start, err) != 0) {
        buf_truncate(out, start);
        return err->code;
    }
    out->len = start + n + AEAD_SEALED_OVERHEAD;
    out->data[out->len] = '\0';
    return 0;
}

int aead_seal_raw(const uint8_t key[AEAD_KEY_LEN], const uint8_t *pt, size_t n,
                  struct buf *out, struct err *err)
{
    uint8_t iv[AEAD_IV_LEN];

    return aead_iv(iv, err) != 0 ? err->code
                                 : seal_raw_with_iv(key, iv, pt, n, out, err);
}

size_t aead_envelope_len(size_t n)
{
    return AEAD_ENVELOPE_FIXED + (n + 2) / 3 * 4;
}

int aead_envelope(const uint8_t *s, size_t n, struct buf *out, struct err *err)
{
    static const char k_ct[] = "{\"encrypted\":\"";
    static const char k_iv[] = "\",\"iv\":\"";
    static const char k_tag[] = "\",\"authTag\":\"";
    size_t start = out->len;
    size_t ct = n - AEAD_SEALED_OVERHEAD;
    int rc;

    if (n < AEAD_SEALED_OVERHEAD) {
        return err_set(err, ERR_INVALID, "sealed payload of %zu B is short", n);
    }
    rc = buf_reserve(out, aead_envelope_len(ct), err);
    if (rc == 0) {
        rc = buf_append(out, k_ct, sizeof(k_ct) - 1, err);
    }
    if (rc == 0) {
        rc = base64_encode(s + AEAD_SEALED_OVERHEAD, ct, out, err);
    }
    if (rc == 0) {
        rc = buf_append(out, k_iv, sizeof(k_iv) - 1, err);
    }
    if (rc == 0) {
        rc = base64_encode(s, AEAD_IV_LEN, out, err);
    }
    if (rc == 0) {
        rc = buf_append(out, k_tag, sizeof(k_tag) - 1, err);
    }
    if (rc == 0) {
        rc = base64_encode(s + AEAD_IV_LEN, AEAD_TAG_LEN, out, err);
    }
    if (rc == 0) {
        rc = buf_append(out, "\"}", 2, err);
    }
    if (rc != 0) {
        buf_truncate(out, start);
    }
    return rc;
}

int aead_seal_with_iv(const uint8_t key[AEAD_KEY_LEN],
                      const uint8_t iv[AEAD_IV_LEN], const uint8_t *pt,
                      size_t n, struct buf *out, struct err *err)
{
    struct buf raw;
    int rc;

    buf_init(&raw, BUF_UNLIMITED);
    rc = seal_raw_with_iv(key, iv, pt, n, &raw, err);
    if (rc == 0) {
        rc = aead_envelope((const uint8_t *)raw.data, raw.len, out, err);
    }
    buf_free(&raw);
    return rc;
}

int aead_seal(const uint8_t key[AEAD_KEY_LEN], const uint8_t *pt, size_t n,
              struct buf *out, struct err *err)
{
    uint8_t iv[AEAD_IV_LEN];

    return aead_iv(iv, err) != 0 ? err->code
                                 : aead_seal_with_iv(key, iv, pt, n, out, err);
}

/* Whether "authTag" occurs in s[0..n). memmem() is the plain way, but it
 * runs about a byte at a time, and every record a fetch returns goes
 * through here: memchr() for its 'T' (rare in JSON text) skips the rest at
 * memchr's speed, and each 'T' found costs one compare. */
static bool has_auth_tag(const uint8_t *s, size_t n)
{
    static const char k[] = "authTag"; /* 'T' at 4 */
    const uint8_t *p;
    const uint8_t *end;

    if (n < 7) {
        return false;
    }
    p = s + 4;
    end = s + n - 2; /* a 'T' at or past here has no "ag" after it */
    while (p < end) {
        const uint8_t *t = memchr(p, 'T', (size_t)(end - p));
        if (t == NULL) {
            return false;
        }
        if (memcmp(t - 4, k, 7) == 0) {
            return true;
        }
        p = t + 1;
    }
    return false;
}

/* A cheap test every envelope passes: an object ('{' first) that names
 * authTag, either plainly or through an escape. Most payloads stop here, so
 * a read that sniffs every record parses only the likely ones. */
static bool maybe_envelope(const uint8_t *text, size_t n)
{
    size_t i = 0;

    while (i < n && (text[i] == ' ' || text[i] == '\t' || text[i] == '\n' ||
                     text[i] == '\r')) {
        i++;
    }
    if (i == n || text[i] != '{') {
        return false;
    }
    return memchr(text + i, '\\', n - i) != NULL ||
           has_auth_tag(text + i, n - i);
}

/* Parse text as an envelope: the root an object whose "encrypted", "iv" and
 * "authTag" are strings. Their token indices go to f[0..3). */
static bool envelope_parse(struct json_doc *d, const uint8_t *text, size_t n,
                           int f[3])
{
    static const char *const names[3] = {"encrypted", "iv", "authTag"};
    struct json_limits lim = {JSON_MAX_DEPTH_DEFAULT, 1, 0};
    struct err err;

    if (!maybe_envelope(text, n) ||
        json_parse(d, (const char *)text, n, &lim, &err) != 0) {
        return false;
    }
    for (int k = 0; k < 3; k++) {
        f[k] = json_obj_get(d, 0, names[k]);
        if (json_type(d, f[k]) != JSON_STRING) {
            json_doc_free(d);
            return false;
        }
    }
    return true;
}

bool aead_is_envelope(const uint8_t *text, size_t n)
{
    struct json_doc d;
    int f[3];

    if (!envelope_parse(&d, text, n, f)) {
        return false;
    }
    json_doc_free(&d);
    return true;
}

/* Append the base64-decoded value of string token i to out. */
static int field_decode(const struct json_doc *d, int i, struct buf *out,
                        struct err *err)
{
    const struct json_tok *t = &d->toks[i];
    struct buf s;
    int rc;

    if (!t->has_escapes) {
        return base64_decode(d->text + t->start + 1, t->len - 2, out, err);
    }
    buf_init(&s, t->len);
    rc = json_get_str(d, i, &s, err);
    if (rc == 0) {
        rc = base64_decode(s.data, s.len, out, err);
    }
    buf_free(&s);
    return rc;
}

/* Decode string token i into exactly len bytes at dst, using out's tail as
 * scratch (left as it was). */
static int field_fixed(const struct json_doc *d, int i, uint8_t *dst,
                       size_t len, struct buf *out, struct err *err)
{
    size_t start = out->len;
    int rc = field_decode(d, i, out, err);

    if (rc == 0 && out->len - start != len) {
        rc = err_set(err, ERR_INVALID, "%zu bytes, not %zu", out->len - start,
                     len);
    }
    if (rc == 0) {
        memcpy(dst, out->data + start, len);
    }
    buf_truncate(out, start);
    return rc;
}

/* Decrypt in[0..m) into out[0..m) (the same bytes, or apart) under key
 * and the iv of ivtag[0..16), and verify the tag ivtag[16..32). */
static int open_into(const uint8_t key[AEAD_KEY_LEN],
                     const uint8_t ivtag[AEAD_SEALED_OVERHEAD],
                     const uint8_t *in, uint8_t *out, size_t m, struct err *err)
{
    EVP_CIPHER_CTX *c = aead_ctx(0, key, ivtag);
    uint8_t t[AEAD_TAG_LEN];
    int len = 0;

    if (c == NULL) {
        return err_set(err, ERR_IO, "opening failed: EVP_CipherInit_ex2");
    }
    for (size_t i = 0; i < m; i += AEAD_STEP) {
        size_t k = m - i < AEAD_STEP ? m - i : AEAD_STEP;
        if (EVP_DecryptUpdate(c, out + i, &len, in + i, (int)k) != 1 ||
            (size_t)len != k) {
            return err_set(err, ERR_IO, "opening failed: EVP_DecryptUpdate");
        }
    }
    memcpy(t, ivtag + AEAD_IV_LEN, AEAD_TAG_LEN);
    if (EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_TAG, AEAD_TAG_LEN, t) != 1) {
        return err_set(err, ERR_IO, "opening failed: tag not accepted");
    }
    if (EVP_DecryptFinal_ex(c, out + m, &len) != 1) {
        return err_set(err, ERR_FORBIDDEN,
                       "envelope does not verify: wrong key or altered bytes");
    }
    return 0;
}

int aead_open_raw(const uint8_t key[AEAD_KEY_LEN], const uint8_t *s, size_t n,
                  struct buf *out, struct err *err)
{
    size_t start = out->len;
    size_t m = n - AEAD_SEALED_OVERHEAD;
    int rc;

    if (n < AEAD_SEALED_OVERHEAD) {
        return err_set(err, ERR_INVALID, "sealed payload of %zu B is short", n);
    }
    if (buf_reserve(out, m, err) != 0) {
        return err->code;
    }
    rc = open_into(key, s, s + AEAD_SEALED_OVERHEAD,
                   (uint8_t *)out->data + start, m, err);
    if (rc != 0) {
        OPENSSL_cleanse(out->data + start, m);
        buf_truncate(out, start);
        return rc;
    }
    out->len = start + m;
    out->data[out->len] = '\0';
    return 0;
}

int aead_open(const uint8_t key[AEAD_KEY_LEN], const uint8_t *text, size_t n,
              struct buf *out, struct err *err)
{
    struct json_doc d;
    uint8_t ivtag[AEAD_SEALED_OVERHEAD]; /* as in the binary form */
    size_t start = out->len;
    int f[3];
    int rc;

    if (!envelope_parse(&d, text, n, f)) {
        return err_set(err, ERR_INVALID,
                       "not an envelope: a JSON object with string fields "
                       "encrypted, iv and authTag");
    }
    rc = field_fixed(&d, f[1], ivtag, AEAD_IV_LEN, out, err);
    if (rc == ERR_INVALID) {
        err_wrap(err, "envelope iv: ");
    }
    if (rc == 0) {
        rc = field_fixed(&d, f[2], ivtag + AEAD_IV_LEN, AEAD_TAG_LEN, out, err);
        if (rc == ERR_INVALID) {
            err_wrap(err, "envelope authTag: ");
        }
    }
    if (rc == 0) {
        rc = field_decode(&d, f[0], out, err);
        if (rc == ERR_INVALID) {
            err_wrap(err, "envelope encrypted: ");
        }
    }
    json_doc_free(&d);
    if (rc == 0) {
        uint8_t *p = (uint8_t *)out->data + start;
        rc = open_into(key, ivtag, p, p, out->len - start, err);
        if (rc != 0) {
            OPENSSL_cleanse(out->data + start, out->len - start);
        }
    }
    if (rc != 0) {
        buf_truncate(out, start);
    }
    return rc;
}
