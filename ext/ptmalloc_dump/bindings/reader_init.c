/* Init_ptmalloc_dump_reader: the classes that read dumps (Format, Dump and its parts, RubyHeap, Render,
 * Diff), a library of their own that lib/ptmalloc_dump/reader.rb loads on their first use, so that a
 * worker that only dumps never maps their code. */
#include "bindings/bindings.h"

VALUE ptmd_mPtmallocDump;

RUBY_FUNC_EXPORTED void Init_ptmalloc_dump_reader(void)
{
    ptmd_mPtmallocDump = rb_define_module("PtmallocDump");
    ptmd_errors_init();
    ptmd_format_module_init();
    ptmd_dump_class_init();
    ptmd_owners_class_init();
    ptmd_retention_class_init();
    ptmd_sites_class_init();
    ptmd_native_sites_class_init();
    ptmd_ruby_heap_class_init();
    ptmd_render_module_init();
    ptmd_diff_class_init();
}
