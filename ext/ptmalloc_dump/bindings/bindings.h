/* Declarations shared by the Ruby binding files (the only files that touch the Ruby API). */
#ifndef PTMD_RB_COMMON_H
#define PTMD_RB_COMMON_H

#include <ruby.h>
#include "format/ptmd.h"
#include "analysis/analysis.h"
#include "analysis/attribution.h"
#include "analysis/summary.h"

extern VALUE ptmd_mPtmallocDump;

/* Raises the Ruby exception for a core error: Errno::* for system calls, PtmallocDump::*Error else. */
NORETURN(void ptmd_rb_raise(const ptmd_err *err));

/* The summary Hash of a view (mallinfo2 fields, residency, per-state and per-arena figures). */
VALUE ptmd_rb_summary(const ptmd_view *v);

/* The loaded view of a PtmallocDump::Dump, and its per-page usage (computed once). */
const ptmd_view *ptmd_rb_dump_view(VALUE dump);
const ptmd_page_usage *ptmd_rb_dump_usage(VALUE dump);
const ptmd_attribution *ptmd_rb_dump_attribution(VALUE dump);
/* Ruby object indices sorted by address (computed once). */
const uint32_t *ptmd_rb_dump_object_order(VALUE dump);

void ptmd_rb_errors_init(void);
void ptmd_rb_render_init(void);
void ptmd_rb_ruby_init(void);
void ptmd_rb_ruby_heap_init(void);
void ptmd_rb_dump_init(void);
void ptmd_rb_reader_init(void);

#endif
