/* Code memory by owner: the chunks that method entries, iseqs and classes own (by attribution) are
 * charged to the module that defines them, and the VM's own tables are named (the RUBY_CODE section).
 * Plain C; runs offline. */
#ifndef PTMD_CODE_OWNERS_H
#define PTMD_CODE_OWNERS_H

#include "analysis/attribution.h"

typedef struct {
    uint64_t *name_bytes, *name_chunks; /* v->n_ruby_code_names entries each: per module or VM table name */
    uint64_t *record_bytes;             /* v->n_ruby_code entries: per code record */
    uint64_t bytes, chunks;             /* all the chunks charged to a module */
    uint64_t vm_bytes, vm_chunks;       /* all the chunks charged to a VM table */
    uint32_t *chunk_record;             /* NULL, or v->n_chunks entries: the code record each chunk is
                                         * charged to, PTMD_NO_NAME for none */
} ptmd_code_totals;

/* The code record of the object at `address`, or -1 (the records are in address order). */
long ptmd_code_record(const ptmd_view *v, uint64_t address);

/* The arrays must hold the counts above (zeroed here). A chunk owned by a code record's object goes
 * to its module; a VM table's chunk, and what it reaches through REFS that has the same owner (the
 * VM's object), to the table's name. Returns 0, or -1 when out of memory. */
int ptmd_code_owners(const ptmd_view *v, const ptmd_attribution *a, ptmd_code_totals *out);

#endif
