/* What the binding files share. They convert between Ruby and the plain C of format/ and analysis/;
 * one file per Ruby class or module, each with its init, called by Init_ptmalloc_dump. Besides them
 * only capture/ruby_heap.c touches the Ruby API. */
#ifndef PTMD_BINDINGS_H
#define PTMD_BINDINGS_H

#include <ruby.h>
#include "format/ptmd.h"
#include "analysis/analysis.h"
#include "analysis/attribution.h"
#include "analysis/owners.h"
#include "analysis/summary.h"
#include "analysis/rss.h"
#include "analysis/age.h"
#include "analysis/retention.h"

#define PTMD_U64(x) ULL2NUM((unsigned long long)(x))
#define PTMD_SYM(name) ID2SYM(rb_intern(name))
#define PTMD_SET(h, key, val) rb_hash_aset((h), PTMD_SYM(key), (val))
#define PTMD_BOOL(x) ((x) ? Qtrue : Qfalse)

extern VALUE ptmd_mPtmallocDump;

/* errors.c: raises the Ruby exception for a core error: Errno::* for system calls, PtmallocDump::*Error
 * else. */
NORETURN(void ptmd_rb_raise(const ptmd_err *err));

/* figures.c: a view's header and records as Hashes and Arrays of Hashes; its summary (mallinfo2
 * fields, residency, per-state and per-arena figures), and the page-level analysis. */
VALUE ptmd_rb_meta(const ptmd_view *v);
VALUE ptmd_rb_mallinfo2(const ptmd_view *v);
VALUE ptmd_rb_arena_records(const ptmd_view *v);
VALUE ptmd_rb_heap_records(const ptmd_view *v);
VALUE ptmd_rb_thread_records(const ptmd_view *v);
VALUE ptmd_rb_anomaly_records(const ptmd_view *v);
VALUE ptmd_rb_summary(const ptmd_view *v);
VALUE ptmd_rb_analysis(const ptmd_view *v, const ptmd_page_usage *usage);
/* figures.c: the whole RSS by part (nil without mappings), the mappings and their head, the GC's counts */
VALUE ptmd_rb_rss(const ptmd_view *v);
VALUE ptmd_rb_mappings(const ptmd_view *v);
VALUE ptmd_rb_mappings_head(const ptmd_view *v);
VALUE ptmd_rb_gc(const ptmd_view *v);
VALUE ptmd_rb_source(const ptmd_view *v);
VALUE ptmd_rb_snapshot(const ptmd_view *v);
/* figures.c: a names section's entries (a count of n, `len` bytes) as an Array of Strings by index */
VALUE ptmd_rb_names(const unsigned char *names, size_t len, size_t n);

/* dump_class.c: a loaded PtmallocDump::Dump's view, and what is computed from it once. */
const ptmd_view *ptmd_rb_dump_view(VALUE dump);
const ptmd_page_usage *ptmd_rb_dump_usage(VALUE dump);
const ptmd_attribution *ptmd_rb_dump_attribution(VALUE dump);
const uint32_t *ptmd_rb_dump_object_order(VALUE dump);    /* Ruby object indices by address */
const ptmd_owners *ptmd_rb_dump_owners(VALUE dump);       /* NULL when the dump has no roots */
const ptmd_retention *ptmd_rb_dump_retention(VALUE dump); /* NULL when the dump has no object graph */
/* A binary String of one u32 per chunk: the RUBY_CODE record the chunk is charged to
 * (analysis/code_owners.c), PTMD_NO_NAME for none; nil when the dump has no code records. */
VALUE ptmd_rb_code_charges(VALUE dump);

void ptmd_errors_init(void);
void ptmd_format_module_init(void);
void ptmd_dump_class_init(void);
void ptmd_owners_class_init(void);    /* Dump's owner methods: after ptmd_dump_class_init */
void ptmd_retention_class_init(void); /* Dump's retainer methods: after ptmd_dump_class_init */
void ptmd_sites_class_init(void);     /* Dump's allocation sites: after ptmd_dump_class_init */
void ptmd_tracing_module_init(void);  /* PtmallocDump.trace_allocations and its like, when the gem loads */
/* The RUBY_NAMES entries naming class `name`: a flag per entry (xmalloc'd), NULL for nil. */
uint8_t *ptmd_rb_class_flags(const ptmd_view *v, VALUE name);
void ptmd_native_sites_class_init(void); /* the allocation tracker's samples: after ptmd_dump_class_init */
void ptmd_ruby_heap_class_init(void);
void ptmd_render_module_init(void);
void ptmd_diff_class_init(void);
void ptmd_stats_module_init(void);
void ptmd_signal_arrival_init(void);

#endif
