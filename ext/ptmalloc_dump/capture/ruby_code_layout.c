/* The offsets of Ruby's method entries, iseqs, classes and VM per Ruby version, as the code pass
 * (capture/ruby_code.c) reads them. */
#include "capture/ruby_code_layout.h"

#include <ruby/version.h>
#include <stdlib.h>

/* rb_vm_t's offsets differ by platform past its first native lock: pthread_mutex_t is 40 bytes on
 * x86-64 and 48 on aarch64 (pthread_cond_t is 48 on both). Each field gives both, measured with
 * script/ruby_code_offsets.c built by gcc and by aarch64-linux-gnu-gcc; the build accepts no other
 * CPU (build.rb). */
#if defined(__aarch64__)
#define PTMD_VM_AT(x86_64, aarch64) (aarch64)
#else
#define PTMD_VM_AT(x86_64, aarch64) (x86_64)
#endif

/* Ruby 2.7's vm_core.h: no ractors yet, the VM holds its main thread itself (vm.c Init_BareVM
 * allocates it); no method entry caches in the VM. */
static const ptmd_vm_field vm_fields_2_7[] = {
    { "GC object space (page headers, mark bitmaps, finalizer and id tables)", PTMD_VM_AT(1152, 1176) },
    { "frozen string table", PTMD_VM_AT(1176, 1200) },
    { "loaded features index", PTMD_VM_AT(456, 472) },
    { "loading table", PTMD_VM_AT(464, 480) },
    { "defined module hash", PTMD_VM_AT(1144, 1168) },
    { "ensure rollback table", PTMD_VM_AT(1016, 1032) },
    { "postponed job buffer", PTMD_VM_AT(1024, 1040) },
    { "at_exit list", PTMD_VM_AT(1160, 1184) },
    { "main thread", PTMD_VM_AT(192, 200) },
};

/* Ruby 3.1.2's vm_core.h (rb_vm_t; vm.c Init_BareVM allocates the main thread and ractor, gc.c
 * rb_objspace_alloc the object space) */
static const ptmd_vm_field vm_fields_3_1[] = {
    { "GC object space (page headers, mark bitmaps, finalizer and id tables)", PTMD_VM_AT(1104, 1128) },
    { "frozen string table", PTMD_VM_AT(1120, 1144) },
    { "loaded features index", PTMD_VM_AT(440, 456) },
    { "loading table", PTMD_VM_AT(448, 464) },
    { "defined module hash", PTMD_VM_AT(1096, 1120) },
    { "negative method cache", PTMD_VM_AT(1144, 1168) },
    { "overloaded method entries", PTMD_VM_AT(1152, 1176) },
    { "ensure rollback table", PTMD_VM_AT(976, 992) },
    { "postponed job buffer", PTMD_VM_AT(984, 1000) },
    { "at_exit list", PTMD_VM_AT(1112, 1136) },
    { "main ractor (GVL, thread list)", PTMD_VM_AT(32, 32) },
    { "main thread", PTMD_VM_AT(40, 40) },
};

/* Ruby 3.3's vm_core.h: the postponed jobs became a queue (vm_trace.c); the VM also holds the call
 * info table and the constant cache (ID to inline caches). */
static const ptmd_vm_field vm_fields_3_3[] = {
    { "GC object space (page headers, mark bitmaps, finalizer and id tables)", PTMD_VM_AT(1304, 1328) },
    { "frozen string table", PTMD_VM_AT(1320, 1344) },
    { "loaded features index", PTMD_VM_AT(632, 648) },
    { "loading table", PTMD_VM_AT(640, 656) },
    { "defined module hash", PTMD_VM_AT(1296, 1320) },
    { "call info table", PTMD_VM_AT(1344, 1368) },
    { "constant cache table", PTMD_VM_AT(1368, 1392) },
    { "negative method cache", PTMD_VM_AT(1352, 1376) },
    { "overloaded method entries", PTMD_VM_AT(1360, 1384) },
    { "ensure rollback table", PTMD_VM_AT(1176, 1192) },
    { "postponed job queue", PTMD_VM_AT(1184, 1200) },
    { "at_exit list", PTMD_VM_AT(1312, 1336) },
    { "main ractor (GVL, thread list)", PTMD_VM_AT(32, 32) },
    { "main thread", PTMD_VM_AT(40, 40) },
};

/* Ruby 3.4's vm_core.h: with the modular GC (gc.c over gc/default.c) the VM keeps its object space
 * in vm->gc.objspace, a chunk of its own (rb_gc_impl_objspace_alloc). There is no defined module
 * hash nor ensure rollback table; the new global_object_list (rb_gc_register_address) is a linked
 * list, one chunk a node, not a table, and is left unnamed. */
static const ptmd_vm_field vm_fields_3_4[] = {
    { "GC object space (page headers, mark bitmaps, finalizer and id tables)", PTMD_VM_AT(1296, 1320) },
    { "frozen string table", PTMD_VM_AT(1320, 1344) },
    { "loaded features index", PTMD_VM_AT(640, 656) },
    { "loading table", PTMD_VM_AT(648, 664) },
    { "call info table", PTMD_VM_AT(1336, 1360) },
    { "constant cache table", PTMD_VM_AT(1368, 1392) },
    { "negative method cache", PTMD_VM_AT(1344, 1368) },
    { "overloaded method entries", PTMD_VM_AT(1352, 1376) },
    { "unused block warning table", PTMD_VM_AT(1360, 1384) },
    { "postponed job queue", PTMD_VM_AT(1184, 1200) },
    { "at_exit list", PTMD_VM_AT(1312, 1336) },
    { "main ractor (GVL, thread list)", PTMD_VM_AT(32, 32) },
    { "main thread", PTMD_VM_AT(40, 40) },
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
