/* The reader against the writer's own view of a section (format/view.c): every synthetic dump reads
 * back to the same records and writes out to the same bytes, and damaged files are refused with a
 * format error, never read past their end. */
#include "check.h"
#include "synth.h"

#include <stdlib.h>
#include <string.h>

#define IMAGE_CAP (1u << 20)

static synth S;
static unsigned char image[IMAGE_CAP], again[IMAGE_CAP];
static unsigned char index_mem[SYNTH_MAX_CHUNKS * sizeof(ptmd_chunk_rec) + (SYNTH_MAX_HEAPS + 1) * 4 + 64];

static int read_image(unsigned char *img, size_t len, ptmd_view *v, ptmd_err *err)
{
    memset(err, 0, sizeof(*err));
    if (ptmd_read_view(img, len, "unit", v, err) != 0) return -1;
    if (ptmd_view_index_size(v) > sizeof(index_mem)) return -2;
    return ptmd_view_build_index(v, index_mem, "unit", err);
}

static int same_payload(const ptmd_view *a, const ptmd_view *b, uint32_t type)
{
    ptmd_section_payload pa, pb;
    size_t k;
    if (ptmd_view_section(a, type, &pa) || ptmd_view_section(b, type, &pb)) return 0;
    if (pa.count != pb.count || pa.length != pb.length || pa.n_parts != pb.n_parts) return 0;
    for (k = 0; k < pa.n_parts; k++)
        if (pa.part[k].len != pb.part[k].len ||
            (pa.part[k].len && memcmp(pa.part[k].data, pb.part[k].data, (size_t)pa.part[k].len) != 0))
            return 0;
    return 1;
}

static void round_trips(void)
{
    static const synth_opts opts[] = {
        { 0, 0, 1, 0, 8 }, { 1, 0, 2, 2, 40 }, { 0, 1, 2, 1, 100 }, { 1, 0, 1, 3, 200 }
    };
    uint64_t seed;
    unit_case = "round trip";
    for (seed = 1; seed <= 120; seed++) {
        const synth_opts *o = &opts[seed % 4];
        ptmd_view v;
        ptmd_err err;
        size_t len, len2, i;
        uint32_t type;
        synth_build(&S, seed, o);
        len = synth_image(&S.view, image, sizeof(image));
        CHECK(len > 0, "seed %llu: the image fits", (unsigned long long)seed);
        if (!len) continue;
        if (read_image(image, len, &v, &err) != 0) {
            CHECK(0, "seed %llu: read: %s", (unsigned long long)seed, err.msg);
            continue;
        }
        CHECK_EQ(v.sections, S.view.sections);
        CHECK_EQ(v.n_chunks, S.view.n_chunks);
        for (i = 0; i < v.n_chunks; i++)
            if (v.chunks[i].addr != S.chunks[i].addr || v.chunks[i].word != S.chunks[i].word) break;
        CHECK(i == v.n_chunks, "seed %llu: chunk %zu read back as it was written", (unsigned long long)seed, i);
        for (type = 0; type < 64; type++)
            if (ptmd_view_has(&v, type))
                CHECK(same_payload(&v, &S.view, type), "seed %llu: section %s reads back the same",
                      (unsigned long long)seed, ptmd_section_name(type));
        len2 = synth_image(&v, again, sizeof(again));
        CHECK(len2 == len && memcmp(image, again, len) == 0, "seed %llu: a read view writes the same bytes",
              (unsigned long long)seed);
    }
}

/* Section by section: where each starts, to edit or drop it. */
typedef struct {
    size_t off[64];
    uint32_t type[64];
    size_t n;
} section_list;

static void list_sections(const unsigned char *img, size_t len, section_list *l)
{
    size_t off = PTMD_PREAMBLE_SIZE, body = len - PTMD_END_SIZE;
    l->n = 0;
    while (off < body && l->n < 64) {
        ptmd_section_hdr h;
        memcpy(&h, img + off, sizeof(h));
        l->off[l->n] = off;
        l->type[l->n++] = h.type;
        off += sizeof(h) + ((h.length + 7) & ~7ull);
    }
}

static ptmd_section_hdr *header_of(unsigned char *img, size_t len, uint32_t type)
{
    section_list l;
    size_t i;
    list_sections(img, len, &l);
    for (i = 0; i < l.n; i++)
        if (l.type[i] == type) return (ptmd_section_hdr *)(void *)(img + l.off[i]);
    return NULL;
}

static void expect_refused(unsigned char *img, size_t len, const char *what, const char *message)
{
    ptmd_view v;
    ptmd_err err;
    int rc = read_image(img, len, &v, &err);
    CHECK(rc == -1 && err.code == PTMD_E_FORMAT, "%s: refused as a format error (rc %d)", what, rc);
    CHECK(strstr(err.msg, message) != NULL, "%s: the message \"%s\" says \"%s\"", what, err.msg, message);
}

static size_t fresh(uint64_t seed, int ruby)
{
    synth_opts o = { ruby, 0, 2, 1, 12 };
    synth_build(&S, seed, &o);
    return synth_image(&S.view, image, sizeof(image));
}

static void refusals(void)
{
    size_t len;
    ptmd_section_hdr *h;
    ptmd_heap_rec *heap;
    ptmd_view v;
    ptmd_err err;
    unit_case = "refusals";
    len = fresh(7, 1);
    image[0] = 'X';
    expect_refused(image, len, "bad magic", "bad magic");
    len = fresh(7, 1);
    expect_refused(image, len - 8, "cut short", "truncated");
    expect_refused(image, 0, "empty", "empty file");
    len = fresh(7, 1);
    image[PTMD_PREAMBLE_SIZE + 30] ^= 1;
    expect_refused(image, len, "one bit flipped", "checksum mismatch");

    len = fresh(7, 1);
    h = header_of(image, len, PTMD_SEC_ARENAS);
    h->count++;
    synth_reseal(image, len);
    expect_refused(image, len, "one arena too many", "section arenas has 3 records in 176 bytes");

    len = fresh(7, 1);
    header_of(image, len, PTMD_SEC_META)->type = 200;
    synth_reseal(image, len);
    expect_refused(image, len, "no meta", "the meta section is missing");

    len = fresh(7, 1);
    header_of(image, len, PTMD_SEC_HEAPS)->type = PTMD_SEC_ARENAS;
    synth_reseal(image, len);
    expect_refused(image, len, "arenas twice", "section arenas appears twice");

    len = fresh(7, 1);
    h = header_of(image, len, PTMD_SEC_HEAPS);
    heap = (ptmd_heap_rec *)(void *)(h + 1);
    heap->kind = 9;
    synth_reseal(image, len);
    expect_refused(image, len, "heap of kind 9", "heap 0 has an unknown kind 9");

    len = fresh(7, 1);
    header_of(image, len, PTMD_SEC_RUBY_PAGES)->type = 300;
    synth_reseal(image, len);
    expect_refused(image, len, "Ruby objects without their pages", "the Ruby sections are incomplete");

    len = fresh(7, 1);
    header_of(image, len, PTMD_SEC_STRINGS)->type = 300; /* an unknown type is skipped */
    synth_reseal(image, len);
    CHECK(read_image(image, len, &v, &err) == 0 && !v.strings && !ptmd_view_has(&v, PTMD_SEC_STRINGS),
          "a section of unknown type is skipped: %s", err.msg);

    CHECK(strcmp(ptmd_section_name(PTMD_SEC_RUBY_CODE_NAMES), "ruby_code_names") == 0, "the names follow the list");
    CHECK(strcmp(ptmd_section_name(PTMD_SEC_END), "unknown") == 0, "END is no section of the list");
}

/* Every prefix is refused, and every word of the body set to an edge value either reads or is refused:
 * nothing is read past the end (the ASan build of rake unit says so). */
static void damage_sweep(void)
{
    static const uint64_t edges[] = { 0, 1, ~0ull, 0x80000000ull };
    static unsigned char copy[IMAGE_CAP];
    size_t len = fresh(3, 1), cut, off, e;
    unsigned long read_ok = 0, refused = 0;
    ptmd_view v;
    ptmd_err err;
    unit_case = "damage sweep";
    for (cut = 0; cut < len; cut += 8) {
        memcpy(copy, image, cut);
        CHECK(read_image(copy, cut, &v, &err) == -1 && err.code == PTMD_E_FORMAT, "a file cut at %zu is refused", cut);
    }
    for (off = PTMD_PREAMBLE_SIZE; off + 8 <= len - PTMD_END_SIZE; off += 8)
        for (e = 0; e < sizeof(edges) / sizeof(edges[0]); e++) {
            int rc;
            memcpy(copy, image, len);
            memcpy(copy + off, &edges[e], 8);
            synth_reseal(copy, len);
            rc = read_image(copy, len, &v, &err);
            CHECK(rc == 0 || (rc == -1 && err.code == PTMD_E_FORMAT && err.msg[0]),
                  "word %zu set to %#llx: read, or refused with a message (rc %d)", off, (unsigned long long)edges[e],
                  rc);
            if (rc == 0) {
                exercise(&v);
                read_ok++;
            } else refused++;
        }
    CHECK(read_ok > 0 && refused > 0, "some damaged files read (%lu), some are refused (%lu)", read_ok, refused);
}

void test_format(void)
{
    round_trips();
    refusals();
    damage_sweep();
}
