/* This process as a source: read in place where memory is known to be mapped, through the fault-free
 * reader (process_vm_readv, /proc/self/mem) where it may vanish; its residency from its pagemap. */
#define _GNU_SOURCE
#include "capture/source_self.h"

#include <unistd.h>

static int self_read(ptmd_source *s, uint64_t addr, void *dst, size_t len)
{
    return ptmd_safe_read(&s->mem, (uintptr_t)addr, dst, len);
}

static void self_read_many(ptmd_source *s, const uintptr_t *addrs, size_t n, size_t each, void *dst, unsigned char *ok)
{
    ptmd_safe_read_many(&s->mem, addrs, n, each, dst, ok);
}

static int self_pages(ptmd_source *s, uint64_t start, size_t npages, uint8_t *out)
{
    return ptmd_pagemap_read(&s->pagemap, (uintptr_t)start, npages, out);
}

static int self_maps_again(ptmd_source *s, ptmd_maps *maps, ptmd_err *err)
{
    PTMD_UNUSED(s);
    return ptmd_maps_load(maps, err);
}

static const ptmd_source_ops self_ops = {
    .kind = PTMD_SOURCE_KIND_SELF,
    .in_place = 1,
    .read = self_read,
    .read_many = self_read_many,
    .pages = self_pages,
    .maps_again = self_maps_again,
};

int ptmd_source_self(ptmd_source *s, ptmd_err *err)
{
    ptmd_source_init(s, &self_ops, (int)getpid());
    return ptmd_memreader_open(&s->mem, err);
}
