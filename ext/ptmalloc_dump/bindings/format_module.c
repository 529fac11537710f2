/* PtmallocDump::Format: the file's enumerations, from their one list each (format/format.h and the
 * analysis headers), so that Ruby never repeats a name or a bit. Names are Symbols: Arrays indexed by
 * value for values, Hashes of name => bit for flag words, and SECTIONS name => type in type order. */
#include "bindings/bindings.h"
#include "analysis/diff.h"
#include "analysis/render.h"

static VALUE names(const char *const *list, size_t n)
{
    VALUE ary = rb_ary_new_capa((long)n);
    size_t i;
    for (i = 0; i < n; i++) rb_ary_push(ary, list[i] ? PTMD_SYM(list[i]) : Qnil);
    return rb_ary_freeze(ary);
}

#define NAMES(list) names((list), sizeof(list) / sizeof((list)[0]))
#define PTMD_FLAG_PAIR(constant, value, name) rb_hash_aset(h, PTMD_SYM(name), UINT2NUM(value));
#define FLAGS(const_name, list)                                                                                        \
    do {                                                                                                               \
        VALUE h = rb_hash_new();                                                                                       \
        list(PTMD_FLAG_PAIR) rb_define_const(mFormat, const_name, rb_obj_freeze(h));                                   \
    } while (0)

void ptmd_format_module_init(void)
{
    VALUE mFormat = rb_define_module_under(ptmd_mPtmallocDump, "Format");
    rb_define_const(mFormat, "VERSION", INT2NUM(PTMD_FORMAT_VERSION));
    rb_define_const(mFormat, "STATES", NAMES(ptmd_state_names));
    {
        VALUE free_states = rb_ary_new();
        int st;
        for (st = 0; st < PTMD_ST_COUNT; st++)
            if (ptmd_state_is_free(st)) rb_ary_push(free_states, PTMD_SYM(ptmd_state_names[st]));
        rb_define_const(mFormat, "FREE_STATES", rb_ary_freeze(free_states));
    }
    rb_define_const(mFormat, "ANOMALY_KINDS", NAMES(ptmd_anomaly_names));
    rb_define_const(mFormat, "HEAP_KINDS", NAMES(ptmd_heap_kind_names));
    rb_define_const(mFormat, "SYMBOL_SOURCES", NAMES(ptmd_symbol_source_names));
    rb_define_const(mFormat, "RESIDENCY_SOURCES", NAMES(ptmd_residency_source_names));
    rb_define_const(mFormat, "ROOT_KINDS", NAMES(ptmd_root_kind_names));
    rb_define_const(mFormat, "OWNER_KINDS", NAMES(ptmd_owner_kind_names));
    rb_define_const(mFormat, "PAGE_CLASSES", NAMES(ptmd_page_class_names));
    rb_define_const(mFormat, "OWNER_CATEGORIES", NAMES(ptmd_owner_category_names));
    rb_define_const(mFormat, "PAGE_CHANGES", NAMES(ptmd_page_change_names));
    rb_define_const(mFormat, "CODE_KINDS", NAMES(ptmd_code_kind_names));
    rb_define_const(mFormat, "EDGE_KINDS", NAMES(ptmd_edge_kind_names));
    FLAGS("META_FLAGS", PTMD_META_FLAGS);
    FLAGS("ARENA_FLAGS", PTMD_ARENA_FLAGS);
    FLAGS("THREAD_FLAGS", PTMD_THREAD_FLAGS);
    FLAGS("CHUNK_FLAGS", PTMD_CHUNK_FLAGS);
    FLAGS("PAGE_FLAGS", PTMD_PAGE_FLAGS);
    rb_define_const(mFormat, "MAPPING_KINDS", NAMES(ptmd_mapping_kind_names));
    FLAGS("OBJECT_FLAGS", PTMD_OBJECT_FLAGS);
    FLAGS("GC_FLAGS", PTMD_GC_FLAGS);
    FLAGS("GRAPH_FLAGS", PTMD_GRAPH_FLAGS);
    FLAGS("NATIVE_TRACK_FLAGS", PTMD_NATIVE_TRACK_FLAGS);
    FLAGS("SOURCE_FLAGS", PTMD_SOURCE_FLAGS);
    rb_define_const(mFormat, "SOURCE_KINDS", NAMES(ptmd_source_kind_names));
    {
        VALUE h = rb_hash_new();
#define PTMD_SECTION_PAIR(constant, value, name, ...) rb_hash_aset(h, PTMD_SYM(name), UINT2NUM(value));
        PTMD_SECTIONS(PTMD_SECTION_PAIR)
        rb_define_const(mFormat, "SECTIONS", rb_obj_freeze(h));
    }
}
