/* A core without an NT_FILE note (qemu-user writes none): which files its process mapped, from the
 * dynamic linker's list of loaded objects in the core's memory, as the note would have said it.
 *   - NT_AUXV gives where the program's headers were loaded (AT_PHDR), the dynamic linker's base
 *     (AT_BASE) and the program's path (AT_EXECFN, on the stack). Its file's headers give its load
 *     bias (PT_PHDR) and the dynamic linker's path (PT_INTERP): read-only pages of a file are not in
 *     such a core.
 *   - The dynamic linker's exported `_r_debug` (elf/link.h: r_version, then r_map) is read from its
 *     file on disk; r_map begins the list of struct link_map (l_addr, l_name, l_ld, l_next), which
 *     lives in the linker's writable memory, so in the core.
 *   - Each object's PT_LOAD headers, read from its file, give the ranges the file backs.
 * Every address read comes from the core and is read through the source, which reads only what the
 * core holds; every walk is bounded. */
#define _GNU_SOURCE
#include "capture/core_files.h"
#include "capture/elfread.h"

#include <elf.h>
#include <fcntl.h>
#include <limits.h>
#include <string.h>
#include <unistd.h>

#define PTMD_CORE_OBJECTS_MAX 4096

typedef struct {
    uint64_t phdr, base, execfn;
} auxv_info;

static void read_auxv(const unsigned char *auxv, size_t len, auxv_info *a)
{
    size_t i;
    memset(a, 0, sizeof(*a));
    for (i = 0; i + 16 <= len; i += 16) {
        uint64_t kv[2];
        memcpy(kv, auxv + i, 16);
        if (kv[0] == AT_NULL) break;
        if (kv[0] == AT_PHDR) a->phdr = kv[1];
        else if (kv[0] == AT_BASE) a->base = kv[1];
        else if (kv[0] == AT_EXECFN) a->execfn = kv[1];
    }
}

/* A NUL-terminated string of the core at addr into out; 0 when whole. */
static int read_string(ptmd_source *s, uint64_t addr, char *out, size_t cap)
{
    size_t n = 0;
    while (n + 1 < cap) {
        size_t k = 64 < cap - 1 - n ? 64 : cap - 1 - n;
        const char *z;
        if (ptmd_source_read(s, addr + n, out + n, k) != 0) {
            /* the string's last bytes may end a region: byte by byte there */
            if (ptmd_source_read(s, addr + n, out + n, 1) != 0) return -1;
            k = 1;
        }
        if ((z = memchr(out + n, 0, k)) != NULL) return 0;
        n += k;
    }
    return -1;
}

/* Appends one NT_FILE entry (start, end, offset in pages) and its name to the two tables. */
static int add_file(ptmd_buf *entries, ptmd_buf *names, uint64_t start, uint64_t end, uint64_t page_off,
                    const char *path)
{
    uint64_t e[3] = { start, end, page_off };
    return ptmd_buf_append(entries, e, sizeof(e)) || ptmd_buf_append(names, path, strlen(path) + 1) ? -1 : 0;
}

/* The ranges the object at load bias `bias` maps from the file at path. */
static int add_object(ptmd_source *s, ptmd_buf *entries, ptmd_buf *names, uint64_t bias, const char *path)
{
    ptmd_elf_file f;
    ptmd_err ignored;
    const Elf64_Ehdr *eh;
    uint64_t ps = s->page_size;
    size_t i;
    int rc = 0;
    memset(&ignored, 0, sizeof(ignored));
    if (!path[0] || ptmd_elf_open(&f, path, &ignored) != 0) return 0; /* not on this machine: not named */
    eh = (const Elf64_Ehdr *)(const void *)f.data;
    if (eh->e_phentsize == sizeof(Elf64_Phdr) && eh->e_phoff <= f.size &&
        (f.size - eh->e_phoff) / sizeof(Elf64_Phdr) >= eh->e_phnum)
        for (i = 0; i < eh->e_phnum && rc == 0; i++) {
            Elf64_Phdr ph;
            uint64_t lo, hi;
            memcpy(&ph, f.data + eh->e_phoff + i * sizeof(ph), sizeof(ph));
            if (ph.p_type != PT_LOAD || !ph.p_filesz) continue;
            lo = (bias + ph.p_vaddr) & ~(ps - 1);
            hi = (bias + ph.p_vaddr + ph.p_filesz + ps - 1) & ~(ps - 1);
            rc = add_file(entries, names, lo, hi, (ph.p_offset & ~(ps - 1)) / ps, path);
        }
    ptmd_elf_close(&f);
    return rc;
}

/* The program's load bias and the dynamic linker's path, from the program's file. */
static int program_headers(const auxv_info *a, const char *exe, uint64_t *bias, char *interp, size_t cap)
{
    ptmd_elf_file f;
    ptmd_err ignored;
    const Elf64_Ehdr *eh;
    size_t i;
    int have_bias = 0;
    memset(&ignored, 0, sizeof(ignored));
    interp[0] = 0;
    if (!a->phdr || ptmd_elf_open(&f, exe, &ignored) != 0) return -1;
    eh = (const Elf64_Ehdr *)(const void *)f.data;
    if (eh->e_phentsize == sizeof(Elf64_Phdr) && eh->e_phoff <= f.size &&
        (f.size - eh->e_phoff) / sizeof(Elf64_Phdr) >= eh->e_phnum)
        for (i = 0; i < eh->e_phnum; i++) {
            Elf64_Phdr ph;
            memcpy(&ph, f.data + eh->e_phoff + i * sizeof(ph), sizeof(ph));
            if (ph.p_type == PT_PHDR) {
                *bias = a->phdr - ph.p_vaddr;
                have_bias = 1;
            }
            if (ph.p_type == PT_INTERP && ph.p_offset <= f.size && ph.p_filesz <= f.size - ph.p_offset &&
                ph.p_filesz < cap && ph.p_filesz && !f.data[ph.p_offset + ph.p_filesz - 1]) {
                memcpy(interp, f.data + ph.p_offset, ph.p_filesz);
            }
        }
    ptmd_elf_close(&f);
    return have_bias && interp[0] ? 0 : -1;
}

int ptmd_core_files_from_link_map(ptmd_source *s, const unsigned char *auxv, size_t auxv_len, ptmd_buf *out)
{
    static char exe[PATH_MAX], path[PATH_MAX], interp[PATH_MAX];
    ptmd_buf entries = { 0 }, names = { 0 };
    ptmd_elf_sym sym = { "_r_debug", 0, 0, 0, 0 };
    ptmd_elf_file ld;
    ptmd_err ignored;
    auxv_info a;
    uint64_t bias, lm, count, page = s->page_size;
    size_t steps = 0;
    int rc = -1;
    memset(&ignored, 0, sizeof(ignored));
    read_auxv(auxv, auxv_len, &a);
    if (!a.base || !a.execfn || read_string(s, a.execfn, exe, sizeof(exe)) != 0 ||
        program_headers(&a, exe, &bias, interp, sizeof(interp)) != 0)
        return -1;
    if (ptmd_elf_open(&ld, interp, &ignored) != 0) return -1;
    if (ptmd_elf_lookup_dynamic(&ld, &sym, 1) != 1) sym.found = 0;
    ptmd_elf_close(&ld);
    if (!sym.found || ptmd_source_read(s, a.base + sym.value + 8, &lm, 8) != 0) return -1;
    /* the program, by the path it was run as, and every object on the list */
    if (add_object(s, &entries, &names, bias, exe) != 0) goto out;
    while (lm && ++steps <= PTMD_CORE_OBJECTS_MAX) {
        uint64_t l[4]; /* l_addr, l_name, l_ld, l_next */
        if (ptmd_source_read(s, lm, l, sizeof(l)) != 0) break;
        if (l[1] && read_string(s, l[1], path, sizeof(path)) == 0 && path[0] &&
            add_object(s, &entries, &names, l[0], path) != 0)
            goto out;
        lm = l[3];
    }
    count = PTMD_BUF_COUNT(&entries, uint64_t) / 3;
    if (!count) goto out;
    /* NT_FILE's layout: count, page size, count × (start, end, offset in pages), the names */
    out->len = 0;
    if (ptmd_buf_append(out, &count, 8) || ptmd_buf_append(out, &page, 8) ||
        ptmd_buf_append(out, entries.base, entries.len) || ptmd_buf_append(out, names.base, names.len))
        goto out;
    rc = 0;
out:
    ptmd_buf_release(&entries);
    ptmd_buf_release(&names);
    return rc;
}
