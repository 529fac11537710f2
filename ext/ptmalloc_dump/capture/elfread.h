/* Minimal ELF64 reading: build-id notes in memory, and .symtab / .gnu_debuglink in a mapped file. */
#ifndef PTMD_ELF_H
#define PTMD_ELF_H

#include "format/ptmd.h"
#include <elf.h>

#define PTMD_BUILD_ID_MAX 64

/* A whole ELF file mapped read-only and checked to be a sane ELF64 image of this machine. */
typedef struct {
    const unsigned char *data;
    size_t size;
    const Elf64_Shdr *shdrs;
    size_t shnum;
    const char *shstrtab;
    size_t shstrtab_size;
} ptmd_elf_file;

/* 0 on success; -1 with err set (system error, or PTMD_E_FORMAT when not a usable ELF64 file). */
int ptmd_elf_open(ptmd_elf_file *f, const char *path, ptmd_err *err);
void ptmd_elf_close(ptmd_elf_file *f);

const Elf64_Shdr *ptmd_elf_section(const ptmd_elf_file *f, const char *name);
/* Bytes of a section if it lies inside the file and is not compressed, else NULL. */
const unsigned char *ptmd_elf_section_data(const ptmd_elf_file *f, const Elf64_Shdr *sh);

/* The NT_GNU_BUILD_ID among a note area's notes (a PT_NOTE segment read from memory), length or 0. */
size_t ptmd_elf_notes_build_id(const unsigned char *notes, size_t len, unsigned char *out, size_t max);
/* The NT_GNU_BUILD_ID of the file (from its notes), length or 0. */
size_t ptmd_elf_file_build_id(const ptmd_elf_file *f, unsigned char *out, size_t max);
/* The .gnu_debuglink name and CRC; 0 when present. */
int ptmd_elf_debuglink(const ptmd_elf_file *f, char *name, size_t name_size, uint32_t *crc);

typedef struct {
    const char *name; /* in: symbol name */
    uint64_t value;   /* out: st_value (link-time address, or TLS offset for STT_TLS) */
    uint64_t size;    /* out: st_size */
    int type;         /* out: ELF64_ST_TYPE */
    int found;
} ptmd_elf_sym;

/* Looks up every name of syms[] in .symtab; returns how many were found, -1 when there is no .symtab. */
int ptmd_elf_lookup(const ptmd_elf_file *f, ptmd_elf_sym *syms, size_t nsyms);
/* The same in .dynsym, the exported symbols. */
int ptmd_elf_lookup_dynamic(const ptmd_elf_file *f, ptmd_elf_sym *syms, size_t nsyms);

/* File offset of a link-time virtual address (through the file's PT_LOAD headers); 0 on success. */
int ptmd_elf_vaddr_offset(const ptmd_elf_file *f, uint64_t vaddr, uint64_t *off);

/* Calls fn(vaddr, addend, arg) for every relative relocation (R_X86_64_RELATIVE, R_AARCH64_RELATIVE) of the file, from DT_RELA and
 * DT_RELR (whose addend is the initial value stored at the location). Returns the count, -1 if the
 * file has no dynamic section. */
long ptmd_elf_relative_relocs(const ptmd_elf_file *f, void (*fn)(uint64_t vaddr, uint64_t addend, void *arg),
                              void *arg);

/* Scans PT_NOTE segments of a loaded object for NT_GNU_BUILD_ID; returns its length or 0. */
size_t ptmd_elf_loaded_build_id(uintptr_t load_bias, const Elf64_Phdr *phdrs, size_t phnum, unsigned char *out,
                                size_t max);

#endif
