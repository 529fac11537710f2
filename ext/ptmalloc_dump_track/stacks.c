/* A sampled block's stack: the native frames (glibc's backtrace, its unwinder loaded before the first
 * sample), less the tracker's own, and, on a thread holding Ruby's GVL outside GC, the Ruby frames
 * (rb_profile_frames, which allocates nothing), their path and label read from the strings Ruby
 * already has. Ruby is found by name at the start, so that a program without it runs as well; its
 * frames are read only once ruby_init has returned (the VM's own start allocates before its first
 * frame exists), which the tracker learns by standing in for ruby_init, as main calls it. */
#include "track.h"

#include <dlfcn.h>
#include <errno.h>
#include <execinfo.h>
#include <link.h>
#include <string.h>

typedef uintptr_t value;
static struct {
    int (*has_gvl)(void);
    int (*during_gc)(void);
    int (*frames)(int start, int limit, value *buf, int *lines);
    value (*path)(value frame);
    value (*label)(value frame);
    value (*method_name)(value frame);
    char *(*string_ptr)(volatile value *v);
} ruby;
static uint64_t own_start, own_end; /* the tracker's own code: frames there are not the program's */
static volatile int ruby_ready;     /* ruby_init has returned, and Ruby's teardown not begun */
volatile int ptmd_track_forking, ptmd_track_in_flight;

/* Ruby's last end proc (the first registered runs last): after it, finalizers run and the VM is torn
 * down, its frames freed. */
static void ruby_ending(uintptr_t data)
{
    (void)data;
    __atomic_store_n(&ruby_ready, 0, __ATOMIC_RELEASE);
}

__attribute__((visibility("default"))) void ruby_init(void)
{
    void (*real)(void) = (void (*)(void))dlsym(RTLD_NEXT, "ruby_init");
    void (*set_end_proc)(void (*)(uintptr_t), uintptr_t) =
        (void (*)(void (*)(uintptr_t), uintptr_t))dlsym(RTLD_DEFAULT, "rb_set_end_proc");
    if (real) real();
    /* a Ruby linked into the program itself calls its own ruby_init: then no Ruby frame is read, and
     * the dump does not claim any */
    if (!set_end_proc || !ruby.frames) return;
    set_end_proc(ruby_ending, 0);
    __atomic_or_fetch(&ptmalloc_dump_track.flags, PTMD_TRACK_F_RUBY, __ATOMIC_RELEASE);
    __atomic_store_n(&ruby_ready, 1, __ATOMIC_RELEASE);
}

static int find_own(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    uint64_t pc = (uint64_t)(uintptr_t)data;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uint64_t start = info->dlpi_addr + ph->p_vaddr;
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X) || pc < start || pc >= start + ph->p_memsz) continue;
        own_start = start;
        own_end = start + ph->p_memsz;
        return 1;
    }
    return 0;
}

void ptmd_track_stacks_start(void)
{
    void *warm[4];
    backtrace(warm, 4); /* loads the unwinder now, not inside the first sampled malloc */
    dl_iterate_phdr(find_own, (void *)(uintptr_t)&ptmd_track_stacks_start);
    ruby.has_gvl = (int (*)(void))dlsym(RTLD_DEFAULT, "ruby_thread_has_gvl_p");
    ruby.during_gc = (int (*)(void))dlsym(RTLD_DEFAULT, "rb_during_gc");
    ruby.frames = (int (*)(int, int, value *, int *))dlsym(RTLD_DEFAULT, "rb_profile_frames");
    ruby.path = (value(*)(value))dlsym(RTLD_DEFAULT, "rb_profile_frame_path");
    ruby.label = (value(*)(value))dlsym(RTLD_DEFAULT, "rb_profile_frame_label");
    ruby.method_name = (value(*)(value))dlsym(RTLD_DEFAULT, "rb_profile_frame_method_name");
    ruby.string_ptr = (char *(*)(volatile value *))dlsym(RTLD_DEFAULT, "rb_string_value_ptr");
    if (!ruby.has_gvl || !ruby.during_gc || !ruby.path || !ruby.label || !ruby.method_name || !ruby.string_ptr)
        ruby.frames = NULL; /* not a Ruby this knows: no Ruby frames */
}

/* A Ruby String's bytes, or NULL for nil and the other special constants (no heap object is below
 * 4096, and every one is 8-aligned) and for any object that is not a String (rb_string_value_ptr would
 * raise, out of malloc): its type is the low five bits of its first word, RBasic's flags, T_STRING 5
 * in every Ruby. Ruby's paths and labels end in a NUL; 1,024 bytes at most are read. */
static const char *text(value v, size_t *len)
{
    if (v < 4096 || (v & 7) || (*(const value *)v & 0x1f) != 0x05) return NULL;
    const char *p = ruby.string_ptr(&v);
    *len = p ? strnlen(p, 1024) : 0;
    return p;
}

static int ruby_frames(ptmd_track_rframe *out)
{
    if (!(ptmalloc_dump_track.flags & PTMD_TRACK_F_RUBY) || !__atomic_load_n(&ruby_ready, __ATOMIC_ACQUIRE) ||
        !ruby.has_gvl() || ruby.during_gc())
        return 0;
    value frames[PTMD_TRACK_MAX_RUBY];
    int lines[PTMD_TRACK_MAX_RUBY];
    int n = ruby.frames(0, PTMD_TRACK_MAX_RUBY, frames, lines);
    for (int i = 0; i < n; i++) {
        ptmd_track_rframe *f = &out[i];
        *f = (ptmd_track_rframe){ frames[i], NULL, NULL, 0, 0, lines[i] };
        f->path = text(ruby.path(frames[i]), &f->path_len);
        f->label = text(ruby.label(frames[i]), &f->label_len);
        if (!f->label) f->label = text(ruby.method_name(frames[i]), &f->label_len);
    }
    return n < 0 ? 0 : n;
}

void ptmd_track_record(void *p, size_t n)
{
    void *raw[PTMD_TRACK_MAX_NATIVE + 8];
    uint64_t pcs[PTMD_TRACK_MAX_NATIVE];
    ptmd_track_rframe rframes[PTMD_TRACK_MAX_RUBY];
    if (ptmd_track_busy || __atomic_load_n(&ptmd_track_forking, __ATOMIC_SEQ_CST)) return;
    int saved = errno;
    ptmd_track_busy = 1;
    __atomic_add_fetch(&ptmd_track_in_flight, 1, __ATOMIC_SEQ_CST);
    int got = backtrace(raw, PTMD_TRACK_MAX_NATIVE + 8), n_pcs = 0, i = 0;
    while (i < got && (uint64_t)(uintptr_t)raw[i] >= own_start && (uint64_t)(uintptr_t)raw[i] < own_end) i++;
    for (; i < got && n_pcs < PTMD_TRACK_MAX_NATIVE; i++) pcs[n_pcs++] = (uint64_t)(uintptr_t)raw[i];
    int n_ruby = ruby_frames(rframes);
    __atomic_sub_fetch(&ptmd_track_in_flight, 1, __ATOMIC_SEQ_CST);
    ptmd_track_lock();
    ptmd_track_insert((uint64_t)(uintptr_t)p, n, pcs, n_pcs, rframes, n_ruby);
    ptmd_track_unlock();
    ptmd_track_busy = 0;
    errno = saved;
}
