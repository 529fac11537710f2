/* Locating libc (dl_iterate_phdr), its build-id (PT_NOTE in memory), the symbol file (gdb's search
 * order: .build-id, then .gnu_debuglink with CRC), and malloc's globals. Runs before any walk. */
#define _GNU_SOURCE
#include "capture/locate.h"
#include "capture/arch.h"
#include "format/crc32.h"
#include "capture/elfread.h"
#include "capture/locate_heuristic.h"
#include "capture/source_core.h"
#include "capture/source_ptrace.h"
#include "format/format.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <gnu/libc-version.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define PTMD_DEFAULT_DEBUG_DIR "/usr/lib/debug"

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static ptmd_libc cache;
static int cache_valid;

/* ---- the loaded libc ---------------------------------------------------------------------- */

struct find_ctx {
    uintptr_t probe; /* an address inside libc's code */
    ptmd_libc *lc;
    int found;
};

static int find_libc_cb(struct dl_phdr_info *info, size_t size, void *data)
{
    struct find_ctx *ctx = data;
    ptmd_libc *lc = ctx->lc;
    int i, inside = 0;
    PTMD_UNUSED(size);
    for (i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
        if (ph->p_type == PT_LOAD && ctx->probe >= lo && ctx->probe < lo + ph->p_memsz) inside = 1;
    }
    if (!inside) return 0;
    ptmd_strlcpy(lc->libc_path, info->dlpi_name ? info->dlpi_name : "", sizeof(lc->libc_path));
    lc->libc_base = info->dlpi_addr;
    lc->rw_start = lc->image_start = UINTPTR_MAX;
    lc->rw_end = lc->image_end = 0;
    for (i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_TLS) lc->tls_size = ph->p_memsz;
        if (ph->p_type == PT_LOAD) {
            uintptr_t lo = info->dlpi_addr + ph->p_vaddr, hi = lo + ph->p_memsz;
            if (lo < lc->image_start) lc->image_start = lo;
            if (hi > lc->image_end) lc->image_end = hi;
        }
        if (ph->p_type == PT_LOAD && (ph->p_flags & PF_W)) {
            uintptr_t lo = info->dlpi_addr + ph->p_vaddr, hi = lo + ph->p_memsz;
            if (lo < lc->rw_start) lc->rw_start = lo;
            if (hi > lc->rw_end) lc->rw_end = hi;
        }
    }
    lc->build_id_len = ptmd_elf_loaded_build_id(info->dlpi_addr, info->dlpi_phdr, info->dlpi_phnum, lc->build_id,
                                                sizeof(lc->build_id));
    lc->tls_modid = info->dlpi_tls_modid;
    if (info->dlpi_tls_data) lc->tls_offset = (uintptr_t)pthread_self() - (uintptr_t)info->dlpi_tls_data;
    lc->tp_from_pthread = (uintptr_t)ptmd_thread_pointer() - (uintptr_t)pthread_self();
    ctx->found = 1;
    return 1;
}

/* libc is loaded at start-up, so its TLS block is in the static TLS, at the same offset from every
 * thread's struct pthread (pthread_self ()): computed from the offset found when libc was located,
 * without dl_iterate_phdr, whose lock another thread may hold (a fork snapshot's child). */
uintptr_t ptmd_libc_tls_block_self(const ptmd_libc *lc)
{
    if (!lc->tls_modid || !lc->tls_offset) return 0;
    return (uintptr_t)pthread_self() - lc->tls_offset;
}

static int parse_version(ptmd_libc *lc, ptmd_err *err)
{
    const char *v = gnu_get_libc_version();
    char *end;
    long major, minor;
    ptmd_strlcpy(lc->glibc_version, v, sizeof(lc->glibc_version));
    major = strtol(v, &end, 10);
    if (*end != '.') return ptmd_fail(err, PTMD_E_LIBC, "cannot parse the glibc version \"%s\"", v);
    minor = strtol(end + 1, &end, 10);
    lc->major = (int)major;
    lc->minor = (int)minor;
    return 0;
}

/* ---- symbol files ------------------------------------------------------------------------- */

static void note_tried(ptmd_libc *lc, const char *path)
{
    if (lc->ntried < PTMD_TRIED_MAX) ptmd_strlcpy(lc->tried[lc->ntried++], path, PATH_MAX);
}

/* Reads malloc's globals from an ELF file's .symtab. 1 when main_arena was found. */
static int resolve_from_file(ptmd_libc *lc, const ptmd_elf_file *f, int source, const char *path)
{
    ptmd_elf_sym syms[] = {
        { "main_arena", 0, 0, 0, 0 }, { "mp_", 0, 0, 0, 0 },          { "tcache_key", 0, 0, 0, 0 },
        { "tcache", 0, 0, 0, 0 },     { "thread_arena", 0, 0, 0, 0 }, { "__tcache_dummy", 0, 0, 0, 0 },
    };
    if (ptmd_elf_lookup(f, syms, sizeof(syms) / sizeof(syms[0])) <= 0 || !syms[0].found) return 0;
    if (syms[0].type != STT_OBJECT) return 0;
    lc->main_arena = lc->libc_base + syms[0].value;
    lc->mp = syms[1].found ? lc->libc_base + syms[1].value : 0;
    lc->tcache_key = syms[2].found ? lc->libc_base + syms[2].value : 0;
    lc->tcache_tls = syms[3].found && syms[3].type == STT_TLS ? (long)syms[3].value : -1;
    lc->thread_arena_tls = syms[4].found && syms[4].type == STT_TLS ? (long)syms[4].value : -1;
    lc->tcache_dummy = syms[5].found && syms[5].type == STT_OBJECT ? lc->libc_base + syms[5].value : 0;
    lc->symbol_source = source;
    ptmd_strlcpy(lc->symbol_file, path, sizeof(lc->symbol_file));
    return 1;
}

/* A symbol file must belong to this very libc: same build-id when both have one. */
static int same_build(const ptmd_libc *lc, const ptmd_elf_file *f)
{
    unsigned char id[PTMD_BUILD_ID_MAX];
    size_t n = ptmd_elf_file_build_id(f, id, sizeof(id));
    if (!lc->build_id_len || !n) return 1;
    return n == lc->build_id_len && memcmp(id, lc->build_id, n) == 0;
}

static int try_file(ptmd_libc *lc, const char *path, int source, int check_crc, uint32_t crc)
{
    ptmd_elf_file f;
    ptmd_err ignored;
    int ok = 0;
    note_tried(lc, path);
    if (ptmd_elf_open(&f, path, &ignored) != 0) return 0;
    if (check_crc && ptmd_crc32(0, f.data, f.size) != crc) goto out;
    if (!same_build(lc, &f)) goto out;
    ok = resolve_from_file(lc, &f, source, path);
out:
    ptmd_elf_close(&f);
    return ok;
}

static int locate_symtab(ptmd_libc *lc, ptmd_err *err)
{
    ptmd_elf_file f;
    ptmd_err ignored;
    int ok;
    PTMD_UNUSED(err);
    if (ptmd_elf_open(&f, lc->libc_path, &ignored) != 0) return 0;
    ok = ptmd_elf_section(&f, ".symtab") ? resolve_from_file(lc, &f, PTMD_SYMSRC_SYMTAB, lc->libc_path) : 0;
    ptmd_elf_close(&f);
    return ok;
}

static int locate_build_id(ptmd_libc *lc, ptmd_err *err)
{
    char hex[2 * sizeof(lc->build_id) + 1], path[PATH_MAX];
    PTMD_UNUSED(err);
    if (lc->build_id_len < 2) return 0;
    ptmd_hex(lc->build_id, lc->build_id_len, hex);
    if (snprintf(path, sizeof(path), "%s/.build-id/%.2s/%s.debug", lc->debug_dir, hex, hex + 2) >= (int)sizeof(path))
        return 0;
    return try_file(lc, path, PTMD_SYMSRC_BUILD_ID, 0, 0);
}

static int locate_debuglink(ptmd_libc *lc, ptmd_err *err)
{
    ptmd_elf_file f;
    ptmd_err ignored;
    char name[256], dir[PATH_MAX], real[PATH_MAX], path[PATH_MAX];
    const char *slash;
    uint32_t crc;
    int got;
    PTMD_UNUSED(err);
    if (ptmd_elf_open(&f, lc->libc_path, &ignored) != 0) return 0;
    got = ptmd_elf_debuglink(&f, name, sizeof(name), &crc);
    ptmd_elf_close(&f);
    if (got != 0 || strchr(name, '/')) return 0;
    /* gdb resolves the directory of the real file (libc.so.6 is often a symlink). */
    if (!realpath(lc->libc_path, real)) ptmd_strlcpy(real, lc->libc_path, sizeof(real));
    slash = strrchr(real, '/');
    if (!slash) return 0;
    memcpy(dir, real, (size_t)(slash - real));
    dir[slash - real] = '\0';
    if (snprintf(path, sizeof(path), "%s%s/%s", lc->debug_dir, dir, name) < (int)sizeof(path) &&
        try_file(lc, path, PTMD_SYMSRC_DEBUGLINK, 1, crc))
        return 1;
    if (snprintf(path, sizeof(path), "%s/.debug/%s", dir, name) < (int)sizeof(path) &&
        try_file(lc, path, PTMD_SYMSRC_DEBUGLINK, 1, crc))
        return 1;
    if (snprintf(path, sizeof(path), "%s/%s", dir, name) < (int)sizeof(path) &&
        try_file(lc, path, PTMD_SYMSRC_DEBUGLINK, 1, crc))
        return 1;
    return 0;
}

/* Strategies in order: symbol files first (exact), then by structure. */
static const ptmd_locator locators[] = {
    { locate_symtab },
    { locate_build_id },
    { locate_debuglink },
    { ptmd_locate_heuristic },
};

static void symbols_missing(const ptmd_libc *lc, ptmd_err *err)
{
    char hex[2 * sizeof(lc->build_id) + 1];
    char list[PTMD_TRIED_MAX * 128] = "";
    int i;
    ptmd_hex(lc->build_id, lc->build_id_len, hex);
    for (i = 0; i < lc->ntried; i++) {
        ptmd_strlcat(list, i ? ", " : "", sizeof(list));
        ptmd_strlcat(list, lc->tried[i], sizeof(list));
    }
    ptmd_fail(err, PTMD_E_SYMBOLS,
              "no symbol file for glibc %s (%s, build-id %s); tried: %s%s. "
              "Install libc's debug symbols (Debian/Ubuntu: apt-get install libc6-dbg; "
              "Fedora/RHEL: dnf debuginfo-install glibc) or point PTMALLOC_DUMP_DEBUG_DIR "
              "(or the debug_dir: option) at a directory that has them",
              lc->glibc_version, lc->libc_path, lc->build_id_len ? hex : "none", lc->ntried ? list : "nothing",
              lc->symbols_mode == PTMD_SYMBOLS_FILE ? "" : "; finding main_arena by its structure failed too");
}

static int locate_fresh(ptmd_libc *lc, const char *debug_dir, int symbols, ptmd_err *err)
{
    struct find_ctx ctx;
    size_t i;
    memset(lc, 0, sizeof(*lc));
    lc->symbols_mode = symbols;
    lc->tcache_tls = lc->thread_arena_tls = -1;
    ptmd_strlcpy(lc->debug_dir, debug_dir, sizeof(lc->debug_dir));
    if (parse_version(lc, err) != 0) return -1;
    ctx.probe = (uintptr_t)(void *)gnu_get_libc_version;
    ctx.lc = lc;
    ctx.found = 0;
    dl_iterate_phdr(find_libc_cb, &ctx);
    if (!ctx.found || !lc->libc_path[0])
        return ptmd_fail(err, PTMD_E_PLATFORM, "glibc's libc.so was not found among the loaded objects");
    lc->layout = ptmd_layout_for(lc->major, lc->minor);
    if (!lc->layout && lc->major == 2 && lc->minor > ptmd_layout_newest_minor()) {
        /* A newer glibc is walked only if its structures pass every check with the newest layout
         * (ptmd_walk_validate); otherwise the dump is refused. The walk checks every list as it follows it. */
        lc->layout = ptmd_layout_for(2, ptmd_layout_newest_minor());
        lc->layout_assumed = 1;
    }
    for (i = 0; i < sizeof(locators) / sizeof(locators[0]); i++) {
        int heuristic = locators[i].resolve == ptmd_locate_heuristic, r;
        if ((symbols == PTMD_SYMBOLS_FILE && heuristic) || (symbols == PTMD_SYMBOLS_HEURISTIC && !heuristic)) continue;
        r = locators[i].resolve(lc, err);
        if (r < 0) return -1;
        if (r > 0) return 0;
    }
    symbols_missing(lc, err);
    return -1;
}

static int foreign_malloc(const char *libc_path, char *who, size_t cap);

int ptmd_locate(const char *debug_dir, int symbols, const ptmd_libc **out, ptmd_err *err)
{
    const char *dir = debug_dir;
    int rc = 0;
    if (!dir || !*dir) dir = getenv("PTMALLOC_DUMP_DEBUG_DIR");
    if (!dir || !*dir) dir = PTMD_DEFAULT_DEBUG_DIR;
    pthread_mutex_lock(&cache_lock);
    if (!cache_valid || strcmp(cache.debug_dir, dir) != 0 || cache.symbols_mode != symbols) {
        cache_valid = 0;
        rc = locate_fresh(&cache, dir, symbols, err);
        if (rc == 0) cache_valid = 1;
    }
    pthread_mutex_unlock(&cache_lock);
    if (rc == 0) *out = &cache;
    else if (err->code == PTMD_E_SYMBOLS && cache.libc_path[0]) {
        /* Under another allocator glibc's arenas were never set up, so they cannot be found by their
         * structure: say what the real obstacle is. */
        char who[PATH_MAX];
        if (foreign_malloc(cache.libc_path, who, sizeof(who)))
            return ptmd_fail(err, PTMD_E_ALLOCATOR,
                             "malloc in this process is not glibc's ptmalloc2: it comes from %s, which "
                             "ptmalloc_dump cannot read (remove it from LD_PRELOAD or the link to dump "
                             "glibc's heap); glibc's main_arena was not found either (no symbol file, and "
                             "its structure is not that of a used arena)",
                             who);
    }
    return rc;
}

/* ---- libc in another process ------------------------------------------------------------- */

/* The libc named by a /proc/PID/maps line's path: libc.so.6, or libc-2.NN.so before glibc 2.34. */
static int is_libc_path(const char *path, size_t len)
{
    const char *base = path + len;
    size_t n;
    while (base > path && base[-1] != '/') base--;
    n = (size_t)(path + len - base);
    if (n == 9 && memcmp(base, "libc.so.6", 9) == 0) return 1;
    return n > 8 && memcmp(base, "libc-", 5) == 0 && memcmp(base + n - 3, ".so", 3) == 0;
}

/* libc's lowest mapping in the target (offset 0: its load bias) and its path, from /proc/PID/maps. */
static int find_process_libc(const ptmd_maps *maps, ptmd_libc *lc)
{
    const char *p = (const char *)maps->text.base, *end = p + maps->text.len;
    int found = 0;
    while (p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p)), *q;
        uint64_t start, offset;
        if (!eol) eol = end;
        q = p;
        start = ptmd_parse_hex(&q, eol);
        /* start-end perms offset dev inode path: the offset after the second space, the path at '/' */
        while (q < eol && *q != ' ') q++;
        while (q < eol && *q == ' ') q++;
        while (q < eol && *q != ' ') q++;
        while (q < eol && *q == ' ') q++;
        offset = ptmd_parse_hex(&q, eol);
        q = memchr(q, '/', (size_t)(eol - q));
        if (!q) q = eol;
        if (q < eol && *q == '/' && offset == 0 && is_libc_path(q, (size_t)(eol - q)) &&
            (size_t)(eol - q) < sizeof(lc->libc_path) && (!found || start < lc->libc_base)) {
            memcpy(lc->libc_path, q, (size_t)(eol - q));
            lc->libc_path[eol - q] = '\0';
            lc->libc_base = start;
            found = 1;
        }
        p = eol + 1;
    }
    return found;
}

/* The glibc version from the banner libc carries ("... release version 2.36."). */
static int version_from_image(const ptmd_elf_file *f, ptmd_libc *lc)
{
    static const char key[] = "release version ";
    const unsigned char *at = memmem(f->data, f->size, key, sizeof(key) - 1);
    size_t i = 0;
    char v[sizeof(lc->glibc_version)];
    const char *p;
    char *e;
    if (!at) return -1;
    p = (const char *)at + sizeof(key) - 1;
    while (i + 1 < sizeof(v) && (size_t)(p + i - (const char *)f->data) < f->size &&
           ((p[i] >= '0' && p[i] <= '9') ||
            (p[i] == '.' && i + 1 < sizeof(v) && (size_t)(p + i + 1 - (const char *)f->data) < f->size &&
             p[i + 1] >= '0' && p[i + 1] <= '9')))
        i++;
    memcpy(v, p, i);
    v[i] = '\0';
    lc->major = (int)strtol(v, &e, 10);
    if (*e != '.') return -1;
    lc->minor = (int)strtol(e + 1, NULL, 10);
    ptmd_strlcpy(lc->glibc_version, v, sizeof(lc->glibc_version));
    return 0;
}

/* The image's segments in the target (load bias lc->libc_base): extent, writable part, TLS size, and
 * the build-id from the PT_NOTE segment as mapped in the target. */
static int process_segments(ptmd_source *src, const ptmd_elf_file *f, ptmd_libc *lc)
{
    const Elf64_Ehdr *eh = (const Elf64_Ehdr *)(const void *)f->data;
    size_t i;
    if (eh->e_phentsize != sizeof(Elf64_Phdr) || eh->e_phoff > f->size ||
        (f->size - eh->e_phoff) / sizeof(Elf64_Phdr) < eh->e_phnum)
        return -1;
    lc->rw_start = lc->image_start = UINTPTR_MAX;
    lc->rw_end = lc->image_end = 0;
    for (i = 0; i < eh->e_phnum; i++) {
        Elf64_Phdr ph;
        uintptr_t lo, hi;
        memcpy(&ph, f->data + eh->e_phoff + i * sizeof(ph), sizeof(ph));
        lo = lc->libc_base + ph.p_vaddr;
        hi = lo + ph.p_memsz;
        if (ph.p_type == PT_TLS) lc->tls_size = ph.p_memsz;
        if (ph.p_type == PT_LOAD) {
            if (lo < lc->image_start) lc->image_start = lo;
            if (hi > lc->image_end) lc->image_end = hi;
            if ((ph.p_flags & PF_W) && lo < lc->rw_start) lc->rw_start = lo;
            if ((ph.p_flags & PF_W) && hi > lc->rw_end) lc->rw_end = hi;
        }
        if (ph.p_type == PT_NOTE && ph.p_filesz > 0 && ph.p_filesz <= 4096 && !lc->build_id_len) {
            unsigned char notes[4096];
            int got = ptmd_source_read_now(src, lo, notes, ph.p_filesz);
            if (got == 0)
                lc->build_id_len = ptmd_elf_notes_build_id(notes, ph.p_filesz, lc->build_id, sizeof(lc->build_id));
        }
    }
    return lc->image_end > lc->image_start && lc->rw_end > lc->rw_start ? 0 : -1;
}

static void outside_init(ptmd_libc *lc, const char *debug_dir, int symbols)
{
    const char *dir = debug_dir;
    if (!dir || !*dir) dir = getenv("PTMALLOC_DUMP_DEBUG_DIR");
    if (!dir || !*dir) dir = PTMD_DEFAULT_DEBUG_DIR;
    memset(lc, 0, sizeof(*lc));
    lc->symbols_mode = symbols;
    lc->tcache_tls = lc->thread_arena_tls = -1;
    ptmd_strlcpy(lc->debug_dir, dir, sizeof(lc->debug_dir));
}

/* With libc_path and libc_base known: its image, build-id, version, layout and symbols. `what` names
 * the process or core in messages. */
static int locate_outside(ptmd_libc *lc, ptmd_source *src, const ptmd_maps *maps, const char *what, int symbols,
                          ptmd_err *err)
{
    ptmd_elf_file f;
    unsigned char file_id[PTMD_BUILD_ID_MAX];
    size_t file_id_len;
    int same_file, rc;
    if (ptmd_elf_open(&f, lc->libc_path, err) != 0) return -1;
    file_id_len = ptmd_elf_file_build_id(&f, file_id, sizeof(file_id));
    if (process_segments(src, &f, lc) != 0 || version_from_image(&f, lc) != 0) {
        ptmd_elf_close(&f);
        return ptmd_fail(err, PTMD_E_LIBC, "%s, the libc of %s, is not an image ptmalloc_dump understands",
                         lc->libc_path, what);
    }
    ptmd_elf_close(&f);
    if (!lc->build_id_len) {
        memcpy(lc->build_id, file_id, file_id_len);
        lc->build_id_len = file_id_len;
    }
    /* libc replaced on disk since the target started: only a symbol file named by build-id fits, and
     * the version read from the file on disk may be another's */
    same_file = file_id_len == lc->build_id_len && memcmp(file_id, lc->build_id, file_id_len) == 0;
    if (!same_file)
        return ptmd_fail(err, PTMD_E_LIBC,
                         "%s is not the libc %s ran (build-ids differ): it was replaced on "
                         "disk since; dump while that libc is installed",
                         lc->libc_path, what);
    /* static TLS: the offset below the thread pointer is found from a thread's dtv (outside.c) */
    lc->tls_modid = lc->tls_size ? 1 : 0;
    lc->layout = ptmd_layout_for(lc->major, lc->minor);
    if (!lc->layout)
        return ptmd_fail(err, PTMD_E_LIBC,
                         "glibc %s (%s) is not supported: ptmalloc_dump knows the malloc "
                         "layouts of glibc 2.27 to 2.%d",
                         lc->glibc_version, what, ptmd_layout_newest_minor());
    rc = symbols != PTMD_SYMBOLS_HEURISTIC &&
         (locate_symtab(lc, err) || locate_build_id(lc, err) || locate_debuglink(lc, err));
    /* by structure: main_arena through its relocation, mp_ by its consistency, tcaches by theirs */
    if (!rc && symbols != PTMD_SYMBOLS_FILE) {
        /* a running process: libc's writable data read once, since the search reads it word by word */
        ptmd_source_hold_range(src, lc->rw_start & ~(uint64_t)4095, lc->rw_end);
        rc = ptmd_locate_heuristic_in(lc, src, maps);
    }
    if (!rc) {
        symbols_missing(lc, err);
        return -1;
    }
    return 0;
}

int ptmd_locate_process(int pid, const ptmd_maps *maps, const char *debug_dir, int symbols, ptmd_libc *lc,
                        ptmd_err *err)
{
    ptmd_source live;
    char what[64];
    int rc;
    outside_init(lc, debug_dir, symbols);
    if (!find_process_libc(maps, lc))
        return ptmd_fail(err, PTMD_E_PLATFORM,
                         "process %d has no glibc mapped (no libc.so.6 in /proc/%d/maps): a static binary or "
                         "another C library; ptmalloc-dump reads glibc's malloc only",
                         pid, pid);
    {
        /* the path as the process sees it: through its root, so that a process in another mount
         * namespace (a container) is read from its own files */
        char rooted[PATH_MAX];
        int n = snprintf(rooted, sizeof(rooted), "/proc/%d/root%s", pid, lc->libc_path);
        if (n > 0 && (size_t)n < sizeof(rooted) && access(rooted, R_OK) == 0)
            ptmd_strlcpy(lc->libc_path, rooted, sizeof(lc->libc_path));
    }
    snprintf(what, sizeof(what), "process %d", pid);
    ptmd_source_live(&live, pid);
    rc = locate_outside(lc, &live, maps, what, symbols, err);
    ptmd_source_release(&live);
    return rc;
}

int ptmd_locate_core(ptmd_source *core, const ptmd_maps *maps, const char *core_path, const char *debug_dir,
                     int symbols, ptmd_libc *lc, ptmd_err *err)
{
    uint64_t start, end, offset;
    const char *path;
    char what[PATH_MAX + 16];
    size_t i;
    int found = 0;
    outside_init(lc, debug_dir, symbols);
    for (i = 0; ptmd_source_core_file(core, i, &start, &end, &offset, &path) == 0; i++) {
        size_t n = strlen(path);
        if (offset || !is_libc_path(path, n) || n >= sizeof(lc->libc_path) || (found && start >= lc->libc_base))
            continue;
        memcpy(lc->libc_path, path, n + 1);
        lc->libc_base = start;
        found = 1;
    }
    if (!found)
        return ptmd_fail(err, PTMD_E_PLATFORM,
                         "the process of core file %s had no glibc mapped (no libc.so.6 in its NT_FILE note): a "
                         "static binary or another C library; ptmalloc-dump reads glibc's malloc only",
                         core_path);
    snprintf(what, sizeof(what), "core file %s", core_path);
    return locate_outside(lc, core, maps, what, symbols, err);
}

/* ---- is malloc glibc's? ------------------------------------------------------------------- */

static int check_allocator(const ptmd_libc *lc, ptmd_memreader *mem, ptmd_err *err);
static int allocator_ok;

/* The answer cannot change during the process's life (malloc's binding is fixed at start-up), so it
 * is computed once: the check itself calls dlopen and malloc. */
int ptmd_check_allocator(const ptmd_libc *lc, ptmd_memreader *mem, ptmd_err *err)
{
    int rc;
    if (__atomic_load_n(&allocator_ok, __ATOMIC_ACQUIRE)) return 0;
    rc = check_allocator(lc, mem, err);
    if (rc == 0) __atomic_store_n(&allocator_ok, 1, __ATOMIC_RELEASE);
    return rc;
}

/* 1 when `malloc` binds to an object other than libc, whose name goes to `who`. */
static int foreign_malloc(const char *libc_path, char *who, size_t cap)
{
    void *libc = dlopen(libc_path, RTLD_NOLOAD | RTLD_LAZY);
    void *def = dlsym(RTLD_DEFAULT, "malloc"), *own = libc ? dlsym(libc, "malloc") : NULL;
    Dl_info di;
    if (libc) dlclose(libc);
    if (!def || !own || def == own) return 0;
    ptmd_strlcpy(who, dladdr(def, &di) && di.dli_fname ? di.dli_fname : "an unknown object", cap);
    return 1;
}

static int check_allocator(const ptmd_libc *lc, ptmd_memreader *mem, ptmd_err *err)
{
    void *libc = dlopen(lc->libc_path, RTLD_NOLOAD | RTLD_LAZY);
    void *(*def_malloc)(size_t) = (void *(*)(size_t))dlsym(RTLD_DEFAULT, "malloc");
    void (*def_free)(void *) = (void (*)(void *))dlsym(RTLD_DEFAULT, "free");
    void *own = libc ? dlsym(libc, "malloc") : NULL;
    Dl_info di;
    const char *who;
    unsigned char *p;
    uint64_t size_word, chunk;
    int glibc_chunk = 0;

    if (libc) dlclose(libc);
    if (!def_malloc || !def_free || (void *)def_malloc == own) return 0;

    /* Something else defines malloc. A wrapper that forwards to glibc (a profiler) is fine; an
     * allocator of its own is not. Tell them apart by where a fresh block lives. */
    who = dladdr((void *)def_malloc, &di) && di.dli_fname ? di.dli_fname : "an unknown object";
    p = def_malloc(200);
    if (p) {
        uintptr_t rem;
        chunk = ptmd_mem2chunk((uintptr_t)p);
        if (ptmd_safe_read(mem, chunk + 8, &size_word, 8) != 0) size_word = 0;
        rem = ptmd_chunksize(size_word);
        if (rem >= 208 && rem < 4096 && !(size_word & PTMD_IS_MMAPPED)) {
            if (size_word & PTMD_NON_MAIN_ARENA) {
                uintptr_t max = PTMD_DEFAULT_HEAP_MAX_SIZE, h = chunk & ~(max - 1);
                uintptr_t ar = 0, av = lc->main_arena;
                int n = 0;
                /* heap_info.ar_ptr must be one of the arenas on main_arena's ring */
                if (lc->layout && ptmd_safe_read(mem, h, &ar, sizeof(ar)) == 0 && ar) {
                    do {
                        uint64_t next = 0;
                        if (ptmd_safe_read(mem, av + lc->layout->ms_next, &next, sizeof(next)) != 0) break;
                        av = (uintptr_t)next;
                        if (av == ar) glibc_chunk = 1;
                    } while (!glibc_chunk && av && av != lc->main_arena && ++n < 65536);
                }
            } else if (lc->main_arena && lc->layout) {
                uint64_t top = 0, system_mem = 0;
                uint32_t flags = 0;
                ptmd_safe_read(mem, lc->main_arena + lc->layout->ms_top, &top, 8);
                ptmd_safe_read(mem, lc->main_arena + lc->layout->ms_system_mem, &system_mem, 8);
                ptmd_safe_read(mem, lc->main_arena + lc->layout->ms_flags, &flags, 4);
                /* once sbrk failed the main arena's regions lie anywhere (regions.c): its chunk
                 * header then vouches alone */
                glibc_chunk = (flags & PTMD_NONCONTIGUOUS_BIT) ? (size_word & PTMD_PREV_INUSE) != 0
                                                               : chunk < top && top - chunk < system_mem;
            }
        }
        def_free(p);
    }
    if (glibc_chunk) return 0;
    return ptmd_fail(err, PTMD_E_ALLOCATOR,
                     "malloc in this process is not glibc's ptmalloc2: it comes from %s, "
                     "which ptmalloc_dump cannot read (remove it from LD_PRELOAD or the link to dump "
                     "glibc's heap)",
                     who);
}
