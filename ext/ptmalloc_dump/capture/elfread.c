/* ELF64 parsing without libelf. Every offset read from a file is checked against the file size. */
#define _GNU_SOURCE
#include "capture/elfread.h"
#include "capture/arch.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static int range_ok(size_t total, uint64_t off, uint64_t len)
{
    return off <= total && len <= total - off;
}

int ptmd_elf_open(ptmd_elf_file *f, const char *path, ptmd_err *err)
{
    struct stat st;
    const Elf64_Ehdr *eh;
    const Elf64_Shdr *strsh;
    void *map;
    int fd;

    memset(f, 0, sizeof(*f));
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ptmd_fail_sys(err, errno, path, "open");
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return ptmd_fail_sys(err, e, path, "stat");
    }
    if (!S_ISREG(st.st_mode) || st.st_size < (off_t)sizeof(Elf64_Ehdr)) {
        close(fd);
        return ptmd_fail(err, PTMD_E_FORMAT, "%s is not an ELF file", path);
    }
    map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) return ptmd_fail_sys(err, errno, path, "mmap");
    f->data = map;
    f->size = (size_t)st.st_size;
    eh = map;
    if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_ident[EI_CLASS] != ELFCLASS64 ||
        eh->e_ident[EI_DATA] != ELFDATA2LSB || eh->e_machine != PTMD_ELF_MACHINE) {
        ptmd_elf_close(f);
        return ptmd_fail(err, PTMD_E_FORMAT, "%s is not an ELF64 " PTMD_ARCH_NAME " file", path);
    }
    if (eh->e_shentsize != sizeof(Elf64_Shdr) || eh->e_shnum == 0 ||
        !range_ok(f->size, eh->e_shoff, (uint64_t)eh->e_shnum * sizeof(Elf64_Shdr)) || eh->e_shstrndx >= eh->e_shnum ||
        (eh->e_shoff & 7)) {
        ptmd_elf_close(f);
        return ptmd_fail(err, PTMD_E_FORMAT, "%s has a damaged section header table", path);
    }
    f->shdrs = (const Elf64_Shdr *)(const void *)(f->data + eh->e_shoff);
    f->shnum = eh->e_shnum;
    strsh = &f->shdrs[eh->e_shstrndx];
    if (strsh->sh_type == SHT_NOBITS || !range_ok(f->size, strsh->sh_offset, strsh->sh_size)) {
        ptmd_elf_close(f);
        return ptmd_fail(err, PTMD_E_FORMAT, "%s has a damaged section name table", path);
    }
    f->shstrtab = (const char *)f->data + strsh->sh_offset;
    f->shstrtab_size = strsh->sh_size;
    return 0;
}

void ptmd_elf_close(ptmd_elf_file *f)
{
    if (f->data) munmap((void *)f->data, f->size);
    memset(f, 0, sizeof(*f));
}

const Elf64_Shdr *ptmd_elf_section(const ptmd_elf_file *f, const char *name)
{
    size_t i, nlen = strlen(name);
    for (i = 0; i < f->shnum; i++) {
        uint32_t off = f->shdrs[i].sh_name;
        if (off < f->shstrtab_size && f->shstrtab_size - off > nlen && memcmp(f->shstrtab + off, name, nlen + 1) == 0)
            return &f->shdrs[i];
    }
    return NULL;
}

const unsigned char *ptmd_elf_section_data(const ptmd_elf_file *f, const Elf64_Shdr *sh)
{
    if (!sh || sh->sh_type == SHT_NOBITS || (sh->sh_flags & SHF_COMPRESSED)) return NULL;
    if (!range_ok(f->size, sh->sh_offset, sh->sh_size)) return NULL;
    return f->data + sh->sh_offset;
}

/* Walks a note area for NT_GNU_BUILD_ID. */
static size_t notes_build_id(const unsigned char *p, size_t len, unsigned char *out, size_t max)
{
    size_t off = 0;
    while (len - off >= sizeof(Elf64_Nhdr)) {
        Elf64_Nhdr nh;
        size_t namesz, descsz, name_off, desc_off;
        memcpy(&nh, p + off, sizeof(nh));
        namesz = (nh.n_namesz + 3u) & ~3u;
        descsz = (nh.n_descsz + 3u) & ~3u;
        name_off = off + sizeof(nh);
        desc_off = name_off + namesz;
        if (namesz > len || descsz > len || desc_off > len || descsz > len - desc_off) break;
        if (nh.n_type == NT_GNU_BUILD_ID && nh.n_namesz == 4 && memcmp(p + name_off, "GNU", 4) == 0 &&
            nh.n_descsz > 0 && nh.n_descsz <= max) {
            memcpy(out, p + desc_off, nh.n_descsz);
            return nh.n_descsz;
        }
        off = desc_off + descsz;
    }
    return 0;
}

size_t ptmd_elf_notes_build_id(const unsigned char *notes, size_t len, unsigned char *out, size_t max)
{
    return notes_build_id(notes, len, out, max);
}

size_t ptmd_elf_file_build_id(const ptmd_elf_file *f, unsigned char *out, size_t max)
{
    size_t i, n;
    for (i = 0; i < f->shnum; i++) {
        const Elf64_Shdr *sh = &f->shdrs[i];
        const unsigned char *d;
        if (sh->sh_type != SHT_NOTE) continue;
        d = ptmd_elf_section_data(f, sh);
        if (d && (n = notes_build_id(d, sh->sh_size, out, max)) > 0) return n;
    }
    return 0;
}

int ptmd_elf_debuglink(const ptmd_elf_file *f, char *name, size_t name_size, uint32_t *crc)
{
    const Elf64_Shdr *sh = ptmd_elf_section(f, ".gnu_debuglink");
    const unsigned char *d = ptmd_elf_section_data(f, sh);
    size_t len, crc_off;
    if (!d) return -1;
    len = strnlen((const char *)d, sh->sh_size);
    crc_off = (len + 4) & ~(size_t)3;
    if (len == 0 || len >= name_size || crc_off + 4 > sh->sh_size) return -1;
    memcpy(name, d, len);
    name[len] = '\0';
    memcpy(crc, d + crc_off, 4);
    return 0;
}

static int lookup_in(const ptmd_elf_file *f, const char *section, uint32_t type, ptmd_elf_sym *syms, size_t nsyms)
{
    const Elf64_Shdr *symsh = ptmd_elf_section(f, section), *strsh;
    const unsigned char *symd, *strd;
    size_t i, j, n;
    int found = 0;
    if (!symsh || symsh->sh_type != type || symsh->sh_entsize != sizeof(Elf64_Sym)) return -1;
    if (symsh->sh_link >= f->shnum) return -1;
    strsh = &f->shdrs[symsh->sh_link];
    symd = ptmd_elf_section_data(f, symsh);
    strd = ptmd_elf_section_data(f, strsh);
    if (!symd || !strd) return -1;
    n = symsh->sh_size / sizeof(Elf64_Sym);
    for (i = 0; i < n; i++) {
        Elf64_Sym s;
        const char *nm;
        size_t room;
        memcpy(&s, symd + i * sizeof(Elf64_Sym), sizeof(s));
        if (s.st_name == 0 || s.st_name >= strsh->sh_size || s.st_shndx == SHN_UNDEF) continue;
        nm = (const char *)strd + s.st_name;
        room = strsh->sh_size - s.st_name;
        for (j = 0; j < nsyms; j++) {
            size_t l;
            if (syms[j].found) continue;
            l = strlen(syms[j].name);
            if (l < room && memcmp(nm, syms[j].name, l + 1) == 0) {
                syms[j].value = s.st_value;
                syms[j].size = s.st_size;
                syms[j].type = ELF64_ST_TYPE(s.st_info);
                syms[j].found = 1;
                found++;
                break;
            }
        }
    }
    return found;
}

int ptmd_elf_lookup(const ptmd_elf_file *f, ptmd_elf_sym *syms, size_t nsyms)
{
    return lookup_in(f, ".symtab", SHT_SYMTAB, syms, nsyms);
}

int ptmd_elf_lookup_dynamic(const ptmd_elf_file *f, ptmd_elf_sym *syms, size_t nsyms)
{
    return lookup_in(f, ".dynsym", SHT_DYNSYM, syms, nsyms);
}

size_t ptmd_elf_loaded_build_id(uintptr_t load_bias, const Elf64_Phdr *phdrs, size_t phnum, unsigned char *out,
                                size_t max)
{
    size_t i, n;
    for (i = 0; i < phnum; i++) {
        if (phdrs[i].p_type != PT_NOTE) continue;
        n = notes_build_id((const unsigned char *)(load_bias + phdrs[i].p_vaddr), phdrs[i].p_memsz, out, max);
        if (n) return n;
    }
    return 0;
}

static const Elf64_Phdr *file_phdrs(const ptmd_elf_file *f, size_t *n)
{
    const Elf64_Ehdr *eh = (const Elf64_Ehdr *)(const void *)f->data;
    if (eh->e_phentsize != sizeof(Elf64_Phdr) ||
        !range_ok(f->size, eh->e_phoff, (uint64_t)eh->e_phnum * sizeof(Elf64_Phdr)) || (eh->e_phoff & 7))
        return NULL;
    *n = eh->e_phnum;
    return (const Elf64_Phdr *)(const void *)(f->data + eh->e_phoff);
}

int ptmd_elf_vaddr_offset(const ptmd_elf_file *f, uint64_t vaddr, uint64_t *off)
{
    size_t n = 0, i;
    const Elf64_Phdr *ph = file_phdrs(f, &n);
    for (i = 0; ph && i < n; i++) {
        if (ph[i].p_type != PT_LOAD || vaddr < ph[i].p_vaddr || vaddr - ph[i].p_vaddr >= ph[i].p_filesz) continue;
        *off = ph[i].p_offset + (vaddr - ph[i].p_vaddr);
        return range_ok(f->size, *off, 8) ? 0 : -1;
    }
    return -1;
}

static int read_u64_at(const ptmd_elf_file *f, uint64_t vaddr, uint64_t *v)
{
    uint64_t off;
    if (ptmd_elf_vaddr_offset(f, vaddr, &off) != 0) return -1;
    memcpy(v, f->data + off, 8);
    return 0;
}

long ptmd_elf_relative_relocs(const ptmd_elf_file *f, void (*fn)(uint64_t, uint64_t, void *), void *arg)
{
    size_t n = 0, i;
    const Elf64_Phdr *ph = file_phdrs(f, &n);
    uint64_t rela = 0, relasz = 0, relr = 0, relrsz = 0, off, k;
    long count = 0;
    const Elf64_Phdr *dyn = NULL;
    for (i = 0; ph && i < n; i++)
        if (ph[i].p_type == PT_DYNAMIC) dyn = &ph[i];
    if (!dyn || !range_ok(f->size, dyn->p_offset, dyn->p_filesz)) return -1;
    for (k = 0; k + sizeof(Elf64_Dyn) <= dyn->p_filesz; k += sizeof(Elf64_Dyn)) {
        Elf64_Dyn d;
        memcpy(&d, f->data + dyn->p_offset + k, sizeof(d));
        if (d.d_tag == DT_NULL) break;
        if (d.d_tag == DT_RELA) rela = d.d_un.d_ptr;
        else if (d.d_tag == DT_RELASZ) relasz = d.d_un.d_val;
        else if (d.d_tag == 36 /* DT_RELR */) relr = d.d_un.d_ptr;
        else if (d.d_tag == 35 /* DT_RELRSZ */) relrsz = d.d_un.d_val;
    }
    if (rela && ptmd_elf_vaddr_offset(f, rela, &off) == 0 && range_ok(f->size, off, relasz)) {
        for (k = 0; k + sizeof(Elf64_Rela) <= relasz; k += sizeof(Elf64_Rela)) {
            Elf64_Rela r;
            memcpy(&r, f->data + off + k, sizeof(r));
            if (ELF64_R_TYPE(r.r_info) != PTMD_R_RELATIVE) continue;
            fn(r.r_offset, (uint64_t)r.r_addend, arg);
            count++;
        }
    }
    /* RELR: an even entry is an address to relocate; an odd one a bitmap of the 63 words after it */
    if (relr && ptmd_elf_vaddr_offset(f, relr, &off) == 0 && range_ok(f->size, off, relrsz)) {
        uint64_t where = 0;
        for (k = 0; k + 8 <= relrsz; k += 8) {
            uint64_t e, v;
            memcpy(&e, f->data + off + k, 8);
            if (!(e & 1)) {
                if (read_u64_at(f, e, &v) == 0) {
                    fn(e, v, arg);
                    count++;
                }
                where = e + 8;
            } else {
                int bit;
                for (bit = 1; bit < 64; bit++)
                    if ((e >> bit) & 1) {
                        uint64_t at = where + (uint64_t)(bit - 1) * 8;
                        if (read_u64_at(f, at, &v) == 0) {
                            fn(at, v, arg);
                            count++;
                        }
                    }
                where += 63 * 8;
            }
        }
    }
    return count;
}
