/* Timestamp text forms and microsecond arithmetic (docs/design/formats.md §10).
 *
 * Calendar conversion uses the days-from-civil arithmetic of the proleptic
 * Gregorian calendar in 400-year eras (146097 days each), shifted so that
 * the year starts in March and February's length only matters at the end.
 * Splitting a stamp into days and the time of day always uses the Euclidean
 * remainder, so 1969-12-31T23:59:59.999999Z is -1 us, not 1970-01-01. */
#include "base/isotime.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "base/common.h"

struct civil {
    int64_t year;
    int month;  /* 1..12 */
    int day;    /* 1..31 */
    int64_t us; /* time of day, 0 .. US_D-1 */
};

static void civil_from_us(int64_t us, struct civil *c)
{
    int64_t z = us / ISOTIME_US_D;
    int64_t rem = us % ISOTIME_US_D;
    int64_t era;
    int64_t doe;
    int64_t yoe;
    int64_t doy;
    int64_t mp;

    if (rem < 0) {
        rem += ISOTIME_US_D;
        z -= 1;
    }
    c->us = rem;
    z += 719468; /* days from 0000-03-01 to 1970-01-01 */
    era = (z >= 0 ? z : z - 146096) / 146097;
    doe = z - era * 146097;
    yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    mp = (5 * doy + 2) / 153;
    c->day = (int)(doy - (153 * mp + 2) / 5 + 1);
    c->month = (int)(mp < 10 ? mp + 3 : mp - 9);
    c->year = yoe + era * 400 + (c->month <= 2 ? 1 : 0);
}

static int64_t days_from_civil(int64_t y, int m, int d)
{
    int64_t era;
    int64_t yoe;
    int64_t doy;
    int64_t doe;

    y -= m <= 2 ? 1 : 0;
    era = (y >= 0 ? y : y - 399) / 400;
    yoe = y - era * 400;
    doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
    doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

/* "YYYY-MM-DDTHH:MM:SS" into out (room for 32). */
static int format_seconds(const struct civil *c, char *out)
{
    int64_t s = c->us / ISOTIME_US_S;

    return snprintf(out, 32, "%04" PRId64 "-%02d-%02dT%02d:%02d:%02d", c->year,
                    c->month, c->day, (int)(s / 3600), (int)(s / 60 % 60),
                    (int)(s % 60));
}

void isotime_format_us(int64_t us, char out[32])
{
    struct civil c;
    int n;

    civil_from_us(us, &c);
    n = format_seconds(&c, out);
    snprintf(out + n, (size_t)(32 - n), ".%06dZ", (int)(c.us % ISOTIME_US_S));
}

void isotime_format_kv(int64_t us, char out[40])
{
    struct civil c;
    int n;
    int frac;
    char f[8];
    int flen = 6;

    civil_from_us(us, &c);
    n = format_seconds(&c, out);
    frac = (int)(c.us % ISOTIME_US_S);
    if (frac == 0) {
        snprintf(out + n, (size_t)(40 - n), "+00:00");
        return;
    }
    snprintf(f, sizeof(f), "%06d", frac);
    while (flen > 1 && f[flen - 1] == '0') {
        flen--;
    }
    snprintf(out + n, (size_t)(40 - n), ".%.*s+00:00", flen, f);
}

/* Parse exactly w decimal digits at s. */
static bool digits(const char *s, int w, int *out)
{
    int v = 0;

    for (int i = 0; i < w; i++) {
        if (s[i] < '0' || s[i] > '9') {
            return false;
        }
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return true;
}

/* Days in month mo (1..12) of year y, proleptic Gregorian. */
static int days_in_month(int y, int mo)
{
    static const int len[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    bool is_leap = y % 4 == 0 && (y % 100 != 0 || y % 400 == 0);

    return mo == 2 && is_leap ? 29 : len[mo - 1];
}

/* "YYYY-MM-DDTHH:MM:SS" (19 bytes, n >= 19) to whole-second us. A day its
 * month does not have (2020-02-30, 2021-02-29, 04-31) is refused rather
 * than carried into the next month: no writer makes one, so it is a typo
 * that would otherwise name another instant. */
static bool parse_seconds(const char *s, int64_t *us)
{
    int y;
    int mo;
    int d;
    int h;
    int mi;
    int sec;

    if (s[4] != '-' || s[7] != '-' || s[10] != 'T' || s[13] != ':' ||
        s[16] != ':') {
        return false;
    }
    if (!digits(s, 4, &y) || !digits(s + 5, 2, &mo) || !digits(s + 8, 2, &d) ||
        !digits(s + 11, 2, &h) || !digits(s + 14, 2, &mi) ||
        !digits(s + 17, 2, &sec)) {
        return false;
    }
    if (mo < 1 || mo > 12 || d < 1 || d > days_in_month(y, mo) || h > 23 ||
        mi > 59 || sec > 60) {
        return false;
    }
    *us = (days_from_civil(y, mo, d) * 86400 + (int64_t)h * 3600 +
           (int64_t)mi * 60 + sec) *
          ISOTIME_US_S;
    return true;
}

bool isotime_parse_us(const char *s, size_t n, int64_t *us)
{
    int64_t base;
    int64_t frac = 0;
    size_t i = 19;
    size_t nd;

    if (n < 20 || !parse_seconds(s, &base)) {
        return false;
    }
    if (s[i] == '.') {
        i++;
        for (nd = 0; i < n && s[i] >= '0' && s[i] <= '9'; i++, nd++) {
            if (nd == 6) {
                return false;
            }
            frac = frac * 10 + (s[i] - '0');
        }
        if (nd == 0) {
            return false;
        }
        for (; nd < 6; nd++) {
            frac *= 10;
        }
    }
    if (i + 1 != n || s[i] != 'Z') {
        return false;
    }
    *us = base + frac;
    return true;
}

bool isotime_parse_ms_lenient(const char *s, size_t n, int64_t *ms)
{
    int64_t base;
    int64_t frac = 0;
    size_t i = 20;
    int nd = 0;

    if (n < 19 || !parse_seconds(s, &base)) {
        return false;
    }
    if (n > 19 && s[19] == '.') {
        for (; i < n && s[i] >= '0' && s[i] <= '9'; i++) {
            if (nd < 3) {
                frac = frac * 10 + (s[i] - '0');
                nd++;
            }
        }
    }
    for (; nd < 3; nd++) {
        frac *= 10;
    }
    *ms = base / ISOTIME_US_MS + frac;
    return true;
}

int64_t isotime_floor(int64_t us, int64_t unit_us)
{
    int64_t r;

    ASSERT(unit_us > 0);
    // cppcheck-suppress zerodivcond ; ASSERT does not return on 0
    r = us % unit_us;
    if (r < 0) {
        r += unit_us;
    }
    if ((uint64_t)us - (uint64_t)INT64_MIN < (uint64_t)r) {
        return INT64_MIN; /* the floor lies below what int64 can hold */
    }
    return us - r;
}

int64_t isotime_next_boundary(int64_t us, int64_t unit_us)
{
    int64_t f;

    if (us == ISOTIME_MIN) {
        return ISOTIME_MIN;
    }
    f = isotime_floor(us, unit_us);
    if (f > INT64_MAX - unit_us) {
        return INT64_MAX;
    }
    return f + unit_us;
}

static void put_digits(char *o, int64_t v, int w)
{
    for (int i = w - 1; i >= 0; i--) {
        o[i] = (char)('0' + v % 10);
        v /= 10;
    }
}

void isotime_date_hour(int64_t us, char dt[11], char hour[3])
{
    struct civil c;

    if (us == ISOTIME_MIN) {
        memcpy(dt, "1970-01-01", 11);
        memcpy(hour, "00", 3);
        return;
    }
    civil_from_us(us, &c);
    /* Key paths need exactly 4 year digits; stamps outside years 0..9999
     * only occur in tests of the arithmetic. */
    put_digits(dt, c.year < 0 ? 0 : c.year % 10000, 4);
    dt[4] = '-';
    put_digits(dt + 5, c.month, 2);
    dt[7] = '-';
    put_digits(dt + 8, c.day, 2);
    dt[10] = '\0';
    put_digits(hour, c.us / ISOTIME_US_H, 2);
    hour[2] = '\0';
}
