/* The offsets of Ruby's method entries, iseqs, classes and VM per Ruby version, as the code pass
 * (capture/ruby_code.c) reads them. */
#include "capture/ruby_code_layout.h"

#include <ruby/version.h>
#include <stdlib.h>

/* Ruby 2.7's vm_core.h: no ractors yet, the VM holds its main thread itself (vm.c Init_BareVM
 * allocates it); no method entry caches in the VM. */
static const ptmd_vm_field vm_fields_2_7[] = {
    { "GC object space (page headers, mark bitmaps, finalizer and id tables)", 1152 },
    { "frozen string table", 1176 },
    { "loaded features index", 456 },
    { "loading table", 464 },
    { "defined module hash", 1144 },
    { "ensure rollback table", 1016 },
    { "postponed job buffer", 1024 },
    { "at_exit list", 1160 },
    { "main thread", 192 },
};

/* Ruby 3.1.2's vm_core.h (rb_vm_t; vm.c Init_BareVM allocates the main thread and ractor, gc.c
 * rb_objspace_alloc the object space) */
static const ptmd_vm_field vm_fields_3_1[] = {
    { "GC object space (page headers, mark bitmaps, finalizer and id tables)", 1104 },
    { "frozen string table", 1120 },
    { "loaded features index", 440 },
    { "loading table", 448 },
    { "defined module hash", 1096 },
    { "negative method cache", 1144 },
    { "overloaded method entries", 1152 },
    { "ensure rollback table", 976 },
    { "postponed job buffer", 984 },
    { "at_exit list", 1112 },
    { "main ractor (GVL, thread list)", 32 },
    { "main thread", 40 },
};

/* Ruby 3.3's vm_core.h: the postponed jobs became a queue (vm_trace.c); the VM also holds the call
 * info table and the constant cache (ID to inline caches). */
static const ptmd_vm_field vm_fields_3_3[] = {
    { "GC object space (page headers, mark bitmaps, finalizer and id tables)", 1304 },
    { "frozen string table", 1320 },
    { "loaded features index", 632 },
    { "loading table", 640 },
    { "defined module hash", 1296 },
    { "call info table", 1344 },
    { "constant cache table", 1368 },
    { "negative method cache", 1352 },
    { "overloaded method entries", 1360 },
    { "ensure rollback table", 1176 },
    { "postponed job queue", 1184 },
    { "at_exit list", 1312 },
    { "main ractor (GVL, thread list)", 32 },
    { "main thread", 40 },
};

/* Ruby 3.4's vm_core.h: with the modular GC (gc.c over gc/default.c) the VM keeps its object space
 * in vm->gc.objspace, a chunk of its own (rb_gc_impl_objspace_alloc). There is no defined module
 * hash nor ensure rollback table; the new global_object_list (rb_gc_register_address) is a linked
 * list, one chunk a node, not a table, and is left unnamed. */
static const ptmd_vm_field vm_fields_3_4[] = {
    { "GC object space (page headers, mark bitmaps, finalizer and id tables)", 1296 },
    { "frozen string table", 1320 },
    { "loaded features index", 640 },
    { "loading table", 648 },
    { "call info table", 1336 },
    { "constant cache table", 1368 },
    { "negative method cache", 1344 },
    { "overloaded method entries", 1352 },
    { "unused block warning table", 1360 },
    { "postponed job queue", 1184 },
    { "at_exit list", 1312 },
    { "main ractor (GVL, thread list)", 32 },
    { "main thread", 40 },
};

static const ptmd_code_layout layouts[] = {
    { .major = 2,
      .minor = 7,
      .imemo_ment = 6,
      .imemo_iseq = 7,
      .ment_def = 16,
      .ment_called_id = 24,
      .ment_owner = 32,
      .def_type_bits = 4,
      .def_iseq_type = 0,
      .def_iseqptr = 8,
      .iseq_body = 16,
      .body_pathobj = 64,
      .body_first_lineno = 88,
      .body_local_iseq = 176,
      .first_lineno_fixnum = 1,
      .class_attached = 0,
      .vm_fields = vm_fields_2_7,
      .n_vm_fields = sizeof(vm_fields_2_7) / sizeof(vm_fields_2_7[0]) },
    { .major = 3,
      .minor = 1,
      .imemo_ment = 6,
      .imemo_iseq = 7,
      .ment_def = 16,
      .ment_called_id = 24,
      .ment_owner = 32,
      .def_type_bits = 4,
      .def_iseq_type = 0,
      .def_iseqptr = 8, /* VM_METHOD_TYPE_MINIMUM_BITS, VM_METHOD_TYPE_ISEQ */
      .iseq_body = 16,
      .body_pathobj = 64,
      .body_first_lineno = 88,
      .body_local_iseq = 176,
      .first_lineno_fixnum = 1,
      .class_attached = 0,
      .vm_fields = vm_fields_3_1,
      .n_vm_fields = sizeof(vm_fields_3_1) / sizeof(vm_fields_3_1[0]) },
    { .major = 3,
      .minor = 3,
      .imemo_ment = 6,
      .imemo_iseq = 7,
      .ment_def = 16,
      .ment_called_id = 24,
      .ment_owner = 32,
      .def_type_bits = 4,
      .def_iseq_type = 0,
      .def_iseqptr = 8,
      .iseq_body = 16,
      .body_pathobj = 64,
      .body_first_lineno = 88,
      .body_local_iseq = 168,
      .first_lineno_fixnum = 0,
      .class_attached = 128,
      .vm_fields = vm_fields_3_3,
      .n_vm_fields = sizeof(vm_fields_3_3) / sizeof(vm_fields_3_3[0]) },
    { .major = 3,
      .minor = 4,
      .imemo_ment = 6,
      .imemo_iseq = 7,
      .ment_def = 16,
      .ment_called_id = 24,
      .ment_owner = 32,
      .def_type_bits = 4,
      .def_iseq_type = 0,
      .def_iseqptr = 8,
      .iseq_body = 16,
      .body_pathobj = 64,
      .body_first_lineno = 88,
      .body_local_iseq = 168,
      .first_lineno_fixnum = 0,
      .class_attached = 128,
      .vm_fields = vm_fields_3_4,
      .n_vm_fields = sizeof(vm_fields_3_4) / sizeof(vm_fields_3_4[0]) },
};

const ptmd_code_layout *ptmd_code_layout_find(void)
{
    const ptmd_code_layout *found = NULL;
    size_t i;
    for (i = 0; i < sizeof(layouts) / sizeof(layouts[0]) && !getenv("PTMALLOC_DUMP_HIDE_RUBY_LAYOUTS"); i++)
        if (layouts[i].major == RUBY_API_VERSION_MAJOR && layouts[i].minor == RUBY_API_VERSION_MINOR)
            found = &layouts[i];
    return found;
}
