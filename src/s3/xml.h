/* S3 answer documents: a small tag scan over the XML S3 returns
 * (docs/design/formats.md §9). Pure. It finds the text of named elements; it is
 * not an XML parser and accepts any bytes without crashing (fuzz_s3xml).
 *   (1) <Tag> matches only that exact name (<Key> never matches <KeyCount>);
 *       attributes are skipped and <Tag/> is an empty value.
 *   (2) Entities &quot; &amp; &lt; &gt; &apos; &#NN; &#xHH; are decoded once
 *       (numeric ones to UTF-8); any other '&' sequence stays as it is.
 *   (3) Every output has a cap: a value over S3XML_MAX_VALUE bytes or a
 *       list of more than S3XML_MAX_KEYS keys is ERR_TOO_BIG. */
#ifndef QUEEN_S3_XML_H
#define QUEEN_S3_XML_H

#include <stdbool.h>
#include <stddef.h>

#include "base/buf.h"
#include "base/err.h"

#define S3XML_MAX_VALUE ((size_t)4096) /* an S3 key is at most 1024 bytes */
#define S3XML_MAX_KEYS  10000 /* a ListObjectsV2 page has at most 1000 */

/* Find the next element <tag> at or after *pos in xml[0..n). On success
 * writes its decoded text to out (reset first), moves *pos past the element
 * and returns 0. Returns ERR_NOT_FOUND when there is none (out empty, *pos
 * unchanged), ERR_TOO_BIG past the cap. */
int s3xml_next(const char *xml, size_t n, const char *tag, size_t *pos,
               struct buf *out, struct err *err);

/* The text of the first <tag>, as s3xml_next from position 0. */
int s3xml_find(const char *xml, size_t n, const char *tag, struct buf *out,
               struct err *err);

/* Whether the document is an error answer: it has a <Code> element. Then
 * code and message (either may be NULL) receive <Code> and <Message>. */
bool s3xml_error(const char *xml, size_t n, struct buf *code,
                 struct buf *message);

/* One ListObjectsV2 page. */
struct s3xml_list {
    char **keys; /* owned, each NUL-terminated */
    size_t n_keys;
    bool is_truncated;
};

/* Parse a ListObjectsV2 answer: every <Key>, and <IsTruncated>true. Fills l
 * (owned: free with s3xml_list_free). Returns 0 or ERR_TOO_BIG. */
int s3xml_parse_list(const char *xml, size_t n, struct s3xml_list *l,
                     struct err *err);
void s3xml_list_free(struct s3xml_list *l);

/* Strip one pair of surrounding double quotes from an ETag in place. */
void s3xml_unquote(struct buf *b);

#endif
