/* When a signal really arrived. Ruby runs a trap handler later, when the main thread next checks its
 * interrupts (with the GVL, up to a time slice after the signal); the handler's log line measures the
 * pause from the arrival, so a thin sigaction handler stamps the time (clock_gettime is
 * async-signal-safe) and passes the signal on to the handler it replaced, Ruby's own. Signal.trap
 * installs Ruby's handler again, so the Ruby side stamps again after each trap. It also names a native
 * handler a trap is about to replace, for the warning signal_handler.rb logs at install. */
#include "bindings/bindings.h"

#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define PTMD_NSIG 65

static struct sigaction chained[PTMD_NSIG];
static volatile uint64_t arrived_ns[PTMD_NSIG];

static void stamp(int sig, siginfo_t *info, void *ctx)
{
    int saved = errno;
    struct timespec ts;
    const struct sigaction *next;
    if (sig <= 0 || sig >= PTMD_NSIG) return;
    if (clock_gettime(CLOCK_MONOTONIC, &ts) == 0)
        arrived_ns[sig] = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    next = &chained[sig];
    errno = saved;
    if (next->sa_flags & SA_SIGINFO) {
        if (next->sa_sigaction) next->sa_sigaction(sig, info, ctx);
    } else if (next->sa_handler != SIG_DFL && next->sa_handler != SIG_IGN && next->sa_handler) {
        next->sa_handler(sig);
    }
    errno = saved;
}

/* _stamp_signal(signo) -> true when the stamping handler is (now) in front of the signal's handler. */
static VALUE rb_ptmd_stamp_signal(VALUE self, VALUE signo)
{
    int sig = NUM2INT(signo);
    struct sigaction now, mine;
    PTMD_UNUSED(self);
    if (sig <= 0 || sig >= PTMD_NSIG) rb_raise(rb_eArgError, "no signal %d", sig);
    if (sigaction(sig, NULL, &now) != 0) rb_sys_fail("sigaction");
    if (now.sa_flags & SA_SIGINFO && now.sa_sigaction == stamp) return Qtrue;
    if (!(now.sa_flags & SA_SIGINFO) && (now.sa_handler == SIG_DFL || now.sa_handler == SIG_IGN)) return Qfalse;
    memset(&mine, 0, sizeof(mine));
    mine.sa_sigaction = stamp;
    mine.sa_mask = now.sa_mask;
    mine.sa_flags = now.sa_flags | SA_SIGINFO;
    chained[sig] = now;
    if (sigaction(sig, &mine, NULL) != 0) rb_sys_fail("sigaction");
    return Qtrue;
}

/* _signal_arrived_ns(signo) -> CLOCK_MONOTONIC nanoseconds of the signal's last arrival, or nil when
 * none was stamped since the last call. */
static VALUE rb_ptmd_signal_arrived_ns(VALUE self, VALUE signo)
{
    int sig = NUM2INT(signo);
    uint64_t t;
    PTMD_UNUSED(self);
    if (sig <= 0 || sig >= PTMD_NSIG) return Qnil;
    t = arrived_ns[sig];
    arrived_ns[sig] = 0;
    return t ? PTMD_U64(t) : Qnil;
}

/* _signal_native_handler(signo) -> the signal's sigaction handler as "symbol in file" (or its address
 * when the loader cannot name it), or nil when the signal is at its default or ignored. Ruby's own
 * handler, which Ruby reports itself through Signal.trap's return value, is named like any other;
 * the caller asks only when Signal.trap said the handler was not Ruby's. */
static VALUE rb_ptmd_signal_native_handler(VALUE self, VALUE signo)
{
    int sig = NUM2INT(signo);
    struct sigaction now;
    const void *fn;
    Dl_info info;
    char text[512];
    PTMD_UNUSED(self);
    if (sig <= 0 || sig >= PTMD_NSIG) rb_raise(rb_eArgError, "no signal %d", sig);
    if (sigaction(sig, NULL, &now) != 0) rb_sys_fail("sigaction");
    if (now.sa_flags & SA_SIGINFO) {
        if (now.sa_sigaction == stamp) return Qnil;
        fn = (const void *)now.sa_sigaction;
    } else {
        if (now.sa_handler == SIG_DFL || now.sa_handler == SIG_IGN) return Qnil;
        fn = (const void *)now.sa_handler;
    }
    if (!fn) return Qnil;
    memset(&info, 0, sizeof(info));
    if (dladdr(fn, &info) && info.dli_fname) {
        if (info.dli_sname && info.dli_saddr == fn)
            snprintf(text, sizeof(text), "%s in %s", info.dli_sname, info.dli_fname);
        else snprintf(text, sizeof(text), "0x%" PRIxPTR " in %s", (uintptr_t)fn, info.dli_fname);
    } else {
        snprintf(text, sizeof(text), "0x%" PRIxPTR, (uintptr_t)fn);
    }
    return rb_str_new_cstr(text);
}

void ptmd_signal_arrival_init(void)
{
    rb_define_singleton_method(ptmd_mPtmallocDump, "_signal_native_handler", rb_ptmd_signal_native_handler, 1);
    rb_define_singleton_method(ptmd_mPtmallocDump, "_stamp_signal", rb_ptmd_stamp_signal, 1);
    rb_define_singleton_method(ptmd_mPtmallocDump, "_signal_arrived_ns", rb_ptmd_signal_arrived_ns, 1);
}
