/* The code pass (capture/ruby_code.c): which class or module defines each method entry and iseq,
 * noted during the Ruby pass's object walk and resolved after it, through Ruby's own structures. */
#ifndef PTMD_RUBY_CODE_H
#define PTMD_RUBY_CODE_H

#include <ruby.h>
#include "capture/ruby_data.h"

typedef struct {
    ptmd_buf modules; /* uint64 VALUE: T_CLASS, T_MODULE, T_ICLASS */
    ptmd_buf ments;   /* uint64 VALUE: T_IMEMO ment */
    ptmd_buf iseqs;   /* uint64 VALUE: T_IMEMO iseq */
    uint64_t vm;      /* the rb_vm_t the RubyVM object wraps, 0 until the walk meets it */
    int oom;
} ptmd_code_pass;

/* At load: the iseq and method entry layouts of this Ruby, and the ids the pass needs. */
void ptmd_ruby_code_init(void);
/* Why this Ruby's code cannot be attributed (an unknown version), NULL when it can. */
const char *ptmd_ruby_code_problem(void);
/* During the object walk: v (of builtin type `type`, imemo type `imemo`) may be code or a module. */
void ptmd_ruby_code_note(ptmd_code_pass *cp, VALUE v, int type, int imemo);
/* After the walk: reads the noted objects, fills rd->code and rd->code_names and releases cp.
 * Allocates nothing; returns -1 when mmap fails. */
int ptmd_ruby_code_finish(ptmd_code_pass *cp, ptmd_ruby_data *rd);

/* A module's name as the code records give it, without allocating: Module#name, "#<Class:Name>" for a
 * singleton class, "#<Class:0x...>" written into buf for an anonymous one. Its length, 0 when mod is no
 * module on the recorded pages or this Ruby's layout is unknown. */
size_t ptmd_ruby_code_module_name(const ptmd_ruby_data *rd, VALUE mod, const char **out, char *buf, size_t cap);
/* The class or module defining the method of a frame rb_profile_frames gave, when the frame is a
 * method entry (else 0: a block's or a script's iseq). */
VALUE ptmd_ruby_code_frame_owner(const ptmd_ruby_data *rd, VALUE frame);

#endif
