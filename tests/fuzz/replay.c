/* Replays fuzz inputs without libFuzzer: every file named on the command line,
 * or every file inside a directory named there, is fed once to the target's
 * LLVMFuzzerTestOneInput. Built with gcc so `make test` replays the corpora. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    long n;
    uint8_t *data;

    if (f == NULL) {
        perror(path);
        return -1;
    }
    if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 ||
        fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        return -1;
    }
    data = malloc((size_t)n + 1);
    if (data == NULL || fread(data, 1, (size_t)n, f) != (size_t)n) {
        free(data);
        fclose(f);
        return -1;
    }
    fclose(f);
    LLVMFuzzerTestOneInput(data, (size_t)n);
    free(data);
    return 0;
}

static int replay_path(const char *path, int *count)
{
    struct stat st;
    DIR *d;
    struct dirent *e;
    char sub[4096];

    if (stat(path, &st) != 0) {
        perror(path);
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
        (*count)++;
        return replay_file(path);
    }
    d = opendir(path);
    if (d == NULL) {
        perror(path);
        return -1;
    }
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') {
            continue;
        }
        snprintf(sub, sizeof(sub), "%s/%s", path, e->d_name);
        if (replay_path(sub, count) != 0) {
            closedir(d);
            return -1;
        }
    }
    closedir(d);
    return 0;
}

int main(int argc, char **argv)
{
    int count = 0;

    for (int i = 1; i < argc; i++) {
        if (replay_path(argv[i], &count) != 0) {
            return 1;
        }
    }
    printf("replayed %d inputs\n", count);
    return 0;
}
