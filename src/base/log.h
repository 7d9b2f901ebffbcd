/* Logging: one stderr line per event, "<UTC time> <LEVEL> <module>: <message>".
 * The level is checked before formatting. QUEEN_LOG_LEVEL (error, warn, info,
 * debug) sets the threshold; the default is info. */
#ifndef QUEEN_BASE_LOG_H
#define QUEEN_BASE_LOG_H

#include "base/common.h"

enum log_level { LOG_ERROR = 0, LOG_WARN, LOG_INFO, LOG_DEBUG };

extern int log_threshold;

void log_set_level(int level);
/* Parse "error|warn|info|debug"; returns -1 when unknown. */
int log_parse_level(const char *s);
void log_write(int level, const char *module, const char *fmt, ...)
    PRINTF(3, 4);

#define log_at(level, module, ...)                     \
    do {                                               \
        if ((level) <= log_threshold) {                \
            log_write((level), (module), __VA_ARGS__); \
        }                                              \
    } while (0)
#define log_error(module, ...) log_at(LOG_ERROR, module, __VA_ARGS__)
#define log_warn(module, ...)  log_at(LOG_WARN, module, __VA_ARGS__)
#define log_info(module, ...)  log_at(LOG_INFO, module, __VA_ARGS__)
#define log_debug(module, ...) log_at(LOG_DEBUG, module, __VA_ARGS__)

#endif
