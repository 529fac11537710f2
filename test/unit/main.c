/* The unit tests of the load direction (format/ and analysis/) on synthetic dumps built in memory:
 * no process started, no file read. Exits 1 when a check failed. With `--corpus DIR` it writes a few
 * of those dumps there instead, as seeds for the fuzzer (rake fuzz:seed); with `--write PATH SEED
 * PAGE_SIZE` one, with Ruby data, two arenas and mmapped chunks, for the specs. */
#include "check.h"
#include "synth.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

unsigned long unit_checks, unit_failures;
const char *unit_case = "";

static int write_corpus(const char *dir)
{
    static const synth_opts opts[] = { { 0, 0, 1, 0, 4 }, { 1, 0, 2, 1, 12 }, { 0, 1, 1, 2, 8 }, { 1, 0, 1, 0, 40 } };
    static synth s;
    static unsigned char image[1u << 20];
    size_t i;
    for (i = 0; i < sizeof(opts) / sizeof(opts[0]); i++) {
        char path[4096];
        size_t len;
        FILE *f;
        synth_build(&s, i + 1, &opts[i]);
        len = synth_image(&s.view, image, sizeof(image));
        snprintf(path, sizeof(path), "%s/synthetic-%zu.ptmd", dir, i + 1);
        if (!len || !(f = fopen(path, "wb")) || fwrite(image, 1, len, f) != len || fclose(f) != 0) {
            perror(path);
            return 1;
        }
    }
    return 0;
}

static int write_one(const char *path, uint64_t seed, uint64_t page_size)
{
    static synth s;
    static unsigned char image[1u << 20];
    synth_opts o = { 1, 0, 2, 2, 40, page_size };
    size_t len;
    FILE *f;
    if (!page_size || (page_size & (page_size - 1))) {
        fprintf(stderr, "page size %lu is not a power of two\n", (unsigned long)page_size);
        return 2;
    }
    synth_build(&s, seed, &o);
    len = synth_image(&s.view, image, sizeof(image));
    if (!len || !(f = fopen(path, "wb")) || fwrite(image, 1, len, f) != len || fclose(f) != 0) {
        perror(path);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--corpus") == 0) return write_corpus(argv[2]);
    if (argc == 5 && strcmp(argv[1], "--write") == 0)
        return write_one(argv[2], strtoull(argv[3], NULL, 10), strtoull(argv[4], NULL, 10));
    test_format();
    test_index();
    test_analysis();
    test_dominators();
    printf("%lu checks, %lu failures\n", unit_checks, unit_failures);
    return unit_failures ? 1 : 0;
}
