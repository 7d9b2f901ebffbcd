# queen: a message broker with an embedded S3 sink. See README.md.
#
#   make            build/queen
#   make test       unit tests, fuzz corpus replay, integration and e2e tests
#   make check      setup + -Werror build + every test + unit tests under
#                   ASan/UBSan + fuzz corpus replay (what CI runs)
#   make check-cluster  the long cluster tests (pytest marker cluster_long:
#                   network partitions in namespaces; root), which
#                   `make check` leaves out
#   make demo       the product page's "Try it" against a local S3 server
#   make fuzz       libFuzzer targets, FUZZ_SECONDS each
#   make lint       clang-format check, clang-tidy, cppcheck
#   make bench      benchmarks in bench/, each beside its peer
#   make install    build/queen, its systemd unit and sysusers file, a
#                   settings file (kept if present) and the docs, under
#                   DESTDIR + PREFIX (default /usr/local)
#
# New .c files are found by wildcard: src/**/X.c joins libqueen.a,
# tests/unit/test_X.c becomes build/tests/test_X, tests/fuzz/fuzz_X.c becomes
# a libFuzzer target and a replay binary.

# Two passes. A user's first `make` (any goal but the ones below) runs
# scripts/setup.sh and then this Makefile again with QUEEN_SETUP_DONE=1: the
# second pass is the only one that asks pkg-config or names an installed
# file, so nothing is evaluated before the packages it depends on are there.
NO_SETUP_GOALS := setup clean format
ifeq ($(QUEEN_SETUP_DONE)$(filter-out $(NO_SETUP_GOALS),$(or $(MAKECMDGOALS),all)),)
# Only goals that need nothing installed: fall through to the rules below.
QUEEN_SETUP_DONE := 1
endif
ifeq ($(QUEEN_SETUP_DONE),)
.DEFAULT_GOAL := all
.PHONY: setup-then-make $(or $(MAKECMDGOALS),all)
setup-then-make:
	@scripts/setup.sh
	@$(MAKE) --no-print-directory QUEEN_SETUP_DONE=1 $(MAKECMDGOALS)
$(or $(MAKECMDGOALS),all): setup-then-make
	@:
else

CC       ?= gcc
SANITIZE ?=
ifeq ($(SANITIZE),)
BUILD    ?= build
OPT      ?= -O2 -g
else ifeq ($(SANITIZE),address,undefined)
BUILD    ?= build/san
OPT      ?= -O1 -g -fsanitize=$(SANITIZE) -fno-sanitize-recover=all -fno-omit-frame-pointer
else
# Another sanitizer builds apart: objects do not record their flags, so
# sharing build/san would mix ASan and TSan objects.
comma    := ,
BUILD    ?= build/san-$(subst $(comma),-,$(SANITIZE))
OPT      ?= -O1 -g -fsanitize=$(SANITIZE) -fno-sanitize-recover=all -fno-omit-frame-pointer
endif

LLHTTP_DIR  ?= /usr/share/llhttp
LLHTTP_INC  ?= /usr/share/include/llhttp
WARN := -std=c17 -Wall -Wextra -Wpedantic -Wshadow -Wstrict-prototypes \
        -Wmissing-prototypes -Wformat=2 -Wundef -Wvla -Wcast-qual \
        -Wwrite-strings -Wimplicit-fallthrough -Wnull-dereference -Werror
DEFS    := -D_GNU_SOURCE
# snappy's version for the intent's libraries (src/parquet/parquet.h):
# the library has no call that reports it, only its C++ header.
SNAPPY_H       ?= /usr/include/snappy-stubs-public.h
SNAPPY_VERSION := $(shell sed -n 's/^\#define SNAPPY_\(MAJOR\|MINOR\|PATCHLEVEL\) \([0-9]*\)$$/\2/p' $(SNAPPY_H) 2>/dev/null | paste -sd. -)
DEFS    += -DQUEEN_SNAPPY_VERSION='"$(or $(SNAPPY_VERSION),unknown)"'
PKGS    := raft libuv
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
CFLAGS  += $(WARN) $(OPT) $(DEFS) -Isrc -I$(LLHTTP_INC) $(PKG_CFLAGS) -MMD -MP
# libraft is linked statically from a copy whose byteCrc32 is weak, so that
# src/raft/raft_crc.c (same values, eight bytes a step) is the checksum it
# calls; see src/raft/raft_crc.h. UvOsIoSetup and UvOsIoDestroy are weak too:
# src/raft/raft_aio.c makes and destroys its AIO contexts off the loop
# thread; see src/raft/raft_aio.h. So is UvOsUnlink: src/raft/raft_trash.c
# removes big files a piece at a time on a thread; see raft_trash.h. (liblz4.so.1 comes with libraft2.)
RAFT_A      := $(shell pkg-config --variable=libdir raft 2>/dev/null)/libraft.a
RAFT_STATIC := $(BUILD)/libraft-crc.a
RAFT_LIBS   := $(RAFT_STATIC) -l:liblz4.so.1 $(shell pkg-config --libs libuv 2>/dev/null)
BASE_LIBS   := -llmdb -lcurl -lssl -lcrypto -lzstd -lz -lsnappy -lpthread -lm
RAFT_CRC_OBJ:= $(BUILD)/obj/src/raft/raft_crc.o $(BUILD)/obj/src/base/crc_fold.o \
               $(BUILD)/obj/src/raft/raft_aio.o $(BUILD)/obj/src/raft/raft_trash.o
LDLIBS  += $(RAFT_CRC_OBJ) $(RAFT_LIBS) $(BASE_LIBS)

SRC       := $(filter-out src/main.c,$(shell find src -name '*.c' 2>/dev/null | sort))
OBJ       := $(SRC:%.c=$(BUILD)/obj/%.o)
LLHTTP_SRC:= $(wildcard $(LLHTTP_DIR)/*.c)
LLHTTP_OBJ:= $(patsubst $(LLHTTP_DIR)/%.c,$(BUILD)/obj/llhttp/%.o,$(LLHTTP_SRC))
LIB       := $(BUILD)/libqueen.a

UNIT_SRC  := $(sort $(wildcard tests/unit/test_*.c))
UNIT_BIN  := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)
FUZZ_SRC  := $(sort $(wildcard tests/fuzz/fuzz_*.c))
FUZZ_NAMES:= $(FUZZ_SRC:tests/fuzz/fuzz_%.c=%)
REPLAY_BIN:= $(FUZZ_NAMES:%=$(BUILD)/tests/replay_%)
FUZZ_BIN  := $(FUZZ_NAMES:%=build/fuzz/fuzz_%)
TOOL_SRC  := $(sort $(wildcard tests/tools/*.c))
TOOL_BIN  := $(TOOL_SRC:tests/tools/%.c=$(BUILD)/tools/%)
FUZZ_SECONDS ?= 20
PY        := /usr/bin/python3

.PHONY: all test unit replay integration check check-cluster demo fuzz lint format bench clean setup tools stress-unit soak soak-cluster install

all: $(BUILD)/queen tools

tools: $(TOOL_BIN)

$(BUILD)/queen: src/main.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ src/main.c $(LIB) $(LDLIBS)

# raft_crc.o, raft_aio.o and raft_trash.o are linked as objects (LDLIBS), never from the
# archive: only libraft calls them, so an archive member would never be
# pulled in; crc_fold.o, which raft_crc.o calls, goes with them.
$(LIB): $(OBJ) $(LLHTTP_OBJ) $(RAFT_STATIC)
	@mkdir -p $(dir $@)
	rm -f $@
	ar rcs $@ $(filter-out $(RAFT_CRC_OBJ),$(filter %.o,$^))

$(RAFT_STATIC): $(RAFT_A) Makefile
	@mkdir -p $(dir $@)
	objcopy --weaken-symbol=byteCrc32 --weaken-symbol=UvOsIoSetup \
	    --weaken-symbol=UvOsIoDestroy --weaken-symbol=UvOsUnlink $< $@

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c -o $@ $<

# llhttp is third-party generated C: compiled with its own relaxed flags.
$(BUILD)/obj/llhttp/%.o: $(LLHTTP_DIR)/%.c
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -O2 -g $(filter -fsanitize% -fno-sanitize% -fno-omit%,$(OPT)) -w -I$(LLHTTP_INC) -c -o $@ $<

$(BUILD)/tests/test_%: tests/unit/test_%.c tests/harness.h $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests -o $@ $< $(filter %.o,$^) $(LIB) $(LDLIBS)

$(BUILD)/tests/replay_%: tests/fuzz/fuzz_%.c tests/fuzz/replay.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests -o $@ tests/fuzz/replay.c $< $(filter %.o,$^) $(LIB) $(LDLIBS)

$(BUILD)/tools/%: tests/tools/%.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests -o $@ $< $(filter %.o,$^) $(LIB) $(LDLIBS)

# libFuzzer builds: clang, everything compiled again with fuzzer flags.
FUZZ_CFLAGS := -std=c17 -g -O1 -fsanitize=fuzzer,address,undefined $(DEFS) -Isrc -Itests -I$(LLHTTP_INC) $(PKG_CFLAGS)
build/fuzz/fuzz_%: tests/fuzz/fuzz_%.c $(SRC) $(LLHTTP_SRC) $(RAFT_STATIC)
	@mkdir -p $(dir $@)
	clang $(FUZZ_CFLAGS) -w -o $@ $< $(SRC) $(LLHTTP_SRC) $(RAFT_LIBS) $(BASE_LIBS)

unit: $(UNIT_BIN)
	@tests/run_unit.sh $(UNIT_BIN)

replay: $(REPLAY_BIN)
	@tests/run_replay.sh $(BUILD) $(FUZZ_NAMES)

integration: $(BUILD)/queen tools
	@tests/run_py.sh $(BUILD)

# Only the tests marked cluster_long (tests/e2e/test_cluster_partitions.py),
# which `integration` deselects; PYTEST_ARGS still adds to the command line.
check-cluster: $(BUILD)/queen tools
	@QUEEN_PY_MARK=cluster_long QUEEN_PY_LOG=build/results/pytest-cluster.log \
	  tests/run_py.sh $(BUILD)

test: all unit replay integration

setup:
	@scripts/setup.sh

JOBS ?= $(shell nproc 2>/dev/null || echo 2)

check:
	rm -f build/results/summary
	$(MAKE) -j$(JOBS) all $(UNIT_BIN) $(REPLAY_BIN)
	$(MAKE) unit replay
	$(MAKE) integration
	$(MAKE) -j$(JOBS) SANITIZE=address,undefined $(subst build/,build/san/,$(UNIT_BIN) $(REPLAY_BIN))
	$(MAKE) SANITIZE=address,undefined unit replay
	@$(PY) scripts/check_doc_links.py
	@tests/summary.sh

demo: all
	@scripts/demo.sh $(BUILD)

# SOAK_RUNS (10) runs of the randomized sink soak
# (tests/e2e/test_soak_sink.py), each with its own seed; a failure names its
# seed and keeps the node's logs in build/soak-SEED-logs.
SOAK_RUNS ?= 10
soak: all
	@fails=0; for i in $$(seq 1 $(SOAK_RUNS)); do \
	  seed=$${QUEEN_SOAK_SEED:-$$(od -An -N3 -tu4 /dev/urandom | tr -d ' ')}; \
	  QUEEN_ROOT=$$PWD QUEEN_BIN=$$PWD/$(BUILD)/queen QUEEN_TOOLS=$$PWD/$(BUILD)/tools \
	  QUEEN_TEST_KEEP_LOGS=$$PWD/$(BUILD)/soak-$$seed-logs \
	  QUEEN_SOAK_SEED=$$seed $(PY) -m pytest -q -s -p no:cacheprovider tests/e2e/test_soak_sink.py \
	    > $(BUILD)/soak-$$seed.log 2>&1 && { r=ok; rm -rf $(BUILD)/soak-$$seed-logs; } || { r=FAIL; fails=$$((fails+1)); }; \
	  echo "soak: run $$i seed $$seed: $$r ($$(grep -E '^soak: (lake|[0-9]+ kills)' $(BUILD)/soak-$$seed.log | tr '\n' ' '))"; \
	done; echo "$$(( $(SOAK_RUNS) - fails )) passed, $$fails failed"; [ $$fails -eq 0 ]

# SOAK_RUNS (10) runs of the randomized soak on 3 nodes
# (tests/e2e/test_soak_cluster.py: kill -9 of any node, QUEEN_SOAK_SECONDS
# each, 120 by default), each with its own seed; a failure names its seed
# and keeps the nodes' logs in build/soak-cluster-SEED-logs.
soak-cluster: all
	@fails=0; for i in $$(seq 1 $(SOAK_RUNS)); do \
	  seed=$${QUEEN_SOAK_SEED:-$$(od -An -N3 -tu4 /dev/urandom | tr -d ' ')}; \
	  QUEEN_ROOT=$$PWD QUEEN_BIN=$$PWD/$(BUILD)/queen QUEEN_TOOLS=$$PWD/$(BUILD)/tools \
	  QUEEN_TEST_KEEP_LOGS=$$PWD/$(BUILD)/soak-cluster-$$seed-logs \
	  QUEEN_SOAK_SEED=$$seed $(PY) -m pytest -q -s -p no:cacheprovider tests/e2e/test_soak_cluster.py \
	    > $(BUILD)/soak-cluster-$$seed.log 2>&1 && { r=ok; rm -rf $(BUILD)/soak-cluster-$$seed-logs; } || { r=FAIL; fails=$$((fails+1)); }; \
	  echo "soak-cluster: run $$i seed $$seed: $$r ($$(grep -E '^soak-cluster: (lake|[0-9]+ kills)' $(BUILD)/soak-cluster-$$seed.log | tr '\n' ' '))"; \
	done; echo "$$(( $(SOAK_RUNS) - fails )) passed, $$fails failed"; [ $$fails -eq 0 ]

# Not part of check: 20 unit runs and 2 integration runs under CPU load.
stress-unit: all $(UNIT_BIN)
	@scripts/stress-unit.sh $(BUILD) $(UNIT_BIN)

fuzz: $(FUZZ_BIN)
	@for f in $(FUZZ_NAMES); do \
	  mkdir -p tests/fuzz/corpus/$$f build/fuzz/new-$$f; \
	  echo "fuzz: $$f for $(FUZZ_SECONDS)s"; \
	  build/fuzz/fuzz_$$f -max_total_time=$(FUZZ_SECONDS) -max_len=65536 build/fuzz/new-$$f tests/fuzz/corpus/$$f >/dev/null 2>build/fuzz/$$f.log || { tail -40 build/fuzz/$$f.log; exit 1; }; \
	done

# One clang-tidy process per file: clang-tidy 14's analyzer keeps what it
# looked up in the first file of a run, so in every later file va_start goes
# unseen and each vsnprintf reads as an uninitialized va_list.
lint:
	clang-format --dry-run -Werror $$(find src tests -name '*.[ch]' -not -path '*/node_modules/*')
	find src -name '*.c' | sort | xargs -I{} -P$$(nproc) clang-tidy --quiet {} -- $(WARN) $(DEFS) -Isrc -Itests -I$(LLHTTP_INC) $(PKG_CFLAGS)
	cppcheck --std=c11 --enable=warning,performance,portability --inline-suppr --error-exitcode=1 -q -I src -I tests src tests/unit tests/fuzz

format:
	clang-format -i $$(find src tests -name '*.[ch]' -not -path '*/node_modules/*')

bench: all
	@scripts/bench.sh $(BUILD)

# Install: PREFIX for the files of the package, SYSCONFDIR (/etc) for the
# settings file the unit reads, DESTDIR in front of every path (a staging
# root). The test drivers of tests/tools are not part of the product.
PREFIX     ?= /usr/local
BINDIR     ?= $(PREFIX)/bin
SYSCONFDIR ?= /etc
UNITDIR    ?= $(PREFIX)/lib/systemd/system
SYSUSERSDIR?= $(PREFIX)/lib/sysusers.d
DOCDIR     ?= $(PREFIX)/share/doc/queen
INSTALL    ?= install

install: $(BUILD)/queen
	$(INSTALL) -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(UNITDIR) $(DESTDIR)$(SYSUSERSDIR) \
	  $(DESTDIR)$(DOCDIR) $(DESTDIR)$(SYSCONFDIR)/queen
	$(INSTALL) -m 0755 $(BUILD)/queen $(DESTDIR)$(BINDIR)/queen
	sed -e 's|@BINDIR@|$(BINDIR)|g' -e 's|@SYSCONFDIR@|$(SYSCONFDIR)|g' \
	  -e 's|@DOCDIR@|$(DOCDIR)|g' packaging/queen.service > $(DESTDIR)$(UNITDIR)/queen.service
	chmod 0644 $(DESTDIR)$(UNITDIR)/queen.service
	$(INSTALL) -m 0644 packaging/queen.sysusers $(DESTDIR)$(SYSUSERSDIR)/queen.conf
	$(INSTALL) -m 0644 LICENSE README.md docs/operations.md $(DESTDIR)$(DOCDIR)/
	[ -e $(DESTDIR)$(SYSCONFDIR)/queen/queen.env ] || \
	  $(INSTALL) -m 0640 packaging/queen.env $(DESTDIR)$(SYSCONFDIR)/queen/queen.env

clean:
	rm -rf build

-include $(OBJ:.o=.d) $(UNIT_BIN:%=%.d) $(REPLAY_BIN:%=%.d) $(TOOL_BIN:%=%.d)

endif
