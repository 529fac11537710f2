/* Ruby's internal layouts that the code pass reads, one entry per Ruby version
 * (capture/ruby_code_layout.c). */
#ifndef PTMD_RUBY_CODE_LAYOUT_H
#define PTMD_RUBY_CODE_LAYOUT_H

#include <stddef.h>

/* A field of rb_vm_t that points at a VM-wide table in malloc memory, and the name it is shown by. */
typedef struct {
    const char *name;
    unsigned offset;
} ptmd_vm_field;

/* Offsets into Ruby's internal structures (bytes), measured by compiling offsetof against each
 * version's own headers:
 *   rb_method_entry_t {flags, defined_class, def, called_id, owner}           method.h
 *   rb_method_definition_t {type:4 bits ..., body.iseq.iseqptr, ...}          method.h
 *   rb_iseq_t {flags, wrapper, body, aux}                                     vm_core.h
 *   rb_iseq_constant_body {..., location.pathobj, location.first_lineno, ..., local_iseq}  vm_core.h
 *   enum imemo_type (imemo_ment, imemo_iseq)                                  internal/imemo.h (2.7: internal.h)
 *   struct RClass_and_rb_classext_t {rclass, classext.as.singleton_class.attached_object}  internal/class.h
 *   rb_vm_t {self, ...}                                                       vm_core.h
 * with each version's installed config.h (Debian's ruby*-dev) and the type's bits checked by setting
 * the bitfield and reading the first word. Ruby 3.1: 3.1.2's headers (USE_RVARGC 0, the default).
 * Ruby 2.7, 3.3, 3.4: the release headers of 2.7.0, 3.3.5 (3.3.0's give the same offsets) and 3.4.0
 * as the debase-ruby_core_source gem (4.0.1) carries them, with script/ruby_code_offsets.c;
 * code_owners_spec and ruby_heap_spec pass with them on Debian's 2.7.4, 3.3.8 and 3.4.11. What changed by 3.3
 * (3.2 not measured):
 *   location.first_lineno is an int (vm_core.h), no longer a Fixnum VALUE; local_iseq is at 168.
 *   A singleton class keeps its object in its classext (RCLASS_ATTACHED_OBJECT; class.c
 *   rb_class_attached_object), no longer in the ivar __attached__; the classext is embedded after
 *   struct RClass in the class's own slot (internal/class.h RCLASS_EXT).
 *   Debian's libruby exports no ruby_current_vm_ptr: the VM is found through the RubyVM object that
 *   wraps it (vm.c Init_VM), which is rb_vm_t's first field in every version.
 * 3.4: rb_vm_t keeps its object space in vm->gc.objspace (the modular GC); imemo_ment and imemo_iseq
 * are still 6 and 7. */
typedef struct {
    int major, minor;
    int imemo_ment, imemo_iseq;
    unsigned ment_def, ment_called_id, ment_owner;
    unsigned def_type_bits, def_iseq_type, def_iseqptr;
    unsigned iseq_body;
    unsigned body_pathobj, body_first_lineno, body_local_iseq;
    int first_lineno_fixnum;        /* location.first_lineno is a Fixnum VALUE, not an int */
    unsigned class_attached;        /* offset of a singleton class's object in its slot; 0: in the ivar
                                       __attached__ (class.c) */
    const ptmd_vm_field *vm_fields; /* read from the rb_vm_t the RubyVM object wraps */
    size_t n_vm_fields;
} ptmd_code_layout;

/* The layout of the running Ruby, NULL when it is not known (or PTMALLOC_DUMP_HIDE_RUBY_LAYOUTS is set,
 * so that a known Ruby can exercise the path an unknown one takes). */
const ptmd_code_layout *ptmd_code_layout_find(void);

#endif
