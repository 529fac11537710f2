/* A core file as a source: its PT_LOAD segments, mapped read-only from the file, are the regions in
 * place; its notes give the threads, the pid and the mapped files. Every offset and length read from
 * the core is checked against the file before it is used. */
#define _GNU_SOURCE
#include "capture/source_core.h"
#include "capture/arch.h"
#include "capture/core_files.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/procfs.h>
#include <sys/stat.h>
#include <sys/user.h>
#include <unistd.h>

static const ptmd_source_ops core_ops = {
    .kind = PTMD_SOURCE_KIND_CORE,
    .in_place = 0,
    .read = ptmd_source_copy_read,
    .read_many = ptmd_source_read_each,
    .pages = ptmd_source_copy_pages,
    .threads = ptmd_source_held_threads,
};

#define PTMD_NT_FILE 0x46494c45 /* "FILE": the mapped files (linux/elf.h) */

/* Where NT_PRSTATUS's registers (elf_gregset_t) hold the stack pointer and the thread pointer; aarch64
 * keeps the thread pointer (tpidr_el0) in the NT_ARM_TLS note after each thread's NT_PRSTATUS. */
#if defined(__x86_64__)
#define PTMD_CORE_SP_INDEX (offsetof(struct user_regs_struct, rsp) / sizeof(unsigned long long))
#define PTMD_CORE_TP_INDEX (offsetof(struct user_regs_struct, fs_base) / sizeof(unsigned long long))
#else
#define PTMD_CORE_SP_INDEX 31 /* struct user_pt_regs: regs[31], sp, pc, pstate */
#define PTMD_NT_ARM_TLS 0x401
#endif

/* The notes of a PT_NOTE segment: threads and thread_ptr (NT_PRSTATUS, main thread's first when the
 * kernel wrote it; gcore puts the current thread first), pid (NT_PRPSINFO), files (NT_FILE). */
static int core_notes(ptmd_source *s, const unsigned char *p, size_t len, const char *path, ptmd_err *err)
{
    size_t off = 0;
    while (len - off >= sizeof(Elf64_Nhdr)) {
        Elf64_Nhdr nh;
        size_t name_off, desc_off, namesz, descsz;
        memcpy(&nh, p + off, sizeof(nh));
        namesz = ((size_t)nh.n_namesz + 3) & ~(size_t)3;
        descsz = ((size_t)nh.n_descsz + 3) & ~(size_t)3;
        name_off = off + sizeof(nh);
        if (namesz > len - name_off || nh.n_descsz > len - name_off - namesz)
            return ptmd_fail(err, PTMD_E_CORE, "core file %s: a note runs past its segment", path);
        desc_off = name_off + namesz;
        if (nh.n_type == NT_PRSTATUS && nh.n_descsz >= sizeof(struct elf_prstatus)) {
            struct elf_prstatus st;
            memcpy(&st, p + desc_off, sizeof(st));
            if (s->n_tids < PTMD_SOURCE_MAX_TASKS) {
                s->tids[s->n_tids] = st.pr_pid;
#ifdef PTMD_CORE_TP_INDEX
                s->thread_ptr[s->n_tids] = st.pr_reg[PTMD_CORE_TP_INDEX];
#else
                s->thread_ptr[s->n_tids] = 0; /* until its NT_ARM_TLS */
#endif
                s->n_tids++;
                if (st.pr_pid == s->pid || !s->main_sp) s->main_sp = st.pr_reg[PTMD_CORE_SP_INDEX];
            }
#ifdef PTMD_NT_ARM_TLS
        } else if (nh.n_type == PTMD_NT_ARM_TLS && nh.n_descsz >= 8 && s->n_tids > 0) {
            memcpy(&s->thread_ptr[s->n_tids - 1], p + desc_off, 8);
#endif
        } else if (nh.n_type == NT_PRPSINFO && nh.n_descsz >= sizeof(struct elf_prpsinfo)) {
            struct elf_prpsinfo ps;
            memcpy(&ps, p + desc_off, sizeof(ps));
            s->pid = ps.pr_pid;
            s->ppid = ps.pr_ppid;
        } else if (nh.n_type == NT_AUXV) {
            s->auxv = p + desc_off;
            s->auxv_len = nh.n_descsz;
        } else if (nh.n_type == PTMD_NT_FILE && nh.n_descsz >= 16) {
            s->nt_file = p + desc_off;
            s->nt_file_len = nh.n_descsz;
        }
        if (descsz > len - desc_off) break;
        off = desc_off + descsz;
    }
    return 0;
}

int ptmd_source_core_file(const ptmd_source *s, size_t i, uint64_t *start, uint64_t *end, uint64_t *offset,
                          const char **path)
{
    uint64_t count, page, e[3];
    const char *name, *stop;
    size_t k;
    if (!s->nt_file) return -1;
    memcpy(&count, s->nt_file, 8);
    memcpy(&page, s->nt_file + 8, 8);
    if (i >= count || count > (s->nt_file_len - 16) / 24) return -1;
    memcpy(e, s->nt_file + 16 + i * 24, sizeof(e));
    name = (const char *)s->nt_file + 16 + count * 24;
    stop = (const char *)s->nt_file + s->nt_file_len;
    for (k = 0; k < i && name < stop; k++) {
        const char *z = memchr(name, 0, (size_t)(stop - name));
        if (!z) return -1;
        name = z + 1;
    }
    if (name >= stop || !memchr(name, 0, (size_t)(stop - name))) return -1;
    *start = e[0];
    *end = e[1];
    *offset = e[2] * page;
    *path = name;
    return 0;
}

static int core_file_backed(const ptmd_source *s, uint64_t lo, uint64_t hi)
{
    uint64_t start, end, offset;
    const char *path;
    size_t i;
    for (i = 0; ptmd_source_core_file(s, i, &start, &end, &offset, &path) == 0; i++)
        if (start < hi && end > lo) return 1;
    return 0;
}

/* Each mapping's kind: file-backed by the NT_FILE note, the main thread's stack, else anonymous. */
static void classify(const ptmd_source *s, ptmd_maps *maps)
{
    size_t i;
    for (i = 0; i < maps->count; i++) {
        ptmd_map *m = PTMD_BUF_AT(&maps->maps, ptmd_map, i);
        m->kind = core_file_backed(s, m->start, m->end)           ? PTMD_MAPKIND_FILE
                  : s->main_sp >= m->start && s->main_sp < m->end ? PTMD_MAPKIND_STACK
                                                                  : PTMD_MAPKIND_ANON;
    }
}

int ptmd_source_open_core(ptmd_source *s, const char *path, ptmd_maps *maps, ptmd_err *err)
{
    const Elf64_Ehdr *eh;
    struct stat st;
    size_t i;
    int fd;
    ptmd_source_init(s, &core_ops, 0);
    if (ptmd_source_thread_table(s) != 0) return ptmd_fail_sys(err, errno, "thread table", "mmap");
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
        return ptmd_fail(err, PTMD_E_CORE, "cannot open core file %s: %s", path, strerror(errno));
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return ptmd_fail_sys(err, e, path, "fstat");
    }
    if (!S_ISREG(st.st_mode)) {
        int dir = S_ISDIR(st.st_mode);
        close(fd);
        return ptmd_fail(err, PTMD_E_CORE, "%s is %s, not a core file", path,
                         dir ? "a directory" : "a device, a pipe or a socket");
    }
    if (st.st_size < (off_t)sizeof(Elf64_Ehdr)) {
        close(fd);
        return ptmd_fail(err, PTMD_E_CORE, "%s is no core file: too short for an ELF header", path);
    }
    s->core = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (s->core == MAP_FAILED) {
        s->core = NULL;
        return ptmd_fail_sys(err, errno, path, "mmap");
    }
    s->core_size = (size_t)st.st_size;
    eh = (const Elf64_Ehdr *)(const void *)s->core;
    if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_type != ET_CORE)
        return ptmd_fail(err, PTMD_E_CORE, "%s is no core file (not an ELF core)", path);
    if (eh->e_ident[EI_CLASS] != ELFCLASS64 || eh->e_ident[EI_DATA] != ELFDATA2LSB || eh->e_machine != PTMD_ELF_MACHINE)
        return ptmd_fail(err, PTMD_E_CORE,
                         "%s is a core of another architecture (ELF machine %u, class %u): "
                         "ptmalloc_dump built for " PTMD_ARCH_NAME " reads " PTMD_ARCH_NAME " cores",
                         path, (unsigned)eh->e_machine, (unsigned)eh->e_ident[EI_CLASS]);
    if (eh->e_phentsize != sizeof(Elf64_Phdr) || eh->e_phoff > s->core_size ||
        (s->core_size - eh->e_phoff) / sizeof(Elf64_Phdr) < eh->e_phnum)
        return ptmd_fail(err, PTMD_E_CORE, "core file %s is truncated: its program headers are cut off", path);
    /* the notes first: the pid, and the files, which say which segments are file-backed */
    for (i = 0; i < eh->e_phnum; i++) {
        Elf64_Phdr ph;
        memcpy(&ph, s->core + eh->e_phoff + i * sizeof(ph), sizeof(ph));
        if (ph.p_type != PT_NOTE) continue;
        if (ph.p_offset > s->core_size || ph.p_filesz > s->core_size - ph.p_offset)
            return ptmd_fail(err, PTMD_E_CORE, "core file %s is truncated: its notes are cut off", path);
        if (core_notes(s, s->core + ph.p_offset, ph.p_filesz, path, err) != 0) return -1;
    }
    if (!s->n_tids || !s->pid)
        return ptmd_fail(err, PTMD_E_CORE, "core file %s has no thread or process notes (NT_PRSTATUS, NT_PRPSINFO)",
                         path);
    maps->count = 0;
    maps->maps.len = 0;
    for (i = 0; i < eh->e_phnum; i++) {
        Elf64_Phdr ph;
        ptmd_map *m;
        ptmd_region *r;
        uint64_t have;
        memcpy(&ph, s->core + eh->e_phoff + i * sizeof(ph), sizeof(ph));
        if (ph.p_type != PT_LOAD || !ph.p_memsz || ph.p_vaddr + ph.p_memsz < ph.p_vaddr) continue;
        if (maps->count && ph.p_vaddr < PTMD_BUF_AT(&maps->maps, ptmd_map, maps->count - 1)->end)
            return ptmd_fail(err, PTMD_E_CORE, "core file %s: its segments are not in address order", path);
        if (ph.p_filesz && (ph.p_offset > s->core_size || ph.p_filesz > s->core_size - ph.p_offset))
            return ptmd_fail(err, PTMD_E_CORE,
                             "core file %s is truncated: the segment at %#lx needs %lu bytes "
                             "from offset %lu, the file has %lu",
                             path, (unsigned long)ph.p_vaddr, (unsigned long)ph.p_filesz, (unsigned long)ph.p_offset,
                             (unsigned long)s->core_size);
        if (!(m = ptmd_buf_push(&maps->maps, sizeof(*m)))) return ptmd_fail_sys(err, errno, "core mappings", "mmap");
        maps->count++;
        m->start = ph.p_vaddr;
        m->end = ph.p_vaddr + ph.p_memsz;
        m->prot = PTMD_MAP_PRIVATE | (ph.p_flags & PF_W ? PTMD_MAP_W : 0) | (ph.p_flags & PF_X ? PTMD_MAP_X : 0);
        m->kind = PTMD_MAPKIND_ANON; /* classify () */
        have = ph.p_filesz < ph.p_memsz ? ph.p_filesz & ~(uint64_t)(s->page_size - 1) : ph.p_memsz;
        if (!(ph.p_flags & PF_R) || !have) continue;
        /* what the core left out (read-only file pages past the ELF headers) cannot be read: such a
         * mapping is no readable mapping, though its first pages are a region (libc's notes) */
        if (have == ph.p_memsz) m->prot |= PTMD_MAP_R;
        r = s->n_regions ? PTMD_BUF_AT(&s->regions, ptmd_region, s->n_regions - 1) : NULL;
        if (have == ph.p_memsz && r && r->end == m->start && r->local + (r->end - r->start) == s->core + ph.p_offset) {
            r->end = m->end;
            s->copied_bytes += have;
            continue;
        }
        if (!(r = ptmd_buf_push(&s->regions, sizeof(*r)))) return ptmd_fail_sys(err, errno, "core regions", "mmap");
        s->n_regions++;
        r->start = m->start;
        r->end = m->start + have;
        r->local = (unsigned char *)(uintptr_t)(s->core + ph.p_offset);
        s->copied_bytes += have;
    }
    for (i = 0; i < s->n_regions; i++) {
        ptmd_region *r = PTMD_BUF_AT(&s->regions, ptmd_region, i);
        size_t np = (size_t)((r->end - r->start) / s->page_size);
        if (!(r->pages = ptmd_source_zeroed(np))) return ptmd_fail_sys(err, errno, "core regions", "mmap");
        memset(r->pages, PTMD_PAGE_PRESENT | PTMD_PAGE_SHARING_UNKNOWN, np); /* a core tells no sharing */
    }
    if (!s->nt_file) {
        if (ptmd_core_files_from_link_map(s, s->auxv, s->auxv_len, &s->made_nt_file) != 0)
            return ptmd_fail(err, PTMD_E_CORE,
                             "core file %s has no NT_FILE note, and the dynamic linker's list of loaded "
                             "objects could not be read from it: which files it mapped is unknown",
                             path);
        s->nt_file = s->made_nt_file.base;
        s->nt_file_len = s->made_nt_file.len;
    }
    classify(s, maps);
    return 0;
}
