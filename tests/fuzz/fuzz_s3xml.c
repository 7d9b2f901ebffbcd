/* Fuzz target for the S3 answer scanner: any bytes as an S3 XML answer
 * (UploadId, ETag, Key lists, Error Code/Message) must neither crash nor
 * read out of bounds, and a found value never exceeds its cap. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "s3/xml.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* A heap copy of exactly size bytes so ASan sees any overread. */
    char *x = malloc(size == 0 ? 1 : size);
    struct buf v;
    struct buf code;
    struct err err = {0};
    struct s3xml_list l;
    static const char *const tags[] = {"UploadId", "ETag",    "Key",
                                       "Code",     "Message", "IsTruncated"};

    if (x == NULL) {
        return 0;
    }
    if (size > 0) {
        memcpy(x, data, size);
    }
    buf_init(&v, BUF_UNLIMITED);
    buf_init(&code, BUF_UNLIMITED);
    for (size_t i = 0; i < sizeof(tags) / sizeof(tags[0]); i++) {
        if (s3xml_find(x, size, tags[i], &v, &err) == 0 &&
            v.len > S3XML_MAX_VALUE * 4) {
            abort(); /* a decoded value is at most 4 bytes per input byte */
        }
    }
    (void)s3xml_error(x, size, &code, &v);
    if (s3xml_parse_list(x, size, &l, &err) == 0) {
        s3xml_list_free(&l);
    }
    s3xml_unquote(&v);
    buf_free(&v);
    buf_free(&code);
    free(x);
    return 0;
}
