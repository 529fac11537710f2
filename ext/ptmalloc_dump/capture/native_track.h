/* The allocation tracker's tables (ext/ptmalloc_dump_track, preloaded by ptmalloc-dump --track) copied
 * into a dump: the sampled blocks, their stacks and the Ruby frames' names, and the tracker's own
 * mappings with their residency. */
#ifndef PTMD_NATIVE_TRACK_H
#define PTMD_NATIVE_TRACK_H

#include "format/format.h"
#include "capture/scratch.h"
#include "capture/procfs.h"
#include "capture/ruby_data.h"
#include "capture/source.h"
#include "track_abi.h"

typedef struct {
    int present;
    ptmd_native_track_rec rec;
    ptmd_buf samples; /* ptmd_native_sample, by address */
    ptmd_buf stacks;  /* ptmd_native_stack */
    ptmd_buf pcs;     /* uint64_t */
    ptmd_buf frames;  /* ptmd_ruby_frame, names into names */
    ptmd_buf names;   /* NATIVE_NAMES entries */
    uint64_t n_names;
} ptmd_native_data;

/* At load: where this process's tracker keeps its state (dlsym), 0 when it is not preloaded. */
void ptmd_native_track_set_self(uint64_t state_address);
uint64_t ptmd_native_track_self(void);
/* Where another process's tracker keeps its state: the tracker library in its /proc/PID/maps text
 * (maps->text), and the symbol in that file's symbol table; 0 when it is not loaded there. */
uint64_t ptmd_native_track_find(const ptmd_maps *maps);
/* The tracker at state_address in the source's memory into nd (nd->present), nothing allocated:
 * 0, also when there is no tracker there; -1 when mmap fails. With rd (this process's Ruby pass), each
 * Ruby frame that is a method entry still on Ruby's pages is given its owner's name. */
int ptmd_native_track_capture(ptmd_source *src, uint64_t state_address, const ptmd_ruby_data *rd, ptmd_native_data *nd);
void ptmd_native_track_release(ptmd_native_data *nd);

#endif
