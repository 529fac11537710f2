/* Code owners: every allocated chunk whose owner object has a code record goes to that record's
 * module; each VM table, with what it alone reaches, to its name. */
#include "analysis/code_owners.h"
#include "format/glibc.h"
#include "format/reader.h"

#include <stdlib.h>
#include <string.h>

long ptmd_code_record(const ptmd_view *v, uint64_t address)
{
    size_t lo = 0, hi = v->n_ruby_code;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (v->ruby_code[mid].address < address) lo = mid + 1;
        else hi = mid;
    }
    return lo < v->n_ruby_code && v->ruby_code[lo].address == address ? (long)lo : -1;
}

static void charge(ptmd_code_totals *out, size_t chunk, size_t rec, uint32_t name, uint64_t size)
{
    if (out->chunk_record) out->chunk_record[chunk] = (uint32_t)rec;
    out->name_bytes[name] += size;
    out->name_chunks[name]++;
    out->record_bytes[rec] += size;
}

/* Breadth first from each VM table's chunk, through chunks of the same owner not yet charged. Every
 * table's own chunk is taken before any walk: a table can point at another (Ruby 3.4's postponed job
 * queue holds the GC's object space as a job's data, gc/default.c), which stays its own. */
/* The allocated chunk a VM table record names, -1 for another record or a table outside malloc. */
static long table_chunk(const ptmd_view *v, const ptmd_ruby_code *c)
{
    long k;
    if (c->kind != PTMD_CODE_VM_TABLE || c->module == PTMD_NO_NAME || c->address < PTMD_CHUNK_HDR_SZ) return -1;
    k = ptmd_view_find_chunk(v, ptmd_mem2chunk(c->address), 0);
    return k >= 0 && ptmd_rec_is_allocated(&v->chunks[k]) ? k : -1;
}

static int vm_tables(const ptmd_view *v, const ptmd_attribution *a, ptmd_code_totals *out)
{
    size_t i, n = v->n_chunks ? v->n_chunks : 1;
    uint32_t *offs = calloc(n + 1, sizeof(uint32_t)), *targets = malloc((v->n_refs ? v->n_refs : 1) * sizeof(uint32_t)),
             *fill = calloc(n, sizeof(uint32_t)), *queue = malloc(n * sizeof(uint32_t));
    uint8_t *seen = calloc(n, 1);
    int rc = -1;
    if (!offs || !targets || !fill || !queue || !seen) goto out;
    for (i = 0; i < v->n_refs; i++) offs[v->refs[i].from + 1]++;
    for (i = 0; i < v->n_chunks; i++) offs[i + 1] += offs[i];
    for (i = 0; i < v->n_refs; i++) targets[offs[v->refs[i].from] + fill[v->refs[i].from]++] = v->refs[i].to;
    for (i = 0; i < v->n_ruby_code; i++) {
        long root = table_chunk(v, &v->ruby_code[i]);
        if (root >= 0) seen[root] = 1;
    }
    for (i = 0; i < v->n_ruby_code; i++) {
        const ptmd_ruby_code *c = &v->ruby_code[i];
        long root = table_chunk(v, c);
        size_t qh = 0, qt = 0;
        uint32_t owner;
        if (root < 0 || seen[root] == 2) continue;
        owner = a->owner[root];
        seen[root] = 2;
        queue[qt++] = (uint32_t)root;
        while (qh < qt) {
            uint32_t from = queue[qh++], e;
            uint64_t size = ptmd_rec_size(&v->chunks[from]);
            charge(out, from, i, c->module, size);
            out->vm_bytes += size;
            out->vm_chunks++;
            for (e = offs[from]; e < offs[from + 1]; e++) {
                uint32_t to = targets[e];
                if (seen[to] || a->owner[to] != owner || !ptmd_rec_is_allocated(&v->chunks[to])) continue;
                seen[to] = 1;
                queue[qt++] = to;
            }
        }
    }
    rc = 0;
out:
    free(offs);
    free(targets);
    free(fill);
    free(queue);
    free(seen);
    return rc;
}

int ptmd_code_owners(const ptmd_view *v, const ptmd_attribution *a, ptmd_code_totals *out)
{
    size_t i;
    uint32_t last_owner = 0;
    long rec = -1;
    memset(out->name_bytes, 0, v->n_ruby_code_names * sizeof(uint64_t));
    memset(out->name_chunks, 0, v->n_ruby_code_names * sizeof(uint64_t));
    memset(out->record_bytes, 0, v->n_ruby_code * sizeof(uint64_t));
    out->bytes = out->chunks = out->vm_bytes = out->vm_chunks = 0;
    if (out->chunk_record)
        for (i = 0; i < v->n_chunks; i++) out->chunk_record[i] = PTMD_NO_NAME;
    if (!v->ruby_code) return 0;
    for (i = 0; i < v->n_chunks; i++) {
        uint32_t o = a->owner[i];
        uint64_t size = ptmd_rec_size(&v->chunks[i]);
        uint32_t module;
        if (!o || o == UINT32_MAX || o > v->n_ruby_objects || !ptmd_rec_is_allocated(&v->chunks[i])) continue;
        if (o != last_owner) {
            last_owner = o;
            rec = ptmd_code_record(v, v->ruby_objects[o - 1].address);
        }
        if (rec < 0 || v->ruby_code[rec].kind == PTMD_CODE_VM_TABLE ||
            (module = v->ruby_code[rec].module) == PTMD_NO_NAME)
            continue;
        charge(out, i, (size_t)rec, module, size);
        out->bytes += size;
        out->chunks++;
    }
    return vm_tables(v, a, out);
}
