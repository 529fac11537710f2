/* Prints the offsets capture/ruby_code_layout.c's layouts[] needs for one Ruby version, from that
 * version's own internal headers. Not part of the gem. Build it against the version's source tree (its
 * method.h, vm_core.h, internal/imemo.h or, for 2.7, internal.h, and the generated id.h) and the
 * installed public headers of the same Ruby, whose config.h is the build's own:
 *
 *   gcc -w -I$SRC -I/usr/include/ruby-X.Y.0 -I/usr/include/x86_64-linux-gnu/ruby-X.Y.0 \
 *       script/ruby_code_offsets.c -o offsets && ./offsets
 *
 * rb_vm_t holds native locks, which are larger on aarch64: build it once more with the cross compiler
 * (Debian's gcc-aarch64-linux-gnu) and run it through qemu-user for the aarch64 column of the VM's
 * fields. The same x86-64 config.h serves; for Ruby 3.1 the output is the same with arm64's own.
 *
 *   aarch64-linux-gnu-gcc -static -w -I$SRC -I/usr/include/ruby-X.Y.0 \
 *       -I/usr/include/x86_64-linux-gnu/ruby-X.Y.0 script/ruby_code_offsets.c -o offsets-arm64 && ./offsets-arm64
 *
 * The bits of rb_method_definition_t's type are checked by setting the bitfield and reading the
 * first word, which is how ruby_code.c reads it. */
#include "ruby/version.h"
#include "ruby/ruby.h"
#include "vm_core.h"
#include "method.h"
#include "iseq.h"
#if RUBY_API_VERSION_MAJOR > 2
#include "internal/imemo.h"
#include "internal/class.h"
#else
#include "internal.h"
#endif
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#define VERSION_CODE (RUBY_API_VERSION_MAJOR * 100 + RUBY_API_VERSION_MINOR)
#define SHOW(type, field) printf("%-44s %-40s %zu\n", #type, #field, offsetof(type, field))

static int type_in_low_bits(rb_method_type_t type, int fill)
{
    rb_method_definition_t d;
    uint32_t first;
    memset(&d, fill, sizeof(d));
    d.type = type;
    memcpy(&first, &d, sizeof(first));
    return (first & ((1u << VM_METHOD_TYPE_MINIMUM_BITS) - 1)) == (uint32_t)type;
}

int main(void)
{
    printf("Ruby %d.%d: imemo_ment %d, imemo_iseq %d, IMEMO_MASK %d, FL_USHIFT %d\n", RUBY_API_VERSION_MAJOR,
           RUBY_API_VERSION_MINOR, imemo_ment, imemo_iseq, IMEMO_MASK, (int)RUBY_FL_USHIFT);
    printf("VM_METHOD_TYPE_MINIMUM_BITS %d, VM_METHOD_TYPE_ISEQ %d, type in the low bits of the first word: %s\n",
           VM_METHOD_TYPE_MINIMUM_BITS, VM_METHOD_TYPE_ISEQ,
           type_in_low_bits(VM_METHOD_TYPE_ISEQ, 0xff) && type_in_low_bits(VM_METHOD_TYPE_CFUNC, 0) ? "yes" : "NO");
    SHOW(rb_method_entry_t, def);
    SHOW(rb_method_entry_t, called_id);
    SHOW(rb_method_entry_t, owner);
    SHOW(rb_method_definition_t, body.iseq.iseqptr);
    SHOW(rb_iseq_t, body);
    SHOW(struct rb_iseq_constant_body, location.pathobj);
    SHOW(struct rb_iseq_constant_body, location.first_lineno);
    printf("location.first_lineno is %zu bytes (8: a Fixnum VALUE)\n",
           sizeof(((struct rb_iseq_constant_body *)0)->location.first_lineno));
    SHOW(struct rb_iseq_constant_body, local_iseq);
#ifdef RCLASS_ATTACHED_OBJECT
    SHOW(struct RClass_and_rb_classext_t, classext.as.singleton_class.attached_object);
#else
    printf("no RCLASS_ATTACHED_OBJECT: a singleton class keeps its object in the ivar __attached__\n");
#endif
    SHOW(rb_vm_t, self);
#if VERSION_CODE >= 300
    SHOW(rb_vm_t, ractor.main_ractor);
    SHOW(rb_vm_t, ractor.main_thread);
#else
    SHOW(rb_vm_t, main_thread);
#endif
    SHOW(rb_vm_t, loaded_features_index);
    SHOW(rb_vm_t, loading_table);
#if VERSION_CODE >= 304
    SHOW(rb_vm_t, gc.objspace);
    SHOW(rb_vm_t, unused_block_warning_table);
#else
    SHOW(rb_vm_t, objspace);
    SHOW(rb_vm_t, defined_module_hash);
    SHOW(rb_vm_t, ensure_rollback_table);
#endif
#if VERSION_CODE >= 303
    SHOW(rb_vm_t, postponed_job_queue);
    SHOW(rb_vm_t, ci_table);
    SHOW(rb_vm_t, constant_cache);
#else
    SHOW(rb_vm_t, postponed_job_buffer);
#endif
#if VERSION_CODE >= 301
    SHOW(rb_vm_t, negative_cme_table);
    SHOW(rb_vm_t, overloaded_cme_table);
#endif
    SHOW(rb_vm_t, frozen_strings);
    SHOW(rb_vm_t, at_exit);
    return 0;
}
