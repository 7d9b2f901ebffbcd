/* Test helpers shared by test_store.c and test_fsm.c: a store in a mkdtemp
 * directory and push commands applied through the real fsm. */
#ifndef QUEEN_TESTS_PUSH_HELPERS_H
#define QUEEN_TESTS_PUSH_HELPERS_H

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/buf.h"
#include "raft/cmd.h"
#include "raft/fsm.h"
#include "store/store.h"

struct env {
    char dir[64];
    struct store *store;
    struct raft_fsm rfsm;
    struct fsm *fsm;
    uint64_t index; /* last raft index used */
};

static inline void env_open(struct env *e)
{
    struct err err = {0};

    if (e->dir[0] == '\0') {
        snprintf(e->dir, sizeof(e->dir), "/tmp/queen-test-XXXXXX");
        if (mkdtemp(e->dir) == NULL) {
            perror("mkdtemp");
            exit(1);
        }
    }
    if (store_open(&e->store, e->dir, (uint64_t)1 << 30, &err) != 0) {
        fprintf(stderr, "store_open: %s\n", err.msg);
        exit(1);
    }
    e->fsm = fsm_new(e->store, &e->rfsm);
    e->index = store_applied_index(e->store);
}

static inline void env_reopen(struct env *e)
{
    fsm_free(e->fsm);
    store_close(e->store);
    env_open(e);
}

static inline int env_rm(const char *p, const struct stat *st, int flag,
                         struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(p);
}

static inline void env_close(struct env *e)
{
    fsm_free(e->fsm);
    store_close(e->store);
    nftw(e->dir, env_rm, 16, FTW_DEPTH | FTW_PHYS);
}

struct pitem {
    const char *queue;
    const char *partition;
    const char *txn;
    const char *payload;
};

/* Apply one push command of the n items ci at stamp; returns the fsm result
 * (borrowed). */
static inline const struct fsm_result *
env_push_cmd(struct env *e, int64_t stamp, const struct cmd_push_item *ci,
             size_t n)
{
    const struct fsm_result *res = NULL;
    struct err err = {0};
    struct buf b;

    buf_init(&b, BUF_UNLIMITED);
    if (cmd_push_encode(&b, STORE_DEFAULT_TENANT, ci, n, &err) != 0) {
        fprintf(stderr, "encode: %s\n", err.msg);
        exit(1);
    }
    cmd_set_stamp(b.data, stamp);
    e->index++;
    if (fsm_apply_entry(e->fsm, e->index, b.data, b.len, &res, &err) != 0) {
        fprintf(stderr, "apply: %s\n", err.msg);
        res = NULL;
    }
    buf_free(&b);
    return res;
}

/* Apply one push of n items at stamp; returns the fsm result (borrowed). */
static inline const struct fsm_result *
env_push(struct env *e, int64_t stamp, const struct pitem *items, size_t n)
{
    struct cmd_push_item *ci = calloc(n, sizeof(*ci));
    const struct fsm_result *res;

    for (size_t i = 0; i < n; i++) {
        ci[i].queue = (struct slice){items[i].queue, strlen(items[i].queue)};
        ci[i].partition =
            (struct slice){items[i].partition, strlen(items[i].partition)};
        ci[i].txn = (struct slice){items[i].txn, strlen(items[i].txn)};
        ci[i].payload =
            (struct slice){items[i].payload, strlen(items[i].payload)};
        memset(ci[i].message_id, 0, 16);
        memcpy(ci[i].message_id, &stamp, sizeof(stamp));
        ci[i].message_id[15] = (uint8_t)i;
    }
    res = env_push_cmd(e, stamp, ci, n);
    free(ci);
    return res;
}

static inline const struct fsm_result *env_push1(struct env *e, int64_t stamp,
                                                 const char *q, const char *p,
                                                 const char *txn,
                                                 const char *payload)
{
    struct pitem it = {q, p, txn, payload};

    return env_push(e, stamp, &it, 1);
}

#endif
