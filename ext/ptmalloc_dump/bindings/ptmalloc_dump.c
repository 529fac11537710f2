/* Entry point: defines PtmallocDump's native parts, one init per binding file. */
#include "bindings/bindings.h"

VALUE ptmd_mPtmallocDump;

RUBY_FUNC_EXPORTED void Init_ptmalloc_dump(void)
{
    ptmd_mPtmallocDump = rb_define_module("PtmallocDump");
    ptmd_rb_errors_init();
    ptmd_rb_dump_init();
    ptmd_rb_reader_init();
    ptmd_rb_render_init();
    ptmd_rb_ruby_init();
    ptmd_rb_ruby_heap_init();
}
